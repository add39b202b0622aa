"""Durability across processes: racing writers, SIGKILL at any instant, dedup after a crash, fencing.

The writers are subprocesses running ``durability_worker.py``; they talk over stdin/stdout
(``ready`` / ``go`` / ``started`` / ``ack <first> <end>`` / ``done <json>``), so the test knows exactly which
messages were acknowledged before a kill.  deltalake checks run in ``delta_probe.py`` (see
``test_delta_interop.py`` for why).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from delta_probe import values_digest
from log_helpers import TOPIC_DIR, open_topic, producer_table, read_all
from moto_s3 import Root
from processes import run_probe

from broker_core.errors import ProducerFenced
from broker_core.log.checkpoint import LOG_DIR
from broker_core.producer.registry import ProducerAccessMode, ProducerRegistry
from broker_core.topic.topic_log import TopicLog

WORKER = Path(__file__).with_name("durability_worker.py")
PROBE = Path(__file__).with_name("delta_probe.py")


class Worker:
    """A ``durability_worker.py`` subprocess and its line protocol.

    stdout is only ever read through its file object (never ``communicate()``, whose raw reads
    would skip what ``readline`` already buffered); stderr goes to a file so it cannot block.
    """

    def __init__(self, kind: str, **args: Any) -> None:
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed by finish() / kill()
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), kind, json.dumps(args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )

    def _stderr(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()

    def line(self) -> str:
        assert self.proc.stdout is not None
        text = self.proc.stdout.readline()
        if not text:
            self.proc.wait(timeout=30)
            raise AssertionError(
                f"worker exited with {self.proc.returncode} before answering:\n{self._stderr()}"
            )
        return text.rstrip("\n")

    def expect_ready(self) -> None:
        assert self.line() == "ready"

    def go(self, *arguments: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(" ".join(["go", *map(str, arguments)]) + "\n")
        self.proc.stdin.flush()

    def _rest(self) -> list[str]:
        assert self.proc.stdout is not None and self.proc.stdin is not None
        out = self.proc.stdout.read()  # to EOF: the worker has exited or is exiting
        self.proc.wait(timeout=30)
        self.proc.stdin.close()
        self.proc.stdout.close()
        return out.splitlines()

    def finish(self) -> list[str]:
        """Wait for a normal exit; return the remaining stdout lines."""
        lines = self._rest()
        assert self.proc.returncode == 0, self._stderr()
        self.stderr.close()
        return lines

    def close(self) -> None:
        """Kill the worker if it still runs (cleanup on any path)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=30)
        self.stderr.close()

    def kill(self) -> list[str]:
        """SIGKILL now; return whatever it printed before dying."""
        os.kill(self.proc.pid, signal.SIGKILL)
        lines = self._rest()
        assert self.proc.returncode == -signal.SIGKILL, self._stderr()
        self.stderr.close()
        return lines


def _done(lines: list[str]) -> dict[str, Any]:
    assert lines and lines[-1].startswith("done "), lines[-5:]
    return json.loads(lines[-1][len("done ") :])


def _acks(lines: list[str]) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for kind, a, b in (line.split() for line in lines if line.startswith("ack "))]


def _probe(root: Path | str, storage_options: dict[str, str] | None = None) -> dict[str, Any]:
    args = {"path": f"{root}/{TOPIC_DIR}", "storage_options": storage_options or None}
    return run_probe(PROBE, payload=args)


def _columns(table: pa.Table) -> tuple[np.ndarray, np.ndarray, list[bytes | None]]:
    producers = np.asarray(table.column("producer_name").to_pylist(), dtype=object)
    seqs = table.column("sequence_id").to_numpy()
    return producers, seqs, table.column("value").to_pylist()


def _check_ids_dense(topic: TopicLog, offsets: np.ndarray) -> None:
    snap = topic.snapshot()
    entries, batches = topic.ids_for_offsets(offsets, snapshot=snap)
    assert np.all(np.diff(entries) >= 0)
    assert np.array_equal(np.unique(entries), np.arange(snap.next_entry_id))
    pairs = entries * 1_000 + batches  # batches < 500 here: a unique key per (entry, batch)
    assert len(np.unique(pairs)) == len(pairs)


# --- many processes, one topic ---------------------------------------------------------------------------


@pytest.mark.slow
def test_four_processes_appending_to_one_topic(any_root: Root) -> None:
    root = any_root.url
    open_topic(root)
    writers, per_writer = 4, 5_000 if any_root.is_s3 else 25_000
    workers = [
        Worker(
            "append",
            root=root,
            path=TOPIC_DIR,
            producer=f"w{i}",
            start=0,
            count=per_writer,
            max_rows=100 if any_root.is_s3 else 500,
            seed=i,
            checkpoint_interval=100,
            acks=False,
            wait_go=True,
        )
        for i in range(writers)
    ]
    for worker in workers:
        worker.expect_ready()
    for worker in workers:  # all start appending at once
        worker.go()
    summaries = [_done(worker.finish()) for worker in workers]
    assert sum(s["written"] for s in summaries) == writers * per_writer
    assert sum(s["lost_races"] for s in summaries) > 0, "the writers never raced: no conflict was exercised"

    topic = open_topic(root, create=False)
    snap = topic.snapshot()
    total = writers * per_writer
    # one commit per append, dense versions, nothing lost or doubled
    assert snap.version == sum(s["appends"] for s in summaries)
    log_files = topic.io.list_dir(f"{TOPIC_DIR}/{LOG_DIR}")
    commits = sorted(name for name in log_files if name.endswith(".json"))
    assert commits == [f"{v:020d}.json" for v in range(snap.version + 1)]
    checkpoints = {int(name[:20]) for name in log_files if name.endswith(".checkpoint.parquet")}
    assert checkpoints >= set(range(100, snap.version + 1, 100))  # written under contention
    assert (snap.first_offset, snap.next_offset) == (0, total)

    table, offsets = topic.read(0, total, snapshot=snap)
    assert np.array_equal(offsets, np.arange(total))
    producers, seqs, values = _columns(table)
    for i in range(writers):
        mine = seqs[producers == f"w{i}"]
        assert np.array_equal(mine, np.arange(per_writer)), f"w{i}: sequence ids out of order or missing"
        assert snap.txn_version(f"w{i}") == per_writer - 1
    assert values == [f"{p}:{s}".encode() for p, s in zip(producers.tolist(), seqs.tolist(), strict=True)]
    assert len(set(values)) == total
    _check_ids_dense(topic, offsets)

    seen = _probe(root, any_root.storage_options)
    assert seen["num_rows"] == total
    assert seen["digest"] == values_digest(table)
    assert seen["version"] == snap.version


# --- crashes ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_dedup_survives_a_producer_killed_mid_way(tmp_path: Path) -> None:
    open_topic(tmp_path)
    args = {"root": str(tmp_path), "path": TOPIC_DIR, "producer": "dd", "start": 0}
    first = Worker("append", **args, count=10**9, max_rows=100, seed=1, checkpoint_interval=10)
    first.expect_ready()
    assert first.line() == "started"
    acked = 0
    while acked < 2_000:  # it never finishes by itself: the kill always lands mid-way
        line = first.line()
        assert line.startswith("ack "), line
        acked = int(line.split()[2])
    lines = first.kill()
    acked = max([acked, *(b for _, b in _acks(lines))])
    committed = open_topic(tmp_path, create=False).snapshot().next_offset
    assert committed >= acked

    # the producer restarts and, not knowing what landed, resends everything from sequence 0 on
    total = committed + 5_000
    second = Worker("append", **args, count=total, max_rows=150, seed=2, checkpoint_interval=10)
    summary = _done(second.finish())
    assert summary["written"] == total - committed

    topic = open_topic(tmp_path, create=False)
    table, offsets = read_all(topic)
    _, seqs, values = _columns(table)
    assert np.array_equal(seqs, np.arange(total))
    assert np.array_equal(offsets, np.arange(total))
    assert values == [f"dd:{s}".encode() for s in range(total)]
    assert topic.snapshot().txn_version("dd") == total - 1


def _check_after_crash(
    root: Path | str, trial: int, in_log: int, verified: int, acked_end: int, context: str
) -> tuple[int, int]:
    """Open the log afresh after a kill and check the offsets from ``verified`` on; return the new
    (``in_log``, ``verified``)."""
    topic = open_topic(root, checkpoint_interval=10, create=False)  # a fresh open after the crash
    snap = topic.snapshot()
    table, offsets = topic.read(verified, snap.next_offset, snapshot=snap)
    assert np.array_equal(offsets, np.arange(verified, snap.next_offset)), context
    producers, seqs, values = _columns(table)
    assert set(producers.tolist()) <= {"writer"}, context
    # exactly the next sequence ids, each once, in order: nothing lost, nothing doubled
    assert np.array_equal(seqs, np.arange(in_log, in_log + len(seqs))), context
    assert values == [f"writer:{s}".encode() for s in seqs.tolist()], context
    in_log += len(seqs)
    assert in_log >= acked_end, f"{context}: acknowledged messages are missing"
    assert snap.txn_version("writer") == (in_log - 1 if in_log else None), context

    # the log takes a further append at the very next version
    result = topic.append(producer_table("checker", [trial]), layout=[1], dedup=True)
    assert (result.version, result.num_written) == (snap.version + 1, 1), context
    assert topic.read(snap.next_offset, snap.next_offset + 1)[0].column("value").to_pylist() == [
        f"checker:{trial}".encode()
    ]
    verified = snap.next_offset + 1
    return in_log, verified


@pytest.mark.slow
def test_a_writer_killed_at_random_moments_loses_nothing_acknowledged(any_root: Root) -> None:
    """50 trials (12 on S3): a writer appends in a loop and is SIGKILLed 0-300 ms in; then the log must
    open, hold every acknowledged message exactly once with dense offsets, and take a further append."""
    root = any_root.url
    open_topic(root, checkpoint_interval=10)
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    trials = 12 if any_root.is_s3 else 50
    acked_end = 0  # writer sequence ids [0, acked_end) were acknowledged
    in_log = 0  # writer sequence ids [0, in_log) are in the log (in-flight commits may exceed acks)
    verified = 0  # offsets [0, verified) were checked

    def standby() -> Worker:  # booted ahead of time: interpreter start-up overlaps the checks below
        return Worker(
            "append",
            root=root,
            path=TOPIC_DIR,
            producer="writer",
            count=10**9,
            max_rows=20,
            seed=rng.randrange(2**32),
            checkpoint_interval=10,
            wait_go=True,
        )

    worker = standby()
    try:
        for trial in range(trials):
            context = f"seed={seed} trial={trial}"
            worker.expect_ready()
            worker.go(acked_end)  # a restarted producer resends from its last acknowledgement
            assert worker.line() == "started"
            time.sleep(rng.uniform(0, 0.3))  # not synchronisation: the random moment of the kill
            acks = _acks(worker.kill())
            worker = standby()
            for first, end in acks:
                assert first == acked_end, context  # acknowledgements are contiguous
                acked_end = end
            in_log, verified = _check_after_crash(root, trial, in_log, verified, acked_end, context)
    finally:
        worker.close()

    topic = open_topic(root, create=False)
    table, offsets = read_all(topic)
    producers, seqs, _ = _columns(table)
    assert np.array_equal(offsets, np.arange(in_log + trials))
    assert np.array_equal(seqs[producers == "writer"], np.arange(in_log))
    assert np.array_equal(seqs[producers == "checker"], np.arange(trials))
    _check_ids_dense(topic, offsets)
    seen = _probe(root, any_root.storage_options)
    assert seen["num_rows"] == table.num_rows
    assert seen["digest"] == values_digest(table)


# --- access modes across processes -----------------------------------------------------------------------


@pytest.mark.slow
def test_exclusive_refuses_another_process_and_fencing_takes_over(tmp_path: Path) -> None:
    topic = open_topic(tmp_path)
    registry = ProducerRegistry(topic.io, TOPIC_DIR)
    now_ms = 1_000_000  # the registry takes time as an argument: leases are tested without sleeping
    epoch = registry.register("p1", ProducerAccessMode.Exclusive, now_ms=now_ms, lease_ms=60_000)
    topic.bump_producer_epoch(to=epoch)  # what the client's producer does after registering
    topic.append(producer_table("p1", [0]), layout=[1], producer_epoch=epoch, dedup=True)

    worker = Worker("take-over", root=str(tmp_path), path=TOPIC_DIR, now_ms=now_ms + 1_000)
    outcome = _done(worker.finish())
    assert outcome["Exclusive"].startswith("busy"), outcome  # p1's lease is live
    assert outcome["Shared"].startswith("busy"), outcome
    assert outcome["epoch"] == epoch + 1
    assert outcome["version"] is not None
    assert outcome["live"] == {"p3": "ExclusiveWithFencing"}
    assert outcome["stale_epoch"] == "fenced"

    version = topic.snapshot().version
    with pytest.raises(ProducerFenced):
        topic.append(producer_table("p1", [1]), layout=[1], producer_epoch=epoch, dedup=True)
    with pytest.raises(ProducerFenced):
        registry.renew("p1", now_ms=now_ms + 2_000, lease_ms=60_000)
    assert topic.snapshot().version == version
    assert read_all(topic)[0].column("value").to_pylist() == [b"p1:0", b"p3:0"]
    # once p3's lease has run out, a new exclusive producer may register
    with pytest.raises(ProducerFenced):
        registry.register("p5", ProducerAccessMode.Exclusive, now_ms=now_ms + 2_000, lease_ms=60_000)
    registry.register("p5", ProducerAccessMode.Exclusive, now_ms=now_ms + 61_001, lease_ms=60_000)
    assert registry.live_producers(now_ms=now_ms + 61_002) == {"p5": "Exclusive"}


@pytest.mark.slow
def test_processes_racing_for_exclusive_access_have_one_winner(tmp_path: Path) -> None:
    open_topic(tmp_path)
    workers = [
        Worker("register", root=str(tmp_path), path=TOPIC_DIR, name=f"x{i}", mode="Exclusive", now_ms=5_000)
        for i in range(4)
    ]
    for worker in workers:
        worker.expect_ready()
    for worker in workers:
        worker.go()
    answers = [worker.finish()[-1] for worker in workers]
    assert sorted(answers) == ["done busy"] * 3 + ["done registered"]
    winner = f"x{answers.index('done registered')}"
    registry = ProducerRegistry(open_topic(tmp_path, create=False).io, TOPIC_DIR)
    assert registry.live_producers(now_ms=5_001) == {winner: "Exclusive"}


# --- races found while writing these tests, and fixed ------------------------------------------------------


def test_the_last_fencing_registration_holds_the_topic_whatever_order_the_bumps_land(tmp_path: Path) -> None:
    topic = open_topic(tmp_path, fsync=False)
    registry = ProducerRegistry(topic.io, TOPIC_DIR)
    epoch_a = registry.register("A", ProducerAccessMode.ExclusiveWithFencing, now_ms=0, lease_ms=60_000)
    # B's registration evicts A
    epoch_b = registry.register("B", ProducerAccessMode.ExclusiveWithFencing, now_ms=1, lease_ms=60_000)
    topic.bump_producer_epoch(to=epoch_b)  # B (another process) bumps first ...
    topic.bump_producer_epoch(to=epoch_a)  # ... A, paused since its registration, bumps after
    assert registry.live_producers(now_ms=2) == {"B": "ExclusiveWithFencing"}
    with pytest.raises(ProducerFenced):
        topic.append(producer_table("A", [0]), layout=[1], producer_epoch=epoch_a)
    topic.append(producer_table("B", [0]), layout=[1], producer_epoch=epoch_b)


def test_a_versioned_state_update_is_never_lost_to_cleanup(tmp_path: Path) -> None:
    from broker_core.log.state_store import VersionedState

    io = open_topic(tmp_path, fsync=False).io
    slow = VersionedState(io, "state", keep_versions=5)
    others = VersionedState(io, "state", keep_versions=5)
    others.update(lambda doc: {"count": 0, "names": []})
    paused = [True]

    def add_name(doc: dict[str, Any] | None) -> dict[str, Any]:
        assert doc is not None
        if paused[0]:  # the slow writer has read version 0; 12 updates (and cleanups) land meanwhile
            paused[0] = False
            for _ in range(12):
                others.update(lambda d: {**(d or {}), "count": (d or {})["count"] + 1})
        return {**doc, "names": [*doc["names"], "slow"]}

    slow.update(add_name)
    _, doc = VersionedState(io, "state", keep_versions=5).latest()
    assert doc is not None
    assert doc["count"] == 12
    assert doc["names"] == ["slow"]
