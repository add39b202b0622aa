"""What the disk allows: the storage calls of one local commit, timed alone, beside ``bench_consume.py
--wakeup``'s end-to-end figures.

A producer's batch on a local root becomes visible through a fixed chain of system calls
(``LocalFileIO.write_new`` then ``put_if_absent``, in the durability order of DECISIONS.md D88):

1. the segment: create, write, fsync the file, fsync its directory;
2. the commit: create a temp file, write, fsync it, hard-link it to its version name (from here on
   readers see the commit), fsync the directory (from here on the producer is told), unlink the temp.

With ``fsyncEnabled = false`` the same chain runs without its four fsyncs.  This module runs that
chain with ``os`` calls alone (no library code, no Parquet, no threads) in a directory of the file
system the benchmark writes to, so the end-to-end p50 can be read against the part of it that no
code change can remove.  It also times a bare file create: on ext4 without a journal (this
machine's root file system) a create walks over the inodes freed in the last ~30 s of its block
group (the kernel's ``recently_deleted`` check), which made one create cost 0.5-0.9 ms of CPU after
mass deletions (DECISIONS.md D110); the figure says how much of that a run pays.
"""

from __future__ import annotations

import os
import time
import uuid

import numpy as np

SEGMENT_BYTES = 2_000  # about a segment of 8-10 messages of 100 bytes
COMMIT_BYTES = 900  # about a commit JSON of one add
SLOW_CREATE_US = 100  # a create's CPU above which the run pays for recent deletions (see above)


def _write(path: str, data: bytes, *, fsync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit_chain(directory: str, version: int, *, fsync: bool) -> tuple[float, float, float]:
    """One segment + commit chain in ``directory``: seconds to the link (visible), seconds to the
    end (durable, with ``fsync``), and the calling thread's CPU seconds."""
    cpu_s, started_s = time.thread_time(), time.perf_counter()
    _write(os.path.join(directory, f"part-{uuid.uuid4().hex}.parquet"), b"s" * SEGMENT_BYTES, fsync=fsync)
    if fsync:
        _fsync_dir(directory)
    log = os.path.join(directory, "_delta_log")
    final = os.path.join(log, f"{version:020d}.json")
    tmp = os.path.join(log, f".{version:020d}.json.{uuid.uuid4().hex}.tmp")
    _write(tmp, b"c" * COMMIT_BYTES, fsync=fsync)
    os.link(tmp, final)
    linked_s = time.perf_counter()
    if fsync:
        _fsync_dir(log)
    durable_s = time.perf_counter()
    os.unlink(tmp)
    return linked_s - started_s, durable_s - started_s, time.thread_time() - cpu_s


class DiskFloor:
    """Chains and creates gathered over a benchmark's runs (``measure`` between them), pooled."""

    def __init__(self) -> None:
        self.chains: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
        self.create_cpu_s: list[float] = []
        self._version = 0

    def measure(self, base: str, *, chains: int = 40, creates: int = 40) -> None:
        """Time ``chains`` commit chains with fsync and as many without, and ``creates`` bare file
        creates, in a fresh directory under ``base`` (left for the caller to remove with its runs)."""
        directory = os.path.join(base, f"disk-floor-{uuid.uuid4().hex[:8]}")
        os.makedirs(os.path.join(directory, "_delta_log"))
        for index in range(creates):
            cpu_s = time.thread_time()
            os.close(os.open(os.path.join(directory, f"create-{index}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            self.create_cpu_s.append(time.thread_time() - cpu_s)
        for _ in range(chains):  # alternating, so both see the same moments of the machine
            for fsync in (True, False):
                self._version += 1
                self.chains[fsync].append(commit_chain(directory, self._version, fsync=fsync))

    def lines(self) -> list[str]:
        """The printed table (ms; CPU in us)."""
        if not self.create_cpu_s:
            return []
        out = ["disk floor: the storage calls of one commit alone (os calls in D88's order, no library; "
               "same file system, measured between the runs):",
               f"{'(ms)':<44}{'p50':>8}{'p99':>8}{'CPU p50 (us)':>14}"]
        for fsync, title in ((True, "fsync on"), (False, "fsync off")):
            times = np.asarray(self.chains[fsync]) * 1000
            linked, durable, cpu = times[:, 0], times[:, 1], times[:, 2] * 1000
            out.append(f"{title + ': segment + commit to its link':<44}{np.percentile(linked, 50):>8.2f}"
                       f"{np.percentile(linked, 99):>8.2f}{np.percentile(cpu, 50):>14.0f}")
            if fsync:
                out.append(f"{title + ': ... to its directory fsync':<44}{np.percentile(durable, 50):>8.2f}"
                           f"{np.percentile(durable, 99):>8.2f}")
        creates = np.asarray(self.create_cpu_s) * 1e6
        out.append(f"one file create, CPU (us): p50 {np.percentile(creates, 50):.0f}, p99 "
                   f"{np.percentile(creates, 99):.0f} ({len(creates)} creates; tens of us on a quiet "
                   "file system, 500-900 after mass deletions on ext4 without a journal)")
        if np.percentile(creates, 50) > SLOW_CREATE_US:
            out.append("  creates are slow: many files were removed on this file system in the last ~30 s (another "
                       "benchmark's roots? wait half a minute between runs); both sides pay it, the figures less so")
        return out


__all__ = ["DiskFloor", "commit_chain"]
