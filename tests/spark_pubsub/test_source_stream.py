"""Streaming reads without a subscription: where a query starts, how much each trigger takes, new
topics, data loss, key-sliced partitions, and replays of a batch reading the same rows."""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows
from source_job import (
    Collector,
    batch_sizes,
    create_partitioned,
    make_root,
    names,
    produce,
    run_available_now,
    source,
    start_continuous,
)

from broker_core import Admin, Client
from broker_core.broker.broker import Broker
from broker_core.clock import ManualClock
from broker_core.log.actions import Remove
from broker_core.naming import TopicName
from spark_pubsub.offsets import PartitionPlanner
from spark_pubsub.options import SourceOptions, parse_options
from spark_pubsub.schema import SOURCE_SCHEMA
from spark_pubsub.stream_reader import PubSubStreamReader

T0 = 1_700_000_000_000


@pytest.fixture
def root(tmp_path: Path) -> str:
    return make_root(tmp_path / "root")


def reader_for(root: str, **options: str) -> PubSubStreamReader:
    values = {k.lower(): v for k, v in options.items()}
    values["path"] = root
    return PubSubStreamReader(parse_options(SourceOptions, values))


def read_batch(reader: PubSubStreamReader, start: dict[str, Any], end: dict[str, Any]) -> pa.Table:
    batches = [b for p in reader.partitions(start, end) for b in reader.read(p)]
    return pa.Table.from_batches(batches) if batches else pa.table({})


def remove_first_segments(root: str, topic: str, count: int) -> None:
    """What retention does: a Delta ``remove`` of the oldest ``count`` segments."""
    log = Broker.for_url(root).topic_log(TopicName.parse(topic))
    now = int(time.time() * 1000)
    log.log.commit(
        lambda snap: [
            Remove(path=seg.path, deletion_timestamp=now, data_change=True) for seg in snap.segments[:count]
        ],
        operation="DELETE",
    )
    assert log.snapshot().first_offset > 0


# -- where a query starts ----------------------------------------------------------------------------------


def test_stream_schema_is_the_source_schema(spark: Any, root: str) -> None:
    Admin.open(root).create_topic("t")  # load() checks that the topic exists
    assert source(spark, root, topic="t").schema == SOURCE_SCHEMA


def test_starting_offsets_latest_json_and_timestamp(spark: Any, root: str, tmp_path: Path) -> None:
    create_partitioned(root, "o", 2)
    clock = ManualClock(T0)
    client = Client(root, clock=clock)
    produce(
        root,
        "o",
        [f"p{i % 2}-{i // 2}" for i in range(20)],
        partition=[i % 2 for i in range(20)],
        client=client,
    )

    # latest: nothing of the backlog; then, from the checkpoint, exactly what came after
    latest = Collector()
    run_available_now(
        source(spark, root, topic="o", startingOffsets="latest"), tmp_path / "ck-latest", latest
    )
    assert latest.values == []
    clock.advance(1000)
    produce(root, "o", names("new", 6), client=client)
    run_available_now(
        source(spark, root, topic="o", startingOffsets="latest"), tmp_path / "ck-latest", latest
    )
    assert sorted(latest.values) == sorted(names("new", 6))

    # JSON: partition 0 from offset 3, partition 1 from its latest (-1)
    spec = '{"o-partition-0": 3, "persistent://public/default/o-partition-1": -1}'
    chosen = Collector(("value", "partition", "offset"))
    run_available_now(source(spark, root, topic="o", startingOffsets=spec), tmp_path / "ck-json", chosen)
    p0_total = Broker.for_url(root).topic_log(TopicName.parse("o-partition-0")).snapshot().next_offset
    assert sorted((r[1], r[2]) for r in chosen.rows) == [(0, o) for o in range(3, p0_total)]

    # earliest (-2 everywhere) reads it all; startingTimestamp (inclusive) only the later send
    everything = Collector()
    run_available_now(
        source(spark, root, topic="o", startingOffsets='{"o-partition-0": -2, "o-partition-1": -2}'),
        tmp_path / "ck-earliest",
        everything,
    )
    assert len(everything.values) == 26
    by_time = Collector()
    run_available_now(
        source(spark, root, topic="o", startingTimestamp=T0 + 1000), tmp_path / "ck-ts", by_time
    )
    assert sorted(by_time.values) == sorted(names("new", 6))
    client.close()


# -- admission control -------------------------------------------------------------------------------------


def test_max_messages_and_max_bytes_per_trigger(spark: Any, root: str, tmp_path: Path) -> None:
    create_partitioned(root, "lim", 2)
    produce(root, "lim", names("m", 100), keys=lambda i: f"k{i}")

    # minMessagesPerTrigger does not hold back an AvailableNow run: it reads everything, then stops
    by_count = Collector()
    query = run_available_now(
        source(
            spark,
            root,
            topic="lim",
            startingOffsets="earliest",
            maxMessagesPerTrigger=30,
            minMessagesPerTrigger=1000,
        ),
        tmp_path / "ck-rows",
        by_count,
    )
    assert batch_sizes(query) == [30, 30, 30, 10]
    assert sorted(by_count.values) == sorted(names("m", 100))

    options = parse_options(SourceOptions, {"path": root, "topic": "lim"})
    per_message = PartitionPlanner(options)._avg_message_bytes()  # the estimate the limit is turned into
    by_size = Collector()
    query = run_available_now(
        source(spark, root, topic="lim", startingOffsets="earliest", maxBytesPerTrigger=per_message * 40),
        tmp_path / "ck-bytes",
        by_size,
    )
    assert batch_sizes(query) == [40, 40, 20]
    assert sorted(by_size.values) == sorted(names("m", 100))


def test_min_messages_per_trigger_waits_for_enough_messages(spark: Any, root: str, tmp_path: Path) -> None:
    produce(root, "few", names("a", 20))
    got = Collector()
    query = start_continuous(
        source(
            spark,
            root,
            topic="few",
            startingOffsets="earliest",
            minMessagesPerTrigger=50,
            maxTriggerDelay="1h",
        ),
        tmp_path / "ck",
        got,
    )
    try:
        query.processAllAvailable()
        assert got.values == []  # 20 < 50: no batch yet
        produce(root, "few", names("b", 40))
        query.processAllAvailable()
        assert [len(rows) for _, rows in got.batches if rows] == [60]  # then one batch with everything
    finally:
        query.stop()


def test_max_trigger_delay_releases_a_small_batch(root: str) -> None:
    produce(root, "few", names("a", 5))
    reader = reader_for(
        root, topic="few", startingOffsets="earliest", minMessagesPerTrigger="10", maxTriggerDelay="150ms"
    )
    start = reader.initialOffset()
    limit = reader.getDefaultReadLimit()
    assert isinstance(limit, ReadMinRows) and limit.min_rows == 10
    assert reader.latestOffset(start, limit) == start  # too few, and the delay has not passed
    time.sleep(0.2)
    end = reader.latestOffset(start, limit)
    assert end != start and read_batch(reader, start, end).num_rows == 5
    # once a batch ran, the delay counts again from then
    produce(root, "few", names("b", 3))
    assert reader.latestOffset(end, limit) == end
    # a trigger that reads all available ignores the minimum
    assert read_batch(reader, end, reader.latestOffset(end, ReadAllAvailable())).num_rows == 3


# -- topics appearing while a query runs -------------------------------------------------------------------


def test_topics_pattern_picks_up_a_topic_created_while_the_query_runs(
    spark: Any, root: str, tmp_path: Path
) -> None:
    produce(root, "pat-a", names("a", 5))
    produce(root, "other", names("o", 5))
    got = Collector(("value", "topic", "internalTopic"))
    query = start_continuous(
        source(spark, root, topicsPattern="persistent://public/default/pat-.*", startingOffsets="earliest"),
        tmp_path / "ck",
        got,
    )
    try:
        query.processAllAvailable()
        assert sorted(got.values) == names("a", 5)
        create_partitioned(root, "pat-b", 2)
        produce(root, "pat-b", names("b", 8))
        # the pattern is re-resolved at most once a second, so this may take a few idle triggers
        deadline = time.monotonic() + 30
        while len(got.values) < 13 and time.monotonic() < deadline:
            query.processAllAvailable()
        assert sorted(got.values) == sorted(names("a", 5) + names("b", 8))  # the new topic from its start
        assert {r[2] for r in got.rows} == {
            "persistent://public/default/pat-a",
            "persistent://public/default/pat-b-partition-0",
            "persistent://public/default/pat-b-partition-1",
        }
        # topic is the name the user subscribes to, as in Spark's Kafka source
        assert {r[1] for r in got.rows} == {"persistent://public/default/pat-a", "persistent://public/default/pat-b"}
    finally:
        query.stop()


# -- data loss ---------------------------------------------------------------------------------------------


def test_fail_on_data_loss(spark: Any, root: str, tmp_path: Path) -> None:
    produce(root, "dl", names("a", 10))
    strict, lenient = Collector(), Collector()
    for collector, fail, ck in ((strict, "true", "ck-strict"), (lenient, "false", "ck-lenient")):
        run_available_now(
            source(spark, root, topic="dl", startingOffsets="earliest", failOnDataLoss=fail),
            tmp_path / ck,
            collector,
        )
        assert collector.values == names("a", 10)
    produce(root, "dl", names("b", 10))
    produce(root, "dl", names("c", 10))
    remove_first_segments(root, "dl", 2)  # a and b: the queries still needed b

    with pytest.raises(Exception, match="failOnDataLoss") as info:
        run_available_now(
            source(spark, root, topic="dl", failOnDataLoss="true"), tmp_path / "ck-strict", strict
        )
    assert "removed by retention" in str(info.value)
    assert strict.values == names("a", 10)
    run_available_now(
        source(spark, root, topic="dl", failOnDataLoss="false"), tmp_path / "ck-lenient", lenient
    )
    assert lenient.values == names("a", 10) + names("c", 10)  # b skipped

    # the same for a bounded read that asks for removed offsets
    read = spark.read.format("pubsub").option("topic", "dl").option("startingOffsets", '{"dl": 0}')
    with pytest.raises(Exception, match="failOnDataLoss"):
        read.load(root).collect()
    assert sorted(
        r.value.decode() for r in read.option("failOnDataLoss", "false").load(root).collect()
    ) == names("c", 10)


# -- minPartitions in a stream -----------------------------------------------------------------------------


def test_min_partitions_in_a_stream_keeps_each_key_in_one_task(spark: Any, root: str, tmp_path: Path) -> None:
    produce(root, "mp", names("m", 300), keys=lambda i: f"key-{i % 17}")
    seen_partitions: list[int] = []
    got = Collector(
        ("key", "offset", "task"), on_batch=lambda df, _: seen_partitions.append(df.rdd.getNumPartitions())
    )
    df = source(spark, root, topic="mp", startingOffsets="earliest", minPartitions=5)
    run_available_now(df.withColumn("task", F.spark_partition_id()), tmp_path / "ck", got)
    assert seen_partitions == [5]
    tasks_of_key: dict[str, set[int]] = {}
    for key, _, task in got.rows:
        tasks_of_key.setdefault(key, set()).add(task)
    assert len(tasks_of_key) == 17 and all(len(t) == 1 for t in tasks_of_key.values())
    assert sorted(r[1] for r in got.rows) == list(range(300))


# -- a batch is a pure function of its offsets -------------------------------------------------------------


def test_replaying_a_range_batch_reads_the_same_rows(root: str) -> None:
    create_partitioned(root, "rp", 3)
    produce(root, "rp", names("m", 90), keys=lambda i: f"k{i % 11}")
    reader = reader_for(root, topic="rp", startingOffsets="earliest", minPartitions="4")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(50))
    first = read_batch(reader, start, end)
    assert first.num_rows == 50
    produce(root, "rp", names("later", 30))  # more data must not change the batch
    again = pickle.loads(pickle.dumps(reader))  # the copy an executor, or a restarted query, gets
    assert read_batch(again, start, end).equals(first)
    assert read_batch(reader, start, end).equals(first)
    assert read_batch(reader_for(root, topic="rp", minPartitions="4"), start, end).equals(first)  # a new run


def test_replaying_a_claimed_batch_reads_the_same_rows(root: str) -> None:
    produce(root, "cl", names("m", 40), keys=lambda i: f"k{i % 7}")
    options = {
        "topic": "cl",
        "subscription": "s",
        "subscriptionType": "Key_Shared",
        "subscriptionInitialPosition": "Earliest",
    }
    one = reader_for(root, consumerName="one", **options)
    two = reader_for(root, consumerName="two", **options)
    try:
        start_one, start_two = one.initialOffset(), two.initialOffset()
        end_one = one.latestOffset(start_one, ReadMaxRows(1000))
        end_two = two.latestOffset(start_two, ReadMaxRows(1000))
        first = read_batch(one, start_one, end_one)
        second = read_batch(two, start_two, end_two)
        values = first.column("value").to_pylist() + second.column("value").to_pylist()
        assert sorted(v.decode() for v in values) == sorted(names("m", 40))  # disjoint, all of it
        produce(root, "cl", names("later", 10), keys=lambda i: f"k{i % 7}")
        one.commit(end_one)  # acknowledging does not change what the batch is
        assert read_batch(pickle.loads(pickle.dumps(one)), start_one, end_one).equals(first)
        assert read_batch(two, start_two, end_two).equals(second)
    finally:
        one.stop()
        two.stop()
