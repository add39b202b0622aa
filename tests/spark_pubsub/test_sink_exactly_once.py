"""A streaming write SIGKILLed mid-batch again and again still writes every input row exactly once.

``sink_job.py`` (file source -> pubsub, one file per micro-batch) runs in its own process group; the
test kills the whole job (driver, JVM, and the PySpark daemons' worker groups, which ``daemon.py``
puts in process groups of their own) once the run has committed a batch: at a
random moment of the next batch, or the instant the next batch's first partition commit shows up
(so the sink's commit is cut short, or Spark has not recorded it yet, and the batch is replayed).
It restarts the job on the same checkpoint until a run finishes; replayed batches route keyless
rows differently, so only the sink's recorded intent keeps every row exactly once.

Deterministic on a busy machine: the partition-commit kills do not race the commit but arm a
start-up hook of the job (``kill_hooks/sitecustomize.py``) that stops the committing process right
after its first partition commit; the random kills use a fixed seed (``PUBSUB_KILL_SEED`` overrides
it; failures print it).  Whatever the kills leave behind (``.tmp`` files of cut-short
put-if-absent writes, staged segments of batches never committed) must be ignored by the readers
and listings the final checks use.
"""

from __future__ import annotations

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
from processes import REPO, child_env, kill_job, process_groups, signal_groups

from broker_core.broker.broker import Broker
from broker_core.naming import TopicName
from broker_core.producer.bulk import STAGED_TXN_DIR
from broker_core.storage import file_io_for

JOB = Path(__file__).with_name("sink_job.py")
FILES, ROWS_PER_FILE, PARTITIONS = 14, 40, 3
# One kill of each kind: at the sink's commit after its first partition (the split commit that
# exactly-once hinges on), and at a random moment.  A second partition-commit kill (this trial had
# three) repeated the first's coverage at the price of one more JVM start (~15 s).
KILL_MODES = ("partition-commit", "random")
DEADLINE_S = 600  # a ceiling: ~2-3 minutes on an idle 2-core machine, 4.5 on a busy one (each restart is a JVM start)
HOOKS = Path(__file__).with_name("kill_hooks")
SEED = int(os.environ.get("PUBSUB_KILL_SEED", "20261125"))


def _start(root: str, source: Path, checkpoint: Path, log: Path, pause_dir: Path) -> subprocess.Popen[bytes]:
    env = child_env(path=[HOOKS], PUBSUB_TEST_PAUSE_DIR=str(pause_dir))
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, str(JOB), root, str(source), str(checkpoint), "orders"],
                                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


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

    rng = random.Random(SEED)
    pause_dir = tmp_path / "pause"
    pause_dir.mkdir()
    deadline = time.monotonic() + DEADLINE_S
    kills = mid_batch = split = 0
    modes = list(KILL_MODES[:1] if any_root.is_s3 else KILL_MODES)  # each restart costs a JVM start
    finished = False
    while not finished:
        assert time.monotonic() < deadline, f"seed {SEED}: the job did not finish; log:\n{log.read_text()[-3000:]}"
        proc = _start(root, source, checkpoint, log, pause_dir)
        groups: list[int] = []
        try:
            if kills < len(modes):
                start = _batches(checkpoint, "commits")
                while proc.poll() is None and _batches(checkpoint, "commits") <= start:
                    assert time.monotonic() < deadline, f"seed {SEED}: no progress; log:\n{log.read_text()[-3000:]}"
                    time.sleep(0.05)
                if modes[kills] == "random":
                    time.sleep(rng.uniform(0.0, 1.2))  # somewhere inside the next batch
                else:  # the next batch's sink commit, stopped by the hook after its first partition
                    (pause_dir / "arm").touch()
                    while proc.poll() is None and not (pause_dir / "paused").exists():
                        assert time.monotonic() < deadline, f"seed {SEED}: no pause; log:\n{log.read_text()[-3000:]}"
                        time.sleep(0.02)
                    groups = process_groups(proc)
                    signal_groups(groups, signal.SIGSTOP)
                    if proc.poll() is None:
                        assert len(set(_sink_txns(root))) > 1, "the paused commit did not split the partitions"
                        split += 1
                    (pause_dir / "paused").unlink(missing_ok=True)
                    (pause_dir / "arm").unlink(missing_ok=True)
                if proc.poll() is None:
                    kill_job(proc, groups)
                    kills += 1
                    mid_batch += _batches(checkpoint, "offsets") > _batches(checkpoint, "commits")
                    continue
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            assert proc.returncode == 0, f"job failed; log:\n{log.read_text()[-3000:]}"
            finished = True
        finally:
            if proc.poll() is None:
                kill_job(proc, groups)

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
    # one sink id, old manifests cleaned; a kill may leave the .tmp file of a cut-short manifest
    # write (vacuum's business), which the library's own listing ignores as this count does
    manifests = [n for n in io.list_dir(f"{STAGED_TXN_DIR}/{sinks[0]}") if n.endswith(".json") and n[0] != "."]
    assert len(sinks) == 1 and len(manifests) <= 1, io.list_dir(f"{STAGED_TXN_DIR}/{sinks[0]}")


def _java_partition(key: str) -> int:
    from broker_core.hashing import java_string_hash

    return java_string_hash(key) % PARTITIONS
