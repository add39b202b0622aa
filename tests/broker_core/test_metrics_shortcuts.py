"""The exporter's shortcuts give what the slow path gives: the oldest backlog message's publish time
from a segment's publish-time bounds (no read) equals the time read from the segment, with the first
unacknowledged message at a segment's start or in its middle, and with delayed messages present (D186)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from metrics_helpers import C, families

from broker_core import BrokerConfig, Client
from broker_core.broker.stats import topic_stats
from broker_core.broker.stats_fields import bounded_publish_time_ms
from broker_core.clock import ManualClock
from broker_core.log.segment import TIMESTAMP
from broker_core.metrics.collector import PulsarCollector
from broker_core.metrics.exporter import exposition
from broker_core.metrics.sampling import Sampler
from broker_core.naming import TopicName
from broker_core.producer.bulk import to_segment_rows
from broker_core.subscription.cursor import ConsumerType, new_cursor
from broker_core.topic.topic_log import TopicLog

T = "persistent://public/default/t"
T0_MS = 1_700_000_000_000
NOW_MS = T0_MS + 3_600_000


def segment(values: int, publish_ms: list[int], deliver_ms: list[int | None] | None = None) -> pa.Table:
    """Segment rows of ``values`` messages published at ``publish_ms`` (microsecond offsets kept)."""
    columns: dict[str, pa.Array] = {"value": pa.array([b"v%d" % i for i in range(values)])}
    if deliver_ms is not None:
        columns["deliver_at"] = pa.array([None if d is None else d * 1000 for d in deliver_ms], pa.int64()).cast(
            TIMESTAMP)
    rows, _ = to_segment_rows(pa.table(columns), publish_time_ms=0, max_message_size=1 << 20, default_producer="p")
    micros = pa.array([ms * 1000 + 7 for ms in publish_ms], pa.int64()).cast(TIMESTAMP)
    return rows.set_column(rows.schema.get_field_index("publish_time"), "publish_time", micros)


@pytest.fixture
def topic(tmp_path: Path) -> tuple[Client, TopicLog]:
    (tmp_path / "root").mkdir()
    client = Client(str(tmp_path / "root"), broker_config=BrokerConfig(fsync_enabled=False))
    log = client._broker.topic_log(TopicName.parse(T))
    log.append(segment(3, [T0_MS] * 3), layout=[3])  # offsets 0-2: one batch, one millisecond
    log.append(segment(4, [T0_MS + 10, T0_MS + 12, T0_MS + 11, T0_MS + 13]), layout=[-4])  # 3-6: four times
    log.append(segment(1, [T0_MS + 20]), layout=[1])  # 7
    log.append(segment(3, [T0_MS + 30] * 3, [NOW_MS + 60_000, None, NOW_MS - 1]), layout=[-3])  # 8-10: delayed
    return client, log


def read_publish_ms(log: TopicLog, offset: int) -> int:
    table, _ = log.read(offset, offset + 1, snapshot=log.snapshot())
    return int(pc.cast(table.column("publish_time"), pa.int64())[0].as_py()) // 1000


def test_the_bounds_answer_exactly_when_a_segment_was_published_in_one_millisecond(
        topic: tuple[Client, TopicLog]) -> None:
    client, log = topic
    snap = log.snapshot()
    answered = []
    for offset in range(snap.next_offset):
        bounded = bounded_publish_time_ms(snap, offset)
        if bounded is not None:
            assert bounded == read_publish_ms(log, offset)
            answered.append(offset)
    assert answered == [0, 1, 2, 7, 8, 9, 10]  # the four-times segment is read
    assert bounded_publish_time_ms(snap, snap.next_offset) is None
    client.close()


@pytest.mark.parametrize("first", [0, 1, 3, 5, 7, 9])
def test_the_exported_backlog_age_and_delayed_count_match_a_read_of_the_segments(
        topic: tuple[Client, TopicLog], first: int) -> None:
    """``first``: the subscription's first unacknowledged offset, at a segment's start or mid-segment,
    in a one-millisecond segment or the one of four times; the delayed message at offset 8 counts
    while it is unacknowledged."""
    client, log = topic
    name = TopicName.parse(T)
    client._broker.cursor_store(name, "s").update(lambda _c: new_cursor("s", ConsumerType.Shared, first))
    got = families(exposition(PulsarCollector(Sampler(client._broker), clock=ManualClock(NOW_MS))))
    key = (*C, ("namespace", "public/default"), ("topic", T))
    assert got["pulsar_storage_backlog_age_seconds"][key] == (NOW_MS - read_publish_ms(log, first)) / 1000
    sub = (*C, ("namespace", "public/default"), ("subscription", "s"), ("topic", T))
    assert got["pulsar_subscription_back_log"][sub] == 11 - first
    assert got["pulsar_subscription_delayed"][sub] == (1 if first <= 8 else 0)
    stats = topic_stats(client._broker, name)["partitions"][T]  # what `pubsub topics stats` says
    assert stats["subscriptions"]["s"]["earliestMsgPublishTimeInBacklog"] == read_publish_ms(log, first)
    client.close()


def test_the_inventory_lists_the_internal_topics_that_list_topics_and_partitions_give(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    client = Client(str(tmp_path / "root"), broker_config=BrokerConfig(fsync_enabled=False))
    admin = client._broker.admin
    admin.create_partitioned_topic("persistent://public/default/p", 3)
    client.create_producer("persistent://public/default/p").send(b"x")  # writes one partition at least
    client.create_producer(T).send(b"x")
    client.create_producer("non-persistent://public/default/np").send(b"x")
    slow = sorted((part for name in admin.list_topics("public/default")
                   for part in admin.topic_partitions(name, auto_create=False)), key=str)
    fast = sorted(admin.list_internal_topics("public/default"), key=str)
    assert [str(t) for t in fast] == [str(t) for t in slow]
    assert [str(t) for t in fast if t.is_persistent] == [
        "persistent://public/default/p-partition-0", "persistent://public/default/p-partition-1",
        "persistent://public/default/p-partition-2", T]
    client.close()
