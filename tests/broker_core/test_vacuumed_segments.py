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
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from jobs_worker import append
from moto_s3 import Root

from broker_core import Client, ConsumerType, InitialPosition, MessageId
from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig
from broker_core.log.snapshot import Snapshot
from broker_core.topic.topic_log import TopicLog

TOPIC = "persistent://public/default/vacuumed"
SEGMENTS = 12
PER_SEGMENT = 3
WAIT_MS = 10_000
GRACE_MS = 10 * 60_000


@pytest.fixture
def client(any_root: Root) -> Iterator[Client]:
    c = Client(any_root.url, storage_options=any_root.storage_options, broker_config=BrokerConfig(fsync_enabled=False))
    yield c
    c.close()


def fill(client: Client) -> list[bytes]:
    """``SEGMENTS`` segments of ``PER_SEGMENT`` messages each, written by another ``Broker`` (as by another
    process: a writer's own process keeps the segments it wrote decoded, and would never read the files)."""
    own = client._broker  # type: ignore[attr-defined]
    writer = Broker(own.io, own.config)
    for _ in range(SEGMENTS):
        append(writer, PER_SEGMENT, topic=TOPIC)
    return [f"p:{offset}".encode() for offset in range(SEGMENTS * PER_SEGMENT)]


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
                          str(GRACE_MS)], capture_output=True, text=True, timeout=120, check=True)
    done = json.loads(out.stdout.strip().splitlines()[-1])
    assert done["merged"] and done["deleted"] >= SEGMENTS - 1, done


def stale_after_next_poll(log: TopicLog, act: Callable[[], None]) -> None:
    """The next poll of ``log`` returns what it finds, then ``act`` runs and the decoded segments are
    dropped (as a busy cache does): the poller reads with a snapshot from just before ``act``'s commits
    and must go to storage (the race a short grace opens)."""
    original = log.log.snapshot
    armed = [True]

    def snapshot() -> Snapshot:
        snap = original()
        if armed[0]:
            armed[0] = False
            act()
            log._cache.clear()
        return snap

    log.log.snapshot = snapshot  # type: ignore[method-assign]


def test_a_consumer_reads_on_from_the_merged_segment_exactly_once_in_order(client: Client, any_root: Root) -> None:
    values = fill(client)
    consumer = client.subscribe(TOPIC, "s", consumer_type=ConsumerType.Exclusive,
                                initial_position=InitialPosition.Earliest, receiver_queue_size=2)
    got = [consumer.receive(WAIT_MS) for _ in range(4)]
    part: Any = consumer._parts[0]  # type: ignore[attr-defined]
    stale_after_next_poll(part.log, lambda: merge_and_vacuum(any_root))
    got += [consumer.receive(WAIT_MS) for _ in range(len(values) - 4)]
    assert [m.data() for m in got] == values
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
