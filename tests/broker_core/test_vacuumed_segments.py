"""Readers whose snapshot names a segment that a merge replaced and vacuum deleted (D181).

``pubsub maintain`` deletes the files of removed segments after a short grace
(``removedSegmentGracePeriodInSeconds``), so a consumer or reader that polled the log just before a
merge commit may go on to read a file that is gone.  That is no damage: the offsets live on in the
merged segment, and the read must find them there, each message exactly once and in order.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from jobs_worker import append, log_of, set_cursor
from moto_s3 import Root

from broker_core import Client, ConsumerType, InitialPosition, MessageId, Timeout
from broker_core.config import BrokerConfig
from broker_core.errors import SegmentCorrupted
from broker_core.jobs import run_retention, vacuum
from broker_core.log.snapshot import Snapshot
from broker_core.naming import TopicName
from broker_core.topic.scan import ScanTask, scan
from broker_core.topic.topic_log import TopicLog

TOPIC = "persistent://public/default/vacuumed"
SEGMENTS = 12
PER_SEGMENT = 3
WAIT_MS = 10_000
GRACE_MS = 10 * 60_000


@pytest.fixture
def client(any_root: Root) -> Iterator[Client]:
    config = BrokerConfig(fsync_enabled=False, file_system_notifications_enabled=False)  # polls only: no early news
    c = Client(any_root.url, storage_options=any_root.storage_options, broker_config=config)
    yield c
    c.close()


def fill(client: Client, segments: int = SEGMENTS) -> list[bytes]:
    """``segments`` more segments of ``PER_SEGMENT`` messages each; their values.  (The process that writes
    a segment keeps it decoded: ``stale_after_next_poll`` drops those copies, so reads go to the files.)"""
    broker = client._broker  # type: ignore[attr-defined]
    start = log_of(broker, TOPIC).snapshot().next_offset
    for _ in range(segments):
        append(broker, PER_SEGMENT, topic=TOPIC)
    return [f"p:{offset}".encode() for offset in range(start, start + segments * PER_SEGMENT)]


MAINTAIN = """
import json, sys, time
from broker_core.broker.broker import Broker
from broker_core.jobs import merge_segments, vacuum
root, options, topic, grace_ms = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
broker = Broker.for_url(root, storage_options=options)
merged = merge_segments(broker, topic, min_age_ms=0, dry_run=False).result_for(topic)
later = int(time.time() * 1000) + grace_ms + 1000
done = vacuum(broker, topic, min_age_ms=grace_ms, now_ms=later, dry_run=False, enforce_min_age=False)
print(json.dumps({"merged": merged.changed, "deleted": len(done.result_for(topic).deleted_removed)}))
"""


def merge_and_vacuum(root: Root) -> None:
    """What another process's ``pubsub maintain`` does: merge every segment, then vacuum once the grace
    has passed (in a process of its own: this process's cached log state does not see those commits)."""
    out = subprocess.run([sys.executable, "-c", MAINTAIN, root.url, json.dumps(root.storage_options), TOPIC,
                          str(GRACE_MS)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    done = json.loads(out.stdout.strip().splitlines()[-1])
    assert done["merged"] and done["deleted"] >= SEGMENTS - 1, done


def stale_after_next_poll(log: TopicLog, act: Callable[[], None], *,
                          when: Callable[[Snapshot], bool] = lambda snap: True) -> threading.Event:
    """The next poll of ``log`` whose result passes ``when`` returns what it found, but first ``act`` runs
    and the decoded segments are dropped (as a busy cache does): the poller reads with a snapshot from
    just before ``act``'s commits and must go to storage (the race a short grace opens).  The event is
    set once a read has followed."""
    original, read = log.log.snapshot, log._read
    armed, acted, done = [True], [False], threading.Event()

    def snapshot() -> Snapshot:
        snap = original()
        if armed[0] and when(snap):
            armed[0] = False
            act()
            log._cache.clear()
            acted[0] = True
        return snap

    def read_then_tell(*args: Any, **kwargs: Any) -> Any:
        try:
            return read(*args, **kwargs)
        finally:
            if acted[0]:
                done.set()

    log.log.snapshot = snapshot  # type: ignore[method-assign]
    log._read = read_then_tell  # type: ignore[method-assign]
    return done


def test_a_consumer_reads_on_from_the_merged_segment_exactly_once_in_order(client: Client, any_root: Root) -> None:
    """The dispatcher polls the log, finds new segments, and (before it reads them) another process
    merges them and vacuums the originals: the consumer reads them from the merged segment, reporting
    no damage."""
    values = fill(client, 2)
    consumer = client.subscribe(TOPIC, "s", consumer_type=ConsumerType.Exclusive,
                                initial_position=InitialPosition.Earliest)
    got = [consumer.receive(WAIT_MS) for _ in range(len(values))]
    part: Any = consumer._parts[0]  # type: ignore[attr-defined]
    total = SEGMENTS * PER_SEGMENT
    done = stale_after_next_poll(part.log, lambda: merge_and_vacuum(any_root),
                                 when=lambda snap: snap.next_offset >= total)
    values += fill(client, SEGMENTS - 2)
    assert done.wait(WAIT_MS / 1000)  # the dispatcher's own poll found them and read (no receive in between)
    got += [consumer.receive(WAIT_MS) for _ in range(total - len(got))]
    assert [m.data() for m in got] == values
    with pytest.raises(Timeout):  # nothing more, and no damage to report
        consumer.receive(200)
    for msg in got:
        consumer.acknowledge(msg)
    consumer.close()


def test_a_reader_reads_on_from_the_merged_segment_exactly_once_in_order(client: Client, any_root: Root) -> None:
    values = fill(client)
    reader = client.create_reader(TOPIC, MessageId.earliest, receiver_queue_size=2)
    got = [reader.read_next(WAIT_MS) for _ in range(4)]
    part: Any = reader._parts[0]  # type: ignore[attr-defined]
    stale_after_next_poll(part.log, lambda: merge_and_vacuum(any_root))
    got += [reader.read_next(WAIT_MS) for _ in range(len(values) - 4)]
    assert [m.data() for m in got] == values
    assert not reader.has_message_available()
    reader.close()


def test_a_spark_scan_task_reads_on_from_the_merged_segment(client: Client, any_root: Root) -> None:
    """The Spark source's executor side (``scan``) loads the log once per task and reads range after
    range with that snapshot: a task still running when vacuum deletes what a merge replaced reads on."""
    values = fill(client)
    path = "/".join(TopicName.parse(TOPIC).relative_path())
    task = ScanTask(root=any_root.url, topic_path=path, topic=TOPIC, partition=-1, ranges=((0, len(values)),),
                    storage_options=tuple(any_root.storage_options.items()))
    chunks = scan(task, max_rows=PER_SEGMENT)
    got = [v.as_py() for v in next(chunks).rows.column("value")]
    merge_and_vacuum(any_root)
    got += [v.as_py() for chunk in chunks for v in chunk.rows.column("value")]
    assert got == values


def test_a_read_past_segments_retention_retired_and_vacuum_deleted_goes_on_from_the_earliest(
        client: Client, any_root: Root) -> None:
    """Offsets retention retired are no longer stored: a read with an older snapshot returns the ones
    that are (as Pulsar moves a reader on past a deleted ledger), and real damage still raises."""
    fill(client, 4)
    broker = client._broker  # type: ignore[attr-defined]
    path = "/".join(TopicName.parse(TOPIC).relative_path())
    old = TopicLog(broker.io, path)  # another reader's handle, its snapshot taken before retention
    snap = old.snapshot()
    set_cursor(broker, "s", 2 * PER_SEGMENT, topic=TOPIC)
    assert run_retention(broker, TOPIC, dry_run=False).changed
    later = int(time.time() * 1000) + GRACE_MS + 1000
    vacuum(broker, TOPIC, min_age_ms=GRACE_MS, now_ms=later, dry_run=False, enforce_min_age=False)
    rows, offsets = old.read(0, 4 * PER_SEGMENT, snapshot=snap)
    assert offsets.tolist() == list(range(2 * PER_SEGMENT, 4 * PER_SEGMENT))
    assert [v.as_py() for v in rows.column("value")] == [f"p:{o}".encode() for o in offsets]
    live = old.snapshot().segments[-1]
    broker.io.delete(f"{path}/{live.path}")  # a live segment's file gone: damage, reported as before
    with pytest.raises(SegmentCorrupted, match="is missing"):
        TopicLog(broker.io, path).read(live.base_offset, live.end_offset)
