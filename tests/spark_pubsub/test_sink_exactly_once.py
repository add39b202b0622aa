"""A streaming write SIGKILLed mid-batch again and again still writes every input row exactly once.

``sink_job.py`` (file source -> pubsub, one file per micro-batch) runs in its own process group; the
test kills the whole job (driver, JVM, and the PySpark daemons' worker groups, which ``daemon.py``
puts in process groups of their own) once the run has committed a batch: at a
random moment of the next batch, or the instant the next batch's first partition commit shows up
(so the sink's commit is cut short, or Spark has not recorded it yet, and the batch is replayed).
It restarts the job on the same checkpoint until a run finishes; replayed batches route keyless
rows differently, so only the sink's recorded intent keeps every row exactly once.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from moto_s3 import Root

from broker_core.broker import Broker
from broker_core.bulk import STAGED_TXN_DIR
from broker_core.naming import TopicName
from broker_core.storage import file_io_for

JOB = Path(__file__).with_name("sink_job.py")
REPO = Path(__file__).resolve().parents[2]
FILES, ROWS_PER_FILE, PARTITIONS = 14, 40, 3
KILL_MODES = ("partition-commit", "random", "partition-commit")
EXTRA_PARTITION_COMMIT_KILLS = 1  # until one kill has cut a sink commit between two partitions
DEADLINE_S = 420  # ~2-3 minutes on an idle 2-core machine; every restart costs a JVM start


def _start(root: str, source: Path, checkpoint: Path, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, str(JOB), root, str(source), str(checkpoint), "orders"],
                                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _job_groups(proc: subprocess.Popen[bytes]) -> list[int]:
    """The process groups of the job: its own (driver, JVM) and those its PySpark daemons created
    for their workers (``daemon.py`` calls ``setpgid``), found by walking its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    tree, todo = set(), [proc.pid]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo += children.get(pid, [])
    groups = set()
    for pid in tree:
        with contextlib.suppress(OSError):
            groups.add(os.getpgid(pid))
    # only groups led by the job or one of its descendants, the daemons' first
    return sorted((g for g in groups if g in tree), key=lambda g: g == proc.pid)


def _signal(groups: list[int], sig: signal.Signals) -> None:
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)


def _kill_group(proc: subprocess.Popen[bytes], groups: list[int] | None = None) -> None:
    """SIGKILL the job and its Python workers (SIGSTOP first, so none runs on while others die)."""
    groups = sorted({*(groups or []), *_job_groups(proc)} if proc.poll() is None else set(groups or []),
                    key=lambda g: g == proc.pid)
    _signal(groups, signal.SIGSTOP)
    _signal(groups, signal.SIGKILL)
    proc.wait(timeout=30)


def _log_commits(root: str) -> int:
    """How many commits the topic's partition logs hold in total (a listing per partition)."""
    io = file_io_for(root)
    total = 0
    for i in range(PARTITIONS):
        names = io.list_dir(f"public/default/persistent/orders-partition-{i}/_delta_log")
        total += sum(1 for name in names if name.endswith(".json") and name[0] != ".")
    return total


def _sink_txns(root: str) -> list[int | None]:
    """The last micro-batch each partition recorded for the (one) sink."""
    broker = Broker.for_url(root)
    out = []
    for internal in broker.partitions("orders", auto_create=False):
        snap = broker.topic_log(TopicName.parse(str(internal)), create=False).snapshot()
        sink = [t.version for app, t in snap.txns.items() if app.startswith("pubsub.sink.")]
        out.append(max(sink, default=None))
    return out


def _batches(checkpoint: Path, log: str) -> int:
    directory = checkpoint / log
    return len([p for p in directory.iterdir() if p.name.isdigit()]) if directory.exists() else 0


@pytest.mark.slow
@pytest.mark.timeout(DEADLINE_S + 60)
def test_sigkilled_streaming_write_is_exactly_once(tmp_path: Path, any_root: Root) -> None:
    """On S3 (the job reaches it through the ``AWS_*`` environment) with fewer planned kills."""
    root, source, checkpoint = any_root.url, tmp_path / "in", tmp_path / "ckpt"
    log = tmp_path / "job.log"
    Broker.for_url(root).admin.create_partitioned_topic("orders", PARTITIONS)
    source.mkdir()
    for f in range(FILES):
        with open(source / f"part-{f:03d}.json", "w") as handle:
            for r in range(ROWS_PER_FILE):
                i = f * ROWS_PER_FILE + r
                handle.write(json.dumps({"id": i, "k": None if i % 2 else f"key-{i % 7}"}) + "\n")

    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    deadline = time.monotonic() + DEADLINE_S
    kills = mid_batch = split = 0
    modes = list(KILL_MODES[:1] if any_root.is_s3 else KILL_MODES)  # each restart costs a JVM start
    planned = len(modes)
    finished = False
    while not finished:
        assert time.monotonic() < deadline, f"the job did not finish in time; log:\n{log.read_text()[-3000:]}"
        proc = _start(root, source, checkpoint, log)
        groups: list[int] = []
        try:
            if kills < len(modes):
                start = _batches(checkpoint, "commits")
                while proc.poll() is None and _batches(checkpoint, "commits") <= start:
                    assert time.monotonic() < deadline, f"no progress; log:\n{log.read_text()[-3000:]}"
                    time.sleep(0.05)
                if modes[kills] == "random":
                    time.sleep(rng.uniform(0.0, 1.2))  # somewhere inside the next batch
                else:  # the instant the next batch's first partition commit is visible
                    groups = _job_groups(proc)
                    seen = _log_commits(root)
                    while proc.poll() is None and _log_commits(root) == seen:
                        assert time.monotonic() < deadline, f"no progress; log:\n{log.read_text()[-3000:]}"
                        time.sleep(0.0005)
                    _signal(groups, signal.SIGSTOP)  # freeze the committing worker at once, then look
                    if len(set(_sink_txns(root))) > 1:
                        split += 1
                    elif not split and len(modes) < planned + EXTRA_PARTITION_COMMIT_KILLS:
                        modes.append("partition-commit")
                if proc.poll() is None:
                    _kill_group(proc, groups)
                    kills += 1
                    mid_batch += _batches(checkpoint, "offsets") > _batches(checkpoint, "commits")
                    continue
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            assert proc.returncode == 0, f"job failed; log:\n{log.read_text()[-3000:]}"
            finished = True
        finally:
            if proc.poll() is None:
                _kill_group(proc, groups)

    assert kills == len(modes), f"the job finished after {kills} of {len(modes)} kills; give it more files"
    assert split >= 1, f"none of the {modes.count('partition-commit')} partition-commit kills split a commit"
    assert mid_batch >= 1, "no kill landed inside a micro-batch (between its offsets and commit log entries)"
    broker = Broker.for_url(root)
    ids: list[int] = []
    for internal in broker.partitions("orders", auto_create=False):
        topic_log = broker.topic_log(TopicName.parse(str(internal)), create=False)
        snap = topic_log.snapshot()
        rows, _ = topic_log.read(snap.first_offset, snap.next_offset, snapshot=snap)
        ids += [int(v) for v in rows.column("value").to_pylist()]
        for key in rows.column("key").to_pylist():  # keyed rows stay on their key's partition
            assert key is None or broker.partitions("orders")[_java_partition(key)] == internal
    total = FILES * ROWS_PER_FILE
    duplicates = len(ids) - len(set(ids))
    assert duplicates == 0, f"{duplicates} duplicate rows"
    assert sorted(ids) == list(range(total)), f"{total - len(set(ids))} rows missing"
    io = file_io_for(root)
    sinks = io.list_dir(STAGED_TXN_DIR)
    assert len(sinks) == 1 and len(io.list_dir(f"{STAGED_TXN_DIR}/{sinks[0]}")) <= 1  # one sink, old manifests gone


def _java_partition(key: str) -> int:
    from broker_core.hashing import java_string_hash

    return java_string_hash(key) % PARTITIONS
