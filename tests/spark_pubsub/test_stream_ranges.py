"""``.option("emit", "ranges")`` + ``spark_pubsub.read_ranges``: a stream's micro-batches read natively.

Each test runs the same query twice over the same topics, once reading messages
(``format("pubsub")``) and once emitting ranges that ``read_ranges`` reads in ``foreachBatch``,
and compares batch by batch with chispa: the same batches, the same rows.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from source_job import create_partitioned, make_root, source

from broker_core import Client, CompressionType
from broker_core.broker.broker import Broker
from broker_core.errors import DataLoss, InvalidConfiguration
from broker_core.jobs.compaction import compact_topic
from broker_core.naming import TopicName
from spark_pubsub import read_ranges
from spark_pubsub.schema import SOURCE_SCHEMA
from spark_pubsub.stream_ranges import RANGES_SCHEMA

ORDER = ("topic", "partition", "offset")


def _send(root: str, topic: str, n: int, prefix: str, **producer: Any) -> None:
    client = Client(root)
    try:
        p = client.create_producer(topic, **producer)
        for i in range(n):
            p.send_async(f"{prefix}{i}".encode(), None, partition_key=f"k{i % 5}",
                         properties={"i": str(i)} if i % 2 else None)
        p.flush()
        p.close()
    finally:
        client.close()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``orders``: 3 partitions, single and batched (LZ4) messages; ``single``: not partitioned;
    ``kv``: compacted, then appended to."""
    path = make_root(tmp_path_factory.mktemp("ranges") / "root")
    create_partitioned(path, "orders", 3)
    _send(path, "orders", 60, "plain-")
    _send(path, "orders", 90, "batched-", batching_enabled=True, batching_max_messages=7,
          compression_type=CompressionType.LZ4)
    _send(path, "single", 40, "single-", batching_enabled=True, batching_max_messages=4)
    _send(path, "kv", 30, "old-")
    compact_topic(Broker.for_url(path), "kv")
    _send(path, "kv", 12, "new-")
    return path


class Batches:
    """A ``foreachBatch`` sink keeping each batch's rows, sorted; ``ranges=True`` reads the batch's
    ranges with ``read_ranges`` first (and keeps the ranges too)."""

    def __init__(self, root: str, *, ranges: bool = False, fail_batch: int | None = None, **read: Any) -> None:
        self.root, self.ranges, self.fail_batch, self.read = root, ranges, fail_batch, read
        self.rows: dict[int, list[Any]] = {}
        self.seen: dict[int, list[Any]] = {}  # batch id -> its range rows, every attempt's last

    def __call__(self, df: Any, batch_id: int) -> None:
        if self.ranges:
            self.seen[batch_id] = sorted(df.collect())
            if batch_id == self.fail_batch:
                self.fail_batch = None
                raise RuntimeError("the batch's work failed")
            df = read_ranges(df.sparkSession, self.root, df, **self.read)
            assert df.schema == SOURCE_SCHEMA
        self.rows[batch_id] = df.orderBy(*ORDER).collect()


def _run(df: Any, checkpoint: Path, sink: Batches) -> None:
    query = (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()


def _assert_same_batches(spark: Any, messages: Batches, ranges: Batches) -> None:
    assert sorted(ranges.rows) == sorted(messages.rows) and len(messages.rows) > 1
    assert sum(len(rows) for rows in messages.rows.values()) > 0
    for batch_id, rows in messages.rows.items():  # compacted: a batch below the horizon may be empty
        assert_df_equality(spark.createDataFrame(ranges.rows[batch_id], SOURCE_SCHEMA),
                           spark.createDataFrame(rows, SOURCE_SCHEMA))


@pytest.mark.parametrize("options", [
    {"topics": "orders,single", "maxOffsetsPerTrigger": "45"},
    {"topic": "kv", "readCompacted": "true", "maxOffsetsPerTrigger": "10"},
])
def test_each_batch_reads_the_same_rows_as_the_message_stream(spark: Any, root: str, tmp_path: Path,
                                                              options: dict[str, str]) -> None:
    messages, ranges = Batches(root), Batches(root, ranges=True)
    _run(source(spark, root, startingOffsets="earliest", **options), tmp_path / "messages", messages)
    _run(source(spark, root, startingOffsets="earliest", emit="ranges", **options), tmp_path / "ranges", ranges)
    _assert_same_batches(spark, messages, ranges)
    first = ranges.seen[min(ranges.seen)]
    assert first and all(r.endOffset > r.startOffset for r in first)
    if "readCompacted" in options:
        assert first[0].compactedFile and first[0].compactedHorizon == 30  # the batch pinned its view
    else:
        assert {r.topic for r in first} == {"persistent://public/default/orders", "persistent://public/default/single"}


def test_a_failed_batch_is_replayed_with_the_same_ranges_and_restarts_continue(spark: Any, tmp_path: Path) -> None:
    root = make_root(tmp_path / "root")
    create_partitioned(root, "events", 2)
    _send(root, "events", 100, "a-", batching_enabled=True, batching_max_messages=6)
    sink = Batches(root, ranges=True, fail_batch=1)
    df = source(spark, root, topic="events", startingOffsets="earliest", emit="ranges", maxOffsetsPerTrigger=30)
    with pytest.raises(Exception, match="the batch's work failed"):
        _run(df, tmp_path / "ck", sink)
    failed = sink.seen[1]
    _run(df, tmp_path / "ck", sink)  # from the checkpoint: batch 1 again, then the rest
    assert sink.seen[1] == failed  # the replay got the very same ranges
    _send(root, "events", 50, "b-")
    _run(df, tmp_path / "ck", sink)
    got = [(r.partition, r.offset) for batch in sorted(sink.rows) for r in sink.rows[batch]]
    assert len(got) == len(set(got)) == 150  # no gap, no duplicate
    everything = spark.read.format("pubsub").option("topic", "events").load(root)
    assert sorted(got) == sorted((r.partition, r.offset) for r in everything.collect())


def test_ranges_of_several_batches_read_at_once_match_a_bounded_read(spark: Any, connect: Any, root: str,
                                                                     tmp_path: Path) -> None:
    """Through Spark Connect: the stream and ``read_ranges`` use the DataFrame API only."""
    query = (connect.readStream.format("pubsub").option("topics", "orders,single").option("emit", "ranges")
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "50").load(root)
             .writeStream.format("memory").queryName("ranges_connect")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination()
    ranges = connect.table("ranges_connect")
    assert ranges.count() > 4  # several batches, several partitions each
    native = read_ranges(connect, root, ranges).orderBy(*ORDER)
    assert native.schema == SOURCE_SCHEMA
    expected = spark.read.format("pubsub").option("topics", "orders,single").load(root).orderBy(*ORDER)
    assert native.collect() == expected.collect()


def test_a_root_spark_cannot_open_reads_the_ranges_through_the_source(spark: Any, root: str, caplog: Any) -> None:
    broker = Broker.for_url(root)
    rows, expected = [], []
    for internal, partition, lo, hi in (("orders-partition-0", 0, 3, 20), ("orders-partition-2", 2, 0, 9),
                                        ("single", -1, 10, 30)):
        name = TopicName.parse(internal)
        snap = broker.topic_log(name, create=False).snapshot()
        hi = min(hi, snap.next_offset)  # a partition holds the keys that hash to it
        topic = str(name.partitioned_topic_name) if partition >= 0 else str(name)
        rows.append((topic, partition, str(name), lo, max(lo, hi), snap.ledger_id, None, None))
        expected += [(partition, o) for o in range(lo, hi)]
    ranges = spark.createDataFrame(rows, RANGES_SCHEMA)
    native = read_ranges(spark, root, ranges).orderBy(*ORDER)
    with caplog.at_level(logging.WARNING, logger="spark_pubsub.native_scan"):
        fallback = read_ranges(spark, root, ranges, spark_root="nosuchfs://bucket/root").orderBy(*ORDER)
    assert_df_equality(fallback, native)
    assert sorted((r.partition, r.offset) for r in native.collect()) == sorted(expected) and len(expected) >= 20
    assert any("nosuchfs://bucket/root" in r.getMessage() for r in caplog.records)


def _ranges_df(spark: Any, root: str, topic: str, start: int, end: int, ledger_id: int) -> Any:
    return spark.createDataFrame([(f"persistent://public/default/{topic}", -1, f"persistent://public/default/{topic}",
                                   start, end, ledger_id, None, None)], RANGES_SCHEMA)


def test_bad_inputs_give_typed_errors(spark: Any, root: str) -> None:
    def stream(**options: str) -> Any:
        return source(spark, root, topic="single", **options)

    with pytest.raises(Exception, match="emit=ranges cannot be used with subscriptionType=Shared"):
        stream(emit="ranges", subscription="s", subscriptionType="Shared")
    with pytest.raises(Exception, match="includeHeaders: does not apply with emit=ranges"):
        stream(emit="ranges", includeHeaders="true")
    with pytest.raises(Exception, match="did you mean 'emit'"):
        stream(emitt="ranges")
    with pytest.raises(Exception, match="emit="):
        stream(emit="rows")
    with pytest.raises(Exception, match="emit=ranges applies to streaming queries"):
        spark.read.format("pubsub").option("topic", "single").option("emit", "ranges").load(root).collect()
    stream(emit="ranges", subscription="s", subscriptionType="Failover")  # range mode: allowed

    snap = Broker.for_url(root).topic_log(TopicName.parse("single"), create=False).snapshot()
    good = _ranges_df(spark, root, "single", 0, 5, snap.ledger_id)
    assert read_ranges(spark, root, good).count() == 5
    for empty in (good.limit(0), _ranges_df(spark, root, "single", 7, 7, snap.ledger_id)):
        nothing = read_ranges(spark, root, empty)
        assert nothing.schema == SOURCE_SCHEMA and nothing.count() == 0
    with pytest.raises(InvalidConfiguration, match=r"lacks the column\(s\) startOffset"):
        read_ranges(spark, root, good.drop("startOffset"))
    with pytest.raises(InvalidConfiguration, match="must be the micro-batch DataFrame"):
        read_ranges(spark, root, [("single", 0, 5)])
    with pytest.raises(InvalidConfiguration, match="not an offset range"):
        read_ranges(spark, root, _ranges_df(spark, root, "single", 5, 2, snap.ledger_id))
    with pytest.raises(InvalidConfiguration, match="did you mean 'failOnDataLoss'"):
        read_ranges(spark, root, good, failondataloss=False)
    with pytest.raises(InvalidConfiguration, match="option startingOffsets of read_ranges: the stream's ranges"):
        read_ranges(spark, root, good, startingOffsets="earliest")
    with pytest.raises(InvalidConfiguration, match="valueFormat"):
        read_ranges(spark, root, good, valueFormat="text")
    with pytest.raises(DataLoss, match="deleted or re-created"):
        read_ranges(spark, root, _ranges_df(spark, root, "single", 0, 5, snap.ledger_id + 1))
    assert read_ranges(spark, root, _ranges_df(spark, root, "single", 0, 5, snap.ledger_id + 1),
                       failOnDataLoss=False).count() == 5


def test_an_s3_root_streams_ranges_and_reads_them_through_the_source(spark: Any, moto_s3: Any,
                                                                     tmp_path: Path) -> None:
    """No Hadoop S3 connector here: the stream plans on ``s3://`` (``storage.*``), and ``read_ranges``
    falls back to ``format("pubsub")`` with the same rows."""
    root = moto_s3.fresh_root()
    client = Client(root, storage_options=moto_s3.storage_options)
    try:
        producer = client.create_producer("s3t", batching_enabled=True, batching_max_messages=4)
        for i in range(30):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
    finally:
        client.close()
    storage = {f"storage.{k}": v for k, v in moto_s3.storage_options.items()}
    query = (source(spark, root, topic="s3t", startingOffsets="earliest", emit="ranges", maxOffsetsPerTrigger=12,
                    **storage).writeStream.format("memory").queryName("ranges_s3")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination()
    ranges = spark.table("ranges_s3")
    assert ranges.count() == 3
    got = read_ranges(spark, root, ranges, storage_options=moto_s3.storage_options).orderBy(*ORDER)
    expected = spark.read.format("pubsub").option("topic", "s3t").options(**storage).load(root).orderBy(*ORDER)
    assert_df_equality(got, expected)
