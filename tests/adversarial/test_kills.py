"""SIGKILL at random points while a consumer acknowledges: at-least-once, exactly as promised.

The durability tests (``tests/broker_core/test_durability.py``, ``test_subscription_processes.py``)
kill writers, and consumers while they process a message; the jobs' tests kill retention, TTL,
checkpoints, vacuum, log cleanup (``test_jobs_retention.py``), merges (``test_jobs_merge_segments.py``)
and compaction (``test_compaction.py``) mid-run on both roots.  The angle left is the acknowledgment
itself: a Shared consumer (``ack_kill_worker.py``) acknowledges in groups, each committed by an
explicit flush, and is SIGKILLed at a seeded random instant, so the kill lands before, inside or
after a cursor commit.  Trials follow one another on one subscription; then:

- a message whose acknowledgment commit returned (``committed``) is never delivered again, to any
  later consumer;
- every message is either committed, in the one group whose commit the kill interrupted (it may or
  may not have landed), or delivered again later: none is lost;
- ``pubsub topics check`` finds the log and the cursor whole.

The second test kills a process that produces and runs merge, checkpoint and retention in turn
(``job_kill_worker.py``) and checks what a user would after a crash, which the jobs' own kill tests
check at the log's level: ``pubsub topics check`` passes, a reader finds every acknowledged message
once and in order, and the jobs rerun to completion.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from moto_s3 import Root
from processes import child_env

from broker_core import Client, ConsumerType, MessageId
from broker_core.broker.broker import Broker
from broker_core.cli import main as cli_main
from broker_core.errors import Timeout
from broker_core.jobs import checkpoint, merge_segments, run_retention
from broker_core.storage import file_io_for

T = "persistent://public/default/acks"
SUBSCRIPTION = "s"
WORKER = Path(__file__).with_name("ack_kill_worker.py")
JOB_WORKER = Path(__file__).with_name("job_kill_worker.py")
_LEASE_MS = 1_000  # a killed consumer's messages are redelivered this long after its last renewal


class Trial:
    """One worker's run, parsed from what it printed before it died."""

    def __init__(self, lines: list[str]) -> None:
        self.got: list[str] = []
        self.committed: set[str] = set()
        self.uncertain: set[str] = set()  # acking printed, committed not: the commit may have landed
        for line in lines:
            word, _, rest = line.partition(" ")
            if word == "got":
                self.got.append(rest)
            elif word == "acking":
                self.uncertain = set(rest.split())
            elif word == "committed":
                self.committed |= set(rest.split())
                self.uncertain = set()
        self.done = "done" in lines


def _run_trial(root: Root, seed: int, kill_after_s: float) -> Trial:
    args = {"root": root.url, "topic": T, "subscription": SUBSCRIPTION, "seed": seed}
    proc = subprocess.Popen([sys.executable, str(WORKER), json.dumps(args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env())
    assert proc.stdout is not None
    lines: list[str] = []
    ready = proc.stdout.readline().strip()
    assert ready == "ready", (ready, proc.stderr.read() if proc.stderr else "")
    killer = threading.Timer(kill_after_s, lambda: proc.poll() is None and proc.send_signal(signal.SIGKILL))
    killer.start()
    try:
        lines = [line.strip() for line in proc.stdout]
        proc.wait(timeout=60)
    finally:
        killer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode in (0, -signal.SIGKILL), stderr[-3000:]
    return Trial(lines)


def _drain(root: Root) -> list[str]:
    """Everything still deliverable, received and acknowledged by a consumer in this process."""
    client = Client(root.url, storage_options=root.storage_options or None)
    consumer = client.subscribe(T, SUBSCRIPTION, consumer_type=ConsumerType.Shared)
    got = []
    while True:
        try:
            message = consumer.receive(3 * _LEASE_MS)  # past the killed consumers' leases
        except Timeout:
            break
        got.append(message.data().decode())
        consumer.acknowledge(message)
    consumer.close()
    client.close()
    return got


@pytest.mark.slow
def test_a_consumer_killed_while_it_acknowledges_never_sees_a_committed_ack_again_and_loses_nothing(
        any_root: Root, capsys: pytest.CaptureFixture[str]) -> None:
    io = file_io_for(any_root.url, storage_options=any_root.storage_options or None)
    io.replace("_pubsub/broker.toml", f"consumerLeaseMs = {_LEASE_MS}\n".encode())
    trials, total = (4, 120) if any_root.is_s3 else (8, 400)
    client = Client(any_root.url, storage_options=any_root.storage_options or None)
    client.subscribe(T, SUBSCRIPTION, consumer_type=ConsumerType.Shared).close()  # from the first message on
    producer = client.create_producer(T, batching_enabled=True, batching_max_messages=50)
    for i in range(total):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    producer.close()
    client.close()
    every = {f"m{i}" for i in range(total)}

    rng = random.Random(26_170)
    runs: list[Trial] = []
    for trial in range(trials):
        runs.append(_run_trial(any_root, seed=trial, kill_after_s=rng.uniform(0.0, 0.4)))
    drained = _drain(any_root)

    kills = sum(not run.done for run in runs)
    assert kills, "no trial was killed: the kill points missed the acknowledgments"
    for index, run in enumerate(runs):
        later = {value for other in runs[index + 1:] for value in other.got} | set(drained)
        again = run.committed & later
        assert not again, f"trial {index}: acknowledged and committed, yet delivered again: {sorted(again)}"
    committed = {value for run in runs for value in run.committed}
    uncertain = {value for run in runs for value in run.uncertain}
    lost = every - committed - uncertain - set(drained)
    assert not lost, f"messages lost: {sorted(lost)}"
    assert {value for run in runs for value in run.got} | set(drained) <= every

    capsys.readouterr()
    args = ["--root", any_root.url]
    for key, value in any_root.storage_options.items():
        args += ["--storage-option", f"{key}={value}"]
    code = cli_main([*args, "topics", "check", T])
    out = capsys.readouterr()
    assert code == 0, out.out + out.err


def _kill_after_events(proc: subprocess.Popen[str], wanted: str, count: int, rng: random.Random) -> list[str]:
    """SIGKILL the worker a random few ms after its ``count``-th line starting with ``wanted`` (kill points
    counted in the worker's own events, not in wall-clock time); return every line it printed."""
    assert proc.stdout is not None
    seen: list[str] = []
    while sum(line.startswith(wanted) for line in seen) < count:
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else "the worker exited"
        seen.append(line.strip())
    threading.Event().wait(rng.uniform(0.0, 0.02))  # the random moment of the kill
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err[-3000:]
    return seen + out.splitlines()


def _check(root: Root, capsys: pytest.CaptureFixture[str], topic: str) -> None:
    capsys.readouterr()
    args = ["--root", root.url]
    for key, value in root.storage_options.items():
        args += ["--storage-option", f"{key}={value}"]
    code = cli_main([*args, "topics", "check", topic])
    out = capsys.readouterr()
    assert code == 0, out.out + out.err


def _read_values(root: Root, topic: str) -> list[str]:
    client = Client(root.url, storage_options=root.storage_options or None)
    reader = client.create_reader(topic, MessageId.earliest)
    values = []
    while reader.has_message_available():
        values.append(reader.read_next(10_000).data().decode())
    reader.close()
    client.close()
    return values


@pytest.mark.slow
def test_maintenance_jobs_killed_mid_run_leave_a_checked_log_with_every_message_and_rerun_cleanly(
        any_root: Root, capsys: pytest.CaptureFixture[str]) -> None:
    """A producer and merge / checkpoint / retention in one process, SIGKILLed after a seeded number of
    its own events (6 trials on a folder, 3 on S3); after each kill ``topics check`` passes and a reader
    finds every acknowledged message once, in order; at the end the jobs rerun to completion."""
    topic = "persistent://public/default/jobs"
    client = Client(any_root.url, storage_options=any_root.storage_options or None)
    client.subscribe(topic, "keep", consumer_type=ConsumerType.Shared).close()  # retention keeps everything
    client.close()
    rng = random.Random(26_174)
    trials = 3 if any_root.is_s3 else 6
    acked: list[str] = []
    jobs_seen = job_kills = 0
    for trial in range(trials):
        args = {"root": any_root.url, "topic": topic, "trial": trial, "seed": 100 + trial}
        proc = subprocess.Popen([sys.executable, str(JOB_WORKER), json.dumps(args)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=child_env())
        wanted = rng.choice(["acked ", "merged", "checkpointed", "retained"])
        lines = _kill_after_events(proc, wanted, rng.randint(1, 3) if wanted == "acked " else 1, rng)
        job_kills += wanted != "acked "
        acked += [line.split()[1] for line in lines if line.startswith("acked ")]
        jobs_seen += sum(line in ("merged", "checkpointed", "retained") for line in lines)
        _check(any_root, capsys, topic)
        values = _read_values(any_root, topic)
        assert len(values) == len(set(values)), "a message is there twice"
        assert [v for v in values if v in set(acked)] == acked, "an acknowledged message is missing or moved"
    assert job_kills and jobs_seen >= job_kills, (job_kills, jobs_seen)  # the seed kills after jobs too

    broker = Broker.for_url(any_root.url, storage_options=any_root.storage_options or None)
    merge_segments(broker, topic, min_age_ms=0, min_segments=2, dry_run=False)
    checkpoint(broker, topic)
    run_retention(broker, topic, dry_run=False)
    _check(any_root, capsys, topic)
    values = _read_values(any_root, topic)
    assert [v for v in values if v in set(acked)] == acked
