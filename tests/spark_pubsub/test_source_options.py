"""The source's options, good and bad, and what a bounded read returns for each of them.

Parsing and the readers' constructors run in this process (no Spark); a few tests go through
``spark.read.format("pubsub")`` to show that the error reaching the user still names the option.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from source_job import create_partitioned, make_root, names, produce

from broker_core import Admin, Client, MessageId
from broker_core.clock import ManualClock
from broker_core.errors import InvalidConfiguration, OperationNotSupported
from spark_pubsub.batch_reader import PubSubBatchReader
from spark_pubsub.offsets import PartitionPlanner
from spark_pubsub.options import SourceOptions, parse_options
from spark_pubsub.schema import SOURCE_SCHEMA
from spark_pubsub.stream_reader import PubSubStreamReader

T0 = 1_700_000_000_000  # ms


@pytest.fixture
def root(tmp_path: Path) -> str:
    return make_root(tmp_path / "root")


def opts(**options: Any) -> dict[str, str]:
    """Options as Spark hands them over: lower-cased keys, string values."""
    return {k.lower(): v if isinstance(v, str) else json.dumps(v) for k, v in options.items()}


def parse(**options: Any) -> SourceOptions:
    options.setdefault("path", "/nowhere")
    if not {"topic", "topics", "topicsPattern"} & set(options):
        options["topic"] = "t"
    return parse_options(SourceOptions, opts(**options))


# -- parsing (no Spark) -------------------------------------------------------------------------------


def test_every_option_parses_into_the_typed_model() -> None:
    o = parse(
        serviceUrl="/r",
        topic="t",
        startingOffsets="earliest",
        maxMessagesPerTrigger="10",
        maxBytesPerTrigger="4096",
        minMessagesPerTrigger="5",
        maxTriggerDelay="2s",
        failOnDataLoss="false",
        minPartitions="8",
        readCompacted="false",
        subscription="s",
        subscriptionType="key_shared",
        consumerName="c1",
        priorityLevel="2",
        subscriptionInitialPosition="earliest",
        keySharedMode="sticky",
        stickyRanges="0-100, 200-300",
        allowOutOfOrderDelivery="true",
        leaseRenewMs="5000",
        retryEnable="true",
        checkpointLocation="/ck",
        queryName="q",
    )
    assert o.root == "/r"
    assert (o.max_messages_per_trigger, o.max_bytes_per_trigger, o.min_messages_per_trigger) == (10, 4096, 5)
    assert o.max_trigger_delay_ms == 2000 and o.fail_on_data_loss is False and o.min_partitions == 8
    assert (o.subscription_type, o.subscription_initial_position, o.key_shared_mode) == (
        "Key_Shared",
        "Earliest",
        "Sticky",
    )
    assert o.sticky_range_list == [(0, 100), (200, 300)]
    assert o.consumer_name == "c1" and o.priority_level == 2 and o.lease_renew_ms == 5000
    assert o.allow_out_of_order_delivery and o.retry_enable
    # the storage root may come from .load(path) instead of serviceUrl
    assert parse(path="/p").root == "/p"
    assert parse(topics="a, b").topics == "a, b"
    assert parse(topicsPattern="persistent://public/default/x.*").topics_pattern.endswith("x.*")
    assert parse(startingTimestamp=str(T0)).starting_timestamp == T0
    assert parse(endingTimestamp=str(T0)).ending_timestamp == T0


@pytest.mark.parametrize(
    "duration, ms", [("500ms", 500), ("30s", 30_000), ("15m", 900_000), ("1h", 3_600_000), ("250", 250)]
)
def test_max_trigger_delay_forms(duration: str, ms: int) -> None:
    assert parse(maxTriggerDelay=duration).max_trigger_delay_ms == ms


BAD_VALUES = [
    ("maxMessagesPerTrigger", "ten"),
    ("maxMessagesPerTrigger", "0"),
    ("maxMessagesPerTrigger", "-5"),
    ("maxBytesPerTrigger", "1.5"),
    ("maxBytesPerTrigger", "0"),
    ("minMessagesPerTrigger", "many"),
    ("minMessagesPerTrigger", "0"),
    ("maxTriggerDelay", "soon"),
    ("maxTriggerDelay", "-1s"),
    ("failOnDataLoss", "maybe"),
    ("readCompacted", "perhaps"),
    ("minPartitions", "0"),
    ("minPartitions", "two"),
    ("startingTimestamp", "-1"),
    ("startingTimestamp", "yesterday"),
    ("endingTimestamp", "1.5"),
    ("subscriptionType", "Broadcast"),
    ("subscriptionInitialPosition", "middle"),
    ("keySharedMode", "Random"),
    ("priorityLevel", "-1"),
    ("leaseRenewMs", "0"),
    ("retryEnable", "x"),
    ("allowOutOfOrderDelivery", "x"),
    ("stickyRanges", "a-b"),
    ("stickyRanges", "5-70000"),
    ("stickyRanges", "9-3"),
]


SUBSCRIPTION_OPTIONS = {
    "subscriptionType",
    "subscriptionInitialPosition",
    "keySharedMode",
    "priorityLevel",
    "leaseRenewMs",
    "retryEnable",
    "allowOutOfOrderDelivery",
    "stickyRanges",
}


@pytest.mark.parametrize("option, value", BAD_VALUES)
def test_malformed_values_are_refused_naming_the_option(option: str, value: str) -> None:
    extra: dict[str, str] = {option: value}
    if option in SUBSCRIPTION_OPTIONS:
        extra["subscription"] = "s"
    if option == "stickyRanges":
        extra.update(keySharedMode="Sticky", subscriptionType="Key_Shared")
    with pytest.raises(InvalidConfiguration) as info:
        parse(**extra)
    assert option in str(info.value)
    assert isinstance(info.value, ValueError)


def test_unknown_option_is_refused_named_and_the_nearest_name_suggested() -> None:
    with pytest.raises(InvalidConfiguration) as info:
        parse(startingOffset="earliest")  # a typo
    text = str(info.value)
    assert "'startingoffset'" in text and "did you mean 'startingOffsets'?" in text
    with pytest.raises(InvalidConfiguration) as info:
        parse(zzz="1")  # nothing near: the valid names are listed
    assert "maxMessagesPerTrigger" in str(info.value) and "subscribe" in str(info.value)


CONFLICTS = [
    ({"topic": "a", "topics": "a,b"}, "topic"),
    ({"topics": "a", "topicsPattern": "persistent://public/default/a.*"}, "topic"),
    ({"startingOffsets": "earliest", "startingTimestamp": str(T0)}, "startingTimestamp"),
    ({"subscription": "s", "keySharedMode": "Sticky", "subscriptionType": "Key_Shared"}, "stickyRanges"),
    ({"subscription": "s", "stickyRanges": "0-10"}, "stickyRanges"),
    ({"subscriptionType": "Shared"}, "subscriptionType"),
    ({"consumerName": "c"}, "consumerName"),
    ({"retryEnable": "true"}, "retryEnable"),
]


@pytest.mark.parametrize("options, named", CONFLICTS)
def test_conflicting_or_dangling_options_are_refused(options: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidConfiguration) as info:
        parse(**options)
    assert named in str(info.value)


def test_no_root_and_no_topic_are_refused() -> None:
    with pytest.raises(InvalidConfiguration, match="serviceUrl"):
        parse_options(SourceOptions, {"topic": "t"})
    with pytest.raises(InvalidConfiguration, match="topic"):
        parse_options(SourceOptions, {"path": "/r"})


# -- options checked when a reader is built (driver side, no Spark) --------------------------------------


def test_read_compacted_is_refused_where_it_cannot_apply(root: str) -> None:
    # compacted reads serve the latest value per key in order: Shared and Key_Shared subscriptions
    # hand messages out to several consumers, so, as in Pulsar, they refuse it
    for kind in ("Shared", "Key_Shared"):
        with pytest.raises((InvalidConfiguration, OperationNotSupported), match="readCompacted"):
            PubSubStreamReader(
                parse(path=root, readCompacted="true", subscription="s", subscriptionType=kind)
            )


def test_batch_only_and_stream_only_options_are_refused_where_they_do_not_apply(root: str) -> None:
    produce(root, "t", ["x"])
    for option, value in (("endingOffsets", "latest"), ("endingTimestamp", str(T0))):
        with pytest.raises(InvalidConfiguration, match=option):
            PubSubStreamReader(parse(path=root, **{option: value}))
    for option in ("maxMessagesPerTrigger", "maxBytesPerTrigger", "minMessagesPerTrigger"):
        with pytest.raises(InvalidConfiguration, match=option):
            PubSubBatchReader(parse(path=root, **{option: "5"}))
    with pytest.raises(InvalidConfiguration, match="subscription"):
        PubSubBatchReader(parse(path=root, subscription="s"))
    with pytest.raises(InvalidConfiguration, match="endingTimestamp"):
        PubSubBatchReader(parse(path=root, endingOffsets="latest", endingTimestamp=str(T0)))


@pytest.mark.parametrize(
    "spec",
    [
        '{"o-partition-0": 1',
        "[1, 2]",
        "oldest",
        '{"o-partition-7": 1}',
        '{"o-partition-0": -3}',
        '{"o-partition-0": "5"}',
        '{"o-partition-0": true}',
        '{"other": 0}',
    ],
)
@pytest.mark.parametrize("option", ["startingOffsets", "endingOffsets"])
def test_malformed_offset_specs_name_the_option(root: str, option: str, spec: str) -> None:
    create_partitioned(root, "o", 2)
    with pytest.raises(InvalidConfiguration) as info:
        PubSubBatchReader(parse(path=root, topic="o", **{option: spec}))
    assert option in str(info.value)


@pytest.mark.parametrize(
    "options, named",
    [
        ({"topic": "../etc"}, "topic"),
        ({"topics": "good,bad name"}, "topics"),
        ({"topicsPattern": "no-namespace.*"}, "topicsPattern"),
        ({"topicsPattern": "persistent://public/default/(unclosed"}, "topicsPattern"),
    ],
)
def test_bad_topic_names_and_patterns_name_the_option(root: str, options: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidConfiguration) as info:
        PartitionPlanner(parse(path=root, **options)).internal_topics()
    assert f"option {named}" in str(info.value)


def test_non_persistent_topics_are_refused(root: str) -> None:
    with pytest.raises(OperationNotSupported, match="non-persistent"):
        PartitionPlanner(parse(path=root, topic="non-persistent://public/default/np")).internal_topics()


# -- through Spark: the user sees the option's name ------------------------------------------------------


def test_errors_reach_the_spark_user_with_the_option_name(spark: Any, root: str) -> None:
    produce(root, "t", ["x"])
    with pytest.raises(PySparkException) as info:
        spark.read.format("pubsub").option("topic", "t").option("bogusOption", "1").load(root).collect()
    assert "bogusoption" in str(info.value)
    with pytest.raises(PySparkException) as info:
        spark.read.format("pubsub").option("topic", "t").option("startingOffsets", "oldest").load(
            root
        ).collect()
    assert "startingOffsets" in str(info.value)
    # a streaming read's options are checked when load() is called, not when the query first runs
    with pytest.raises(PySparkException) as info:
        spark.readStream.format("pubsub").option("topic", "t").option("maxMessagesPerTrigger", "lots").load(root)
    assert "maxMessagesPerTrigger" in str(info.value)
    with pytest.raises(PySparkException) as info:  # a typo gets the nearest valid name
        spark.readStream.format("pubsub").option("topic", "t").option("startingOfsets", "earliest").load(root)
    assert "did you mean 'startingOffsets'?" in str(info.value)


def test_service_url_and_load_path_name_the_same_root(spark: Any, root: str) -> None:
    produce(root, "t", names("m", 25))
    via_option = spark.read.format("pubsub").option("serviceUrl", root).option("topic", "t").load()
    via_path = spark.read.format("pubsub").option("topic", "t").load(root)
    assert_df_equality(
        via_option.select("value", "offset"), via_path.select("value", "offset"), ignore_row_order=True
    )
    assert via_path.count() == 25


# -- topics ----------------------------------------------------------------------------------------------


def test_topic_topics_and_pattern_select_the_topics(spark: Any, root: str) -> None:
    create_partitioned(root, "alpha", 2)
    produce(root, "alpha", names("a", 10))
    produce(root, "beta", names("b", 5))
    produce(root, "gamma", names("g", 3))
    Admin.open(root).create_namespace("public/other")
    produce(root, "persistent://public/other/alpha", names("x", 4))  # another namespace

    def read(**options: str) -> list[str]:
        reader = spark.read.format("pubsub")
        for k, v in options.items():
            reader = reader.option(k, v)
        return sorted(r.value.decode() for r in reader.load(root).select("value").collect())

    assert read(topic="alpha") == sorted(names("a", 10))
    assert read(topic="persistent://public/default/alpha-partition-1") == sorted(
        read(topic="alpha", startingOffsets='{"alpha-partition-0": -1}')
    )
    assert read(topics="alpha, gamma") == sorted(names("a", 10) + names("g", 3))
    assert read(topicsPattern="persistent://public/default/(alpha|beta)") == sorted(
        names("a", 10) + names("b", 5)
    )
    assert read(topic="public/other/alpha") == sorted(names("x", 4))


# -- schema and column types -------------------------------------------------------------------------------


def test_schema_and_every_column(spark: Any, root: str) -> None:
    create_partitioned(root, "cols", 2)
    client = Client(root, clock=ManualClock(T0))
    n = 12
    producer = client.create_producer("cols", producer_name="prod-1", batching_enabled=True)
    producer.send_table(
        pa.table(
            {
                "value": [f"v{i}".encode() for i in range(n)],
                "key": [f"k{i % 3}" if i != 5 else None for i in range(n)],
                "properties": pa.array(
                    [[("i", str(i)), ("even", str(i % 2 == 0))] if i % 4 else None for i in range(n)],
                    pa.map_(pa.string(), pa.string()),
                ),
                "event_time": pa.array([T0 - 1000 * i for i in range(n)], pa.int64()),
                "ordering_key": [b"ok" if i == 7 else None for i in range(n)],
                "partition": [i % 2 for i in range(n)],
            }
        )
    )
    unbatched = client.create_producer("cols", producer_name="prod-2")
    unbatched.send(b"single", partition_key="kk")
    client.close()

    df = spark.read.format("pubsub").option("topic", "cols").load(root)
    assert df.schema == SOURCE_SCHEMA
    rows = {r.value: r for r in df.collect()}
    assert len(rows) == n + 1
    publish = datetime.fromtimestamp(T0 / 1000)  # collect() gives naive local times
    for i in range(n):
        r = rows[f"v{i}".encode()]
        assert r.topic == "persistent://public/default/cols" and r.partition == i % 2  # the user's name
        assert r.internalTopic == f"persistent://public/default/cols-partition-{i % 2}"
        assert r.timestamp == r.publishTime and r.timestampType == 0
        assert r.key == (f"k{i % 3}" if i != 5 else None)
        assert r.publishTime == publish
        assert r.eventTime == datetime.fromtimestamp((T0 - 1000 * i) / 1000)
        assert r.properties == ({"i": str(i), "even": str(i % 2 == 0)} if i % 4 else None)
        assert r.producerName == "prod-1" and r.sequenceId == i
        assert r.orderingKey == (bytearray(b"ok") if i == 7 else None)
        assert r.redeliveryCount == 0 and r.deliverAt is None
        assert r.offset == i // 2  # dense per partition, in send order
        mid = MessageId.parse(r.messageId)  # the admin form ledger:entry:partition:batch
        assert r.messageId == mid.to_admin_string()
        # one batched entry per partition: entry 0, batch index = position in the batch
        assert (mid.partition(), mid.entry_id(), mid.batch_index()) == (i % 2, 0, i // 2)
    single = next(r for r in rows.values() if r.value == b"single")
    mid = MessageId.parse(single.messageId)
    assert mid.batch_index() == -1 and mid.entry_id() == 1 and single.key == "kk"

    # the ids are the ones the broker_core client reports for the same messages
    client = Client(root)
    reader = client.create_reader("cols", MessageId.earliest)
    by_value = {}
    while reader.has_message_available():
        msg = reader.read_next(1000)
        by_value[msg.data()] = (msg.message_id().to_admin_string(), msg.topic_name())
    client.close()
    assert by_value == {v: (r.messageId, r.internalTopic) for v, r in rows.items()}


# -- offsets and timestamps of a bounded read ------------------------------------------------------------


@pytest.fixture
def two_partitions(root: str) -> str:
    """Topic ``o``: ten messages per partition, ``p<partition>-<offset>``."""
    create_partitioned(root, "o", 2)
    values = [f"p{i % 2}-{i // 2}" for i in range(20)]
    produce(root, "o", values, partition=[i % 2 for i in range(20)])
    return root


def _offsets(spark: Any, root: str, **options: str) -> list[str]:
    reader = spark.read.format("pubsub").option("topic", "o")
    for k, v in options.items():
        reader = reader.option(k, v)
    return sorted(r.value.decode() for r in reader.load(root).select("value").collect())


def both(p0: range, p1: range) -> list[str]:
    return sorted([f"p0-{i}" for i in p0] + [f"p1-{i}" for i in p1])


def test_starting_and_ending_offsets_of_a_batch_read(spark: Any, two_partitions: str) -> None:
    root = two_partitions
    assert _offsets(spark, root) == both(range(10), range(10))  # earliest .. latest by default
    assert _offsets(spark, root, startingOffsets="latest") == []
    assert _offsets(spark, root, endingOffsets="earliest") == []
    # JSON: -2 = earliest, -1 = latest, n = that offset; short and full names; unnamed ones default
    assert _offsets(
        spark,
        root,
        startingOffsets='{"o-partition-0": 3, "o-partition-1": -2}',
        endingOffsets='{"persistent://public/default/o-partition-0": 7, "o-partition-1": -1}',
    ) == both(range(3, 7), range(10))
    assert _offsets(spark, root, startingOffsets='{"o-partition-1": -1}') == both(range(10), range(0))
    assert _offsets(spark, root, endingOffsets='{"o-partition-1": 4}') == both(range(10), range(4))


def test_starting_and_ending_timestamps_of_a_batch_read(spark: Any, root: str) -> None:
    clock = ManualClock(T0)
    client = Client(root, clock=clock)
    for second in range(3):  # three sends, one second apart: publish times T0, T0+1s, T0+2s
        produce(root, "ts", names(f"s{second}", 3), client=client)
        clock.advance(1000)
    client.close()

    def read(**options: int) -> list[str]:
        reader = spark.read.format("pubsub").option("topic", "ts")
        for k, v in options.items():
            reader = reader.option(k, str(v))
        return sorted(r.value.decode() for r in reader.load(root).select("value").collect())

    s0, s1, s2 = (names(f"s{i}", 3) for i in range(3))
    # startingTimestamp is inclusive: messages published at exactly that millisecond are read
    assert read(startingTimestamp=T0 + 1000) == sorted(s1 + s2)
    assert read(startingTimestamp=T0 + 1) == sorted(s1 + s2)
    assert read(startingTimestamp=T0 + 5000) == []
    # endingTimestamp, as Kafka's, is the first offset published at or after it, read exclusively,
    # so that [t1, t2) and [t2, t3) never overlap
    assert read(endingTimestamp=T0 + 2000) == sorted(s0 + s1)
    assert read(endingTimestamp=T0 + 1999) == sorted(s0 + s1)
    assert read(startingTimestamp=T0 + 1000, endingTimestamp=T0 + 2000) == sorted(s1)
    assert read(startingTimestamp=0) == sorted(s0 + s1 + s2)


# -- minPartitions -----------------------------------------------------------------------------------------


def test_min_partitions_splits_by_key_so_each_key_is_in_one_task(spark: Any, root: str) -> None:
    n = 400
    produce(root, "mp", names("m", n), keys=lambda i: f"key-{i % 23}")
    for wanted in (1, 4, 7):
        df = spark.read.format("pubsub").option("topic", "mp").option("minPartitions", str(wanted)).load(root)
        assert df.rdd.getNumPartitions() == wanted
        rows = df.select("key", "offset", F.spark_partition_id().alias("task")).collect()
        tasks_of_key: dict[str, set[int]] = {}
        for r in rows:
            tasks_of_key.setdefault(r.key, set()).add(r.task)
        assert all(len(tasks) == 1 for tasks in tasks_of_key.values())
        assert sorted(r.offset for r in rows) == list(range(n))  # every message exactly once
        for task in {r.task for r in rows}:  # in offset order within each task
            offsets = [r.offset for r in rows if r.task == task]
            assert offsets == sorted(offsets)
        if wanted > 1:
            assert len({r.task for r in rows}) > 1
    # a two-partition topic: each internal topic gets ceil(minPartitions / 2) key slices
    create_partitioned(root, "mp2", 2)
    produce(root, "mp2", names("m", 40), keys=lambda i: f"key-{i % 5}")
    df = spark.read.format("pubsub").option("topic", "mp2").option("minPartitions", "3").load(root)
    assert df.rdd.getNumPartitions() == 4
    assert df.count() == 40
