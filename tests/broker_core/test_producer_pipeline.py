"""Commits on object stores: requests per commit, and the pipelined producer (issue #13, DECISIONS D76).

A writer that committed the log's tip itself commits the next version with one conditional PUT and
the deleted-topic check (one HEAD), reading nothing (``log/writer_tip.py``); the producer uploads
the segments of its next batches while a commit is in flight and commits them in groups
(``client/producer_pipeline.py``).  Requests are recorded per key on an in-process memory store; the
clock that decides how long a writer trusts its tip is frozen or advanced by the tests.  The slow
test at the end SIGKILLs a pipelined producer at random moments on both backends.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from log_helpers import TOPIC_DIR, producer_table, read_all
from moto_s3 import Root
from test_durability import _probe

from broker_core import Admin, Client, MessageId, Result
from broker_core.errors import InvalidMessage, TopicDeleted
from broker_core.jobs import vacuum
from broker_core.log import writer_tip
from broker_core.storage import StoreOps, file_io_for
from broker_core.topic.topic_log import TopicLog

WORKER = Path(__file__).with_name("pipeline_worker.py")
T = "persistent://public/default/t"


class Recording(StoreOps):
    """Delegates to ``inner`` and records ``(request type, key)``; ``fail(key, data)`` makes PUTs fail."""

    def __init__(self, inner: StoreOps) -> None:
        self.inner = inner
        self.store = inner.store
        self.counts = inner.counts
        self.log: list[tuple[str, str]] = []
        self.fail: Any = None
        self.before_put: Any = None
        self.put_delay_s = 0.0
        self._lock = threading.Lock()

    def _note(self, kind: str, key: str) -> None:
        with self._lock:
            self.log.append((kind, key))

    def get(self, key: str) -> bytes | None:
        self._note("GET", key)
        return self.inner.get(key)

    def head(self, key: str) -> dict[str, Any] | None:
        self._note("HEAD", key)
        return self.inner.head(key)

    def put(self, key: str, data: Any, *, create: bool) -> None:
        self._note("PUT", key)
        if self.before_put is not None:
            self.before_put(key)
        if self.put_delay_s:
            time.sleep(self.put_delay_s)  # a slow store, so that commits are in flight while sends go on
        if self.fail is not None and self.fail(key, bytes(data)):
            raise OSError(f"injected failure writing {key}")
        self.inner.put(key, data, create=create)

    def list_delimited(self, prefix: str) -> tuple[list[str], list[str]]:
        self._note("LIST", prefix)
        return self.inner.list_delimited(prefix)

    def list_all(self, prefix: str) -> list[str]:
        self._note("LIST", prefix)
        return self.inner.list_all(prefix)

    def delete(self, keys: list[str]) -> None:
        self._note("DELETE", ",".join(keys))
        self.inner.delete(keys)

    def under(self, prefix: str) -> list[tuple[str, str]]:
        with self._lock:
            return [(kind, key) for kind, key in self.log if key.startswith(prefix)]


def _kind(key: str) -> str:
    return "log" if "/_delta_log/" in key else "segment" if "/part-" in key else "marker" if "deleted" in key else key


def _summary(entries: list[tuple[str, str]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for kind, key in entries:
        name = f"{kind} {_kind(key)}"
        out[name] = out.get(name, 0) + 1
    return out


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The clock a writer's trust in its own tip is measured with, frozen until a test moves it."""
    now = [1000.0]
    monkeypatch.setattr(writer_tip, "monotonic_s", lambda: now[0])
    return now


@pytest.fixture
def memory() -> Iterator[tuple[str, Recording]]:
    url = f"memory://pipeline{uuid.uuid4().hex[:12]}/root"
    io = file_io_for(url)
    recording = Recording(io.ops)
    io.ops = recording
    yield url, recording


def _topic(url: str) -> TopicLog:
    topic = TopicLog(file_io_for(url), TOPIC_DIR)
    topic.create(name=T)
    return topic


# --- requests per commit ------------------------------------------------------------------------------------


def test_a_writer_on_its_own_tip_commits_with_a_put_and_a_check_and_reads_nothing(
        memory: tuple[str, Recording], clock: list[float]) -> None:
    url, ops = memory
    topic = _topic(url)
    topic.append(producer_table("p", [0]), layout=[1], dedup=True)  # loads the log, reads it
    ops.log.clear()
    for i in range(1, 6):
        topic.append(producer_table("p", [i]), layout=[1], dedup=True)
    per_commit = {k: v / 5 for k, v in _summary(ops.under(TOPIC_DIR) + ops.under("_pubsub/deleted")).items()}
    # the segment PUT, the conditional PUT of the commit, the deleted-topic check: nothing else
    # (before: 9, with four GETs of the last and next versions and a HEAD per written file)
    assert per_commit == {"PUT segment": 1, "PUT log": 1, "HEAD marker": 1}, per_commit
    assert topic.snapshot().version == 6
    assert read_all(topic)[0].column("sequence_id").to_pylist() == list(range(6))


def test_a_writer_idle_for_longer_than_its_commit_took_reads_its_tip_first(
        memory: tuple[str, Recording], clock: list[float]) -> None:
    url, ops = memory
    topic = _topic(url)
    topic.append(producer_table("p", [0]), layout=[1])
    clock[0] += 5.0  # idle: the last commit "took" no time on the frozen clock, so this is past it
    ops.log.clear()
    topic.append(producer_table("p", [1]), layout=[1])
    reads = [(kind, key.rsplit("/", 1)[-1]) for kind, key in ops.under(TOPIC_DIR) if kind != "PUT"]
    assert reads == [("GET", f"{1:020d}.json"), ("GET", f"{2:020d}.json"), ("HEAD", f"{3:020d}.json")]


def test_a_writer_whose_tip_another_writer_moved_loses_the_put_reads_what_it_missed_and_commits(
        memory: tuple[str, Recording], clock: list[float]) -> None:
    url, ops = memory
    first = _topic(url)
    second = TopicLog(file_io_for(url), TOPIC_DIR)
    first.append(producer_table("a", [0]), layout=[1], dedup=True)
    second.append(producer_table("b", [0]), layout=[1], dedup=True)
    second.append(producer_table("b", [1]), layout=[1], dedup=True)
    ops.log.clear()
    result = first.append(producer_table("a", [1, 0]), layout=[2], dedup=True)  # trusts version 1: stale
    assert result.version == 4 and result.kept.tolist() == [True, False]
    log_requests = [(kind, key.rsplit("/", 1)[-1]) for kind, key in ops.under(f"{TOPIC_DIR}/_delta_log")]
    assert log_requests[0] == ("PUT", f"{2:020d}.json")  # straight to the put, which is refused ...
    assert ("GET", f"{2:020d}.json") in log_requests and ("GET", f"{3:020d}.json") in log_requests  # ... so it reads
    assert log_requests[-1] == ("PUT", f"{4:020d}.json")
    table, offsets = read_all(first)
    assert table.column("producer_name").to_pylist() == ["a", "b", "b", "a"]
    assert offsets.tolist() == [0, 1, 2, 3]


def test_a_topic_deleted_between_two_trusted_commits_gets_nothing_written_under_it(
        memory: tuple[str, Recording], clock: list[float]) -> None:
    url, ops = memory
    Admin.open(url).create_topic(T)
    topic = TopicLog(file_io_for(url), TOPIC_DIR)
    topic.append(producer_table("p", [0]), layout=[1])
    Admin.open(url).delete_topic(T, force=True)  # tombstone commit 2, the marker, every key removed
    ops.log.clear()
    with pytest.raises(TopicDeleted):
        topic.append(producer_table("p", [1]), layout=[1])  # trusted: straight to the put of version 2
    log_requests = [(kind, key.rsplit("/", 1)[-1]) for kind, key in ops.under(f"{TOPIC_DIR}/_delta_log")]
    assert log_requests[0] == ("PUT", f"{2:020d}.json")  # succeeds (the log is gone): only the marker tells
    assert file_io_for(url).list_dir(TOPIC_DIR) == []  # the commit and the segment were taken back


def test_a_writer_idle_through_a_deletion_and_a_re_creation_writes_nothing_into_the_new_topic(
        memory: tuple[str, Recording], clock: list[float]) -> None:
    url, _ = memory
    admin = Admin.open(url)
    admin.create_topic(T)
    old = TopicLog(file_io_for(url), TOPIC_DIR)
    old_id = old.live_snapshot().metadata.id
    for i in range(3):
        old.append(producer_table("p", [i]), layout=[1], topic_id=old_id)
    admin.delete_topic(T, force=True)
    admin.create_topic(T)
    clock[0] += 5.0
    with pytest.raises(TopicDeleted):
        old.append(producer_table("p", [3]), layout=[1], topic_id=old_id)
    fresh = TopicLog(file_io_for(url), TOPIC_DIR)
    assert fresh.snapshot().version == 0 and fresh.snapshot().next_offset == 0
    assert [name for name in file_io_for(url).list_dir(TOPIC_DIR) if name.startswith("part-")] == []


# --- the pipelined producer -----------------------------------------------------------------------------


def _client(url: str) -> Client:
    """A client whose producers renew their leases once an hour: a renewal is an anchored write too,
    and its deleted-topic check must not land among the requests a test counts."""
    file_io_for(url).put_if_absent("_pubsub/broker.toml", b"producerLeaseMs = 3600000\n")
    return Client(url)


def test_a_pipelined_producer_commits_groups_of_uploaded_batches_with_two_requests_each(
        memory: tuple[str, Recording], clock: list[float]) -> None:
    url, ops = memory
    client = _client(url)
    try:
        producer = client.create_producer(T, batching_enabled=True, batching_max_messages=100,
                                          batching_max_publish_delay_ms=60_000,  # batches cut by size only
                                          max_pending_messages=2000, block_if_queue_full=True)
        producer.send(b"first")  # registration, the first commit: not what is counted
        ops.log.clear()
        uploaded = threading.Semaphore(0)

        def hold_the_first_commit(key: str) -> None:
            if "/part-" in key:
                uploaded.release()
            elif "/_delta_log/" in key and not hold_the_first_commit.done:  # type: ignore[attr-defined]
                hold_the_first_commit.done = True  # type: ignore[attr-defined]
                for _ in range(6):  # until more batches than this commit's have uploaded behind it
                    assert uploaded.acquire(timeout=30)

        hold_the_first_commit.done = False  # type: ignore[attr-defined]
        ops.before_put = hold_the_first_commit
        order: list[int] = []
        for i in range(3000):
            producer.send_async(f"m{i}".encode(), lambda res, _id, i=i: order.append(i) if res == Result.Ok else None)
        producer.flush()
        assert order == list(range(3000))  # callbacks in send order, each after its commit
        requests = _summary(ops.under(TOPIC_DIR + "/_delta_log") + ops.under(TOPIC_DIR + "/part-")
                            + ops.under("_pubsub/deleted"))
        commits = requests["PUT log"]
        assert requests == {"PUT segment": 30, "PUT log": commits, "HEAD marker": commits}, requests
        assert commits < 30  # the batches uploaded behind the held commit went in one commit
        reader = client.create_reader(T, MessageId.earliest)
        values = [reader.read_next(5000).data() for _ in range(3001)]
        assert values == [b"first"] + [f"m{i}".encode() for i in range(3000)]
        producer.close()
    finally:
        client.close()


def test_a_failed_upload_fails_its_own_batch_in_order_and_later_batches_commit(
        memory: tuple[str, Recording]) -> None:
    url, ops = memory
    client = _client(url)
    try:
        producer = client.create_producer(T, batching_enabled=True, batching_max_messages=10,
                                          batching_max_publish_delay_ms=60_000,  # batches cut by size only
                                          max_pending_messages=200, block_if_queue_full=True)
        producer.send(b"first")
        ops.fail = lambda key, data: "/part-" in key and b"m25" in data  # the third batch's segment
        outcomes: list[tuple[int, Result]] = []
        for i in range(100):
            producer.send_async(f"m{i}".encode(), lambda res, _id, i=i: outcomes.append((i, res)))
        producer.flush()
        assert [i for i, _ in outcomes] == list(range(100))  # every callback, in send order
        failed = [i for i, res in outcomes if res != Result.Ok]
        assert failed == list(range(20, 30))  # exactly the third batch
        table, _ = read_all(TopicLog(file_io_for(url), TOPIC_DIR))
        expected = [b"first"] + [f"m{i}".encode() for i in range(100) if not 20 <= i < 30]
        assert table.column("value").to_pylist() == expected
        producer.close()
    finally:
        client.close()


def test_close_waits_for_the_commits_in_flight(memory: tuple[str, Recording]) -> None:
    url, ops = memory
    client = _client(url)
    producer = client.create_producer(T, batching_enabled=True, batching_max_messages=50,
                                      max_pending_messages=1000, block_if_queue_full=True)
    producer.send(b"first")
    ops.put_delay_s = 0.02
    acked: list[int] = []
    for i in range(500):
        producer.send_async(b"x", lambda res, _id, i=i: acked.append(i) if res == Result.Ok else None)
    producer.close()
    assert acked == list(range(500))
    client.close()
    topic = TopicLog(file_io_for(url), TOPIC_DIR)
    assert topic.snapshot().next_offset == 501


# --- SIGKILL trials -----------------------------------------------------------------------------------------


class _Worker:
    """A ``pipeline_worker.py`` subprocess (stderr to a file so it cannot block)."""

    def __init__(self, root: str) -> None:
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed by kill() / close()
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), __import__("json").dumps(
                {"root": root, "topic": T, "batch": 40, "max_pending": 400})],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
        )

    def line(self) -> str:
        assert self.proc.stdout is not None
        text = self.proc.stdout.readline()
        if not text:
            self.proc.wait(timeout=30)
            self.stderr.seek(0)
            raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.stderr.read()}")
        return text.rstrip("\n")

    def go(self, first: int) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"go {first}\n")
        self.proc.stdin.flush()

    def kill(self) -> list[str]:
        os.kill(self.proc.pid, signal.SIGKILL)
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()
        self.proc.wait(timeout=30)
        self.close()
        return out.splitlines()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=30)
        self.stderr.close()


@pytest.mark.slow
def test_a_pipelined_producer_killed_mid_flight_loses_and_duplicates_nothing(any_root: Root) -> None:
    """SIGKILL a producer with many batches in flight (6 trials, 3 on S3); after each, the log holds
    every acknowledged message exactly once, in order; a segment uploaded but never committed is
    never visible (readers and deltalake see exactly the log), and vacuum removes it."""
    root = any_root.url
    io = file_io_for(root, storage_options=any_root.storage_options)
    io.put_if_absent("_pubsub/broker.toml", b"fsyncEnabled = false\nproducerLeaseMs = 300\n"
                                            b"brokerDeduplicationEnabled = true\n")
    Admin.open(root).create_topic(T)
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    acked_end = 0
    worker = _Worker(root)
    try:
        for trial in range(3 if any_root.is_s3 else 6):
            context = f"seed={seed} trial={trial}"
            assert worker.line() == "ready", context
            worker.go(acked_end)
            assert worker.line() == "started", context
            standby = _Worker(root)  # its interpreter starts while this one runs and the log is checked
            time.sleep(rng.uniform(0.02, 0.25))  # not synchronisation: the random moment of the kill
            lines = worker.kill()
            worker = standby
            assert not [line for line in lines if line.startswith("error")], (context, lines[:5])
            ends = [int(line.split()[1]) for line in lines if line.startswith("ack ")]
            acked_end = max([acked_end, *ends])
            topic = TopicLog(file_io_for(root, storage_options=any_root.storage_options), TOPIC_DIR)
            table, _ = read_all(topic)
            seqs = table.column("sequence_id").to_numpy()
            assert np.array_equal(seqs, np.arange(len(seqs))), context  # no loss, no duplicate, in order
            assert len(seqs) >= acked_end, context  # everything acknowledged is there
            assert table.column("value").to_pylist() == [f"{T}:{s}".encode() for s in seqs], context
    finally:
        worker.close()
    topic = TopicLog(file_io_for(root, storage_options=any_root.storage_options), TOPIC_DIR)
    table, _ = read_all(topic)
    live = {seg.path for seg in topic.snapshot().segments}
    on_storage = {name for name in topic.io.list_dir(TOPIC_DIR) if name.startswith("part-")}
    assert live <= on_storage
    seen = _probe(root, any_root.storage_options)  # deltalake reads only what the log commits
    assert seen["num_rows"] == table.num_rows
    client = Client(root)
    try:
        vacuum(client._broker, T, min_age_ms=0, dry_run=False, enforce_min_age=False)
    finally:
        client.close()
    assert {name for name in topic.io.list_dir(TOPIC_DIR) if name.startswith("part-")} == live
    assert read_all(TopicLog(topic.io, TOPIC_DIR))[0].equals(table)


def test_bad_pipeline_input_is_refused_before_anything_is_written(memory: tuple[str, Recording]) -> None:
    url, ops = memory
    topic = _topic(url)
    ops.log.clear()
    with pytest.raises(ValueError, match="does not cover"):
        topic.prepare(producer_table("p", [0, 1]), layout=[3])
    with pytest.raises(InvalidMessage, match="reserved prefix"):
        topic.prepare(producer_table("pubsub.x", [0]), layout=[1])
    assert ops.under(TOPIC_DIR) == []
