"""The ``format("pubsub")`` sink: batch and streaming writes, columns, routing, errors, exactly-once.

Spark jobs are few and small; the exactly-once protocol is also tested at unit level by calling the
stream writer's ``write``/``commit``/``abort`` by hand, as Spark would after failures.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from broker_core import Client, MessageId
from broker_core.broker.broker import Broker
from broker_core.errors import InvalidConfiguration, InvalidMessage
from broker_core.hashing import java_string_hash, murmur3_32_hash
from broker_core.naming import TopicName
from broker_core.producer.bulk import STAGED_TXN_DIR, commit_staged_once
from broker_core.topic.topic_log import TopicLog
from spark_pubsub import sink as sink_module
from spark_pubsub.options import SinkOptions, parse_options
from spark_pubsub.sink import PubSubBatchWriter, PubSubStreamWriter, SinkCommitMessage, default_sink_id
from spark_pubsub.sink_columns import SinkColumns

# -- helpers ----------------------------------------------------------------------------------------


def _log(root: str, internal: str) -> TopicLog:
    return Broker.for_url(root).topic_log(TopicName.parse(internal), create=False)


def read_topic(root: str, topic: str) -> list[pa.Table]:
    """Every partition's committed rows (``SEGMENT_SCHEMA``), by partition index."""
    out = []
    for internal in Broker.for_url(root).partitions(topic, auto_create=False):
        log = _log(root, str(internal))
        if not log.exists():
            out.append(None)
            continue
        snap = log.snapshot()
        rows, _ = log.read(snap.first_offset, snap.next_offset, snapshot=snap)
        out.append(rows)
    return out


def all_rows(root: str, topic: str) -> list[dict[str, Any]]:
    return [row for table in read_topic(root, topic) if table is not None for row in table.to_pylist()]


def versions(root: str, topic: str) -> list[int | None]:
    """The log version of each internal topic (None: no log yet)."""
    out = []
    for internal in Broker.for_url(root).partitions(topic, auto_create=False):
        log = _log(root, str(internal))
        out.append(log.snapshot().version if log.exists() else None)
    return out


def segment_files(root: str, topic: str) -> list[str]:
    files = []
    for internal in Broker.for_url(root).partitions(topic, auto_create=False):
        directory = Path(root, *TopicName.parse(str(internal)).relative_path())
        if directory.exists():
            files += [str(p) for p in directory.glob("part-*.parquet")]
    return files


def writer_to(df: DataFrame, root: str, **options: str) -> Any:
    w = df.write.format("pubsub").option("serviceUrl", root).mode("append")
    for k, v in options.items():
        w = w.option(k, v)
    return w


@pytest.fixture
def root(tmp_path: Path) -> str:
    path = tmp_path / "root"
    path.mkdir()
    return str(path)


# -- batch writes -----------------------------------------------------------------------------------


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def test_batch_write_every_column_round_trips(spark: SparkSession, root: str) -> None:
    base = 1_700_000_000_000
    df = spark.createDataFrame(
        [
            (b"v0", "k0", "ok0", {"a": "1"}, _ts(base), base + 60_000, 7, "p1"),
            (b"", "k1", None, {}, None, None, 8, None),
            (None, None, "ok2", None, _ts(base + 5), base, None, "p2"),
        ],
        "value binary, key string, orderingKey string, properties map<string,string>, eventTime timestamp, "
        "deliverAt long, sequenceId long, producerName string",
    )
    writer_to(df, root, topic="all-columns", producerName="batch-prod").save()

    rows = all_rows(root, "all-columns")
    assert [r["value"] for r in rows] == [b"v0", b"", None]  # empty payload and tombstone stay distinct
    assert [r["key"] for r in rows] == ["k0", "k1", None]
    assert [r["ordering_key"] for r in rows] == [b"ok0", None, b"ok2"]
    assert [dict(r["properties"] or []) for r in rows] == [{"a": "1"}, {}, {}]
    assert [r["sequence_id"] for r in rows] == [7, 8, None]
    assert [r["producer_name"] for r in rows] == ["p1", "batch-prod", "p2"]  # the option fills the gaps
    ms = [None if r["deliver_at"] is None else int(r["deliver_at"].timestamp() * 1000) for r in rows]
    assert ms == [base + 60_000, None, base]
    assert all(r["publish_time"] is not None for r in rows)

    # The same messages through the Python client's reader, compared as DataFrames (chispa).
    client = Client(root)
    try:
        reader = client.create_reader("all-columns", MessageId.earliest)
        messages = [reader.read_next(timeout_millis=2000) for _ in range(3)]
        assert not reader.has_message_available()
    finally:
        client.close()
    got = spark.createDataFrame(
        [(None if m.has_null_value() else m.data(), m.partition_key() or None,
          json.dumps(m.properties(), separators=(",", ":")), m.event_timestamp()) for m in messages],
        "value binary, key string, properties string, eventTimeMs long",
    )
    expected = df.select("value", "key",
                         F.to_json(F.coalesce("properties", F.create_map())).alias("properties"),
                         F.coalesce(F.unix_millis("eventTime"), F.lit(0)).alias("eventTimeMs"))
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_string_values_long_event_time_and_deliver_after(spark: SparkSession, root: str) -> None:
    df = spark.createDataFrame([("hello", 1_700_000_000_123, 60_000), ("", None, None)],
                               "value string, eventTime long, deliverAfterMs int")
    before = int(time.time() * 1000)
    writer_to(df, root, topic="delayed").save()
    after = int(time.time() * 1000)
    rows = all_rows(root, "delayed")
    assert [r["value"] for r in rows] == [b"hello", b""]
    assert int(rows[0]["event_time"].timestamp() * 1000) == 1_700_000_000_123
    deliver_ms = int(rows[0]["deliver_at"].timestamp() * 1000)
    assert before + 60_000 <= deliver_ms <= after + 60_000
    assert rows[1]["deliver_at"] is None and rows[1]["event_time"] is None


def test_per_row_topic_and_key_routing(spark: SparkSession, root: str) -> None:
    Broker.for_url(root).admin.create_partitioned_topic("orders", 3)
    keys = [f"key-{i}" for i in range(30)]
    df = spark.createDataFrame(
        [(f"o{i}", k, "orders") for i, k in enumerate(keys)] + [(f"a{i}", None, "persistent://public/default/audit")
                                                                 for i in range(4)],
        "value string, key string, topic string",
    ).repartition(2)
    writer_to(df, root).save()

    by_partition = read_topic(root, "orders")
    assert sum(t.num_rows for t in by_partition) == 30
    for index, table in enumerate(by_partition):
        for key in table.column("key").to_pylist():
            assert java_string_hash(key) % 3 == index
    assert sorted(r["value"] for r in all_rows(root, "audit")) == [f"a{i}".encode() for i in range(4)]


def test_murmur3_routing_and_explicit_partition_column(spark: SparkSession, root: str) -> None:
    admin = Broker.for_url(root).admin
    admin.create_partitioned_topic("m3", 4)
    admin.create_partitioned_topic("explicit", 4)
    keys = [f"user-{i}" for i in range(40)]
    df = spark.createDataFrame([(k, k) for k in keys], "value string, key string")
    writer_to(df, root, topic="m3", hashingScheme="Murmur3_32Hash").save()
    for index, table in enumerate(read_topic(root, "m3")):
        for key in table.column("key").to_pylist():
            assert murmur3_32_hash(key) % 4 == index

    # An explicit partition wins over the key; a null partition falls back to key routing.
    explicit = spark.createDataFrame([(k, k, 3 if i % 2 == 0 else None) for i, k in enumerate(keys)],
                                     "value string, key string, partition int")
    writer_to(explicit, root, topic="explicit").save()
    for index, table in enumerate(read_topic(root, "explicit")):
        for key in table.column("key").to_pylist():
            i = keys.index(key)
            assert index == (3 if i % 2 == 0 else java_string_hash(key) % 4)


def test_single_partition_mode_sends_keyless_rows_to_one_partition(spark: SparkSession, root: str) -> None:
    Broker.for_url(root).admin.create_partitioned_topic("single", 3)
    df = spark.range(50).select(F.col("id").cast("string").alias("value")).repartition(2)
    writer_to(df, root, topic="single", routingMode="SinglePartition").save()
    counts = [t.num_rows if t is not None else 0 for t in read_topic(root, "single")]
    assert sorted(counts) == [0, 0, 50]


@pytest.mark.parametrize(("compression", "codec"), [("LZ4", "LZ4"), ("zstd", "ZSTD")])
def test_compression_is_the_parquet_codec(spark: SparkSession, root: str, compression: str,
                                          codec: str) -> None:
    df = spark.range(20).select(F.col("id").cast("string").alias("value")).coalesce(1)
    writer_to(df, root, topic="compressed", compressionType=compression).save()
    (path,) = segment_files(root, "compressed")
    meta = pq.ParquetFile(path).metadata
    assert {meta.row_group(0).column(i).compression for i in range(meta.num_columns)} == {codec}
    assert [r["value"] for r in all_rows(root, "compressed")] == [str(i).encode() for i in range(20)]


# -- errors: nothing written --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "column", "fix"),
    [
        (StructType([StructField("key", StringType())]), "value", "is required"),
        (StructType([StructField("value", IntegerType())]), "value", "cast('binary')"),
        (StructType([StructField("value", BinaryType()), StructField("eventTime", StringType())]),
         "eventTime", "cast('timestamp')"),
        (StructType([StructField("value", BinaryType()), StructField("event_time", LongType())]),
         "event_time", "did you mean 'eventTime'"),
        (StructType([StructField("value", BinaryType()), StructField("payload", StringType())]),
         "payload", "drop it or rename it"),
        (StructType([StructField("value", BinaryType()), StructField("headers", StringType())]),
         "headers", "array<struct<key: string"),
        (StructType([StructField("value", BinaryType()),
                     StructField("properties", MapType(StringType(), IntegerType()))]),
         "properties", "map<string,string>"),
        (StructType([StructField("value", BinaryType()), StructField("deliverAt", TimestampNTZType())]),
         "deliverAt", "to_utc_timestamp"),
        (StructType([StructField("value", BinaryType()), StructField("deliverAt", TimestampType()),
                     StructField("deliverAfterMs", LongType())]), "deliverAfterMs", "not"),
        (StructType([StructField("value", BinaryType()), StructField("partition", StringType())]),
         "partition", "cast('int')"),
        (StructType([StructField("value", BinaryType()), StructField("topic", BinaryType())]),
         "topic", "cast('string')"),
    ],
)
def test_bad_columns_are_rejected_naming_the_column(schema: StructType, column: str, fix: str) -> None:
    with pytest.raises(InvalidMessage, match=f"column '{column}'") as info:
        SinkColumns.validate(schema)
    assert fix in str(info.value)
    assert info.value.column == column


def test_bad_writes_fail_before_anything_is_written(spark: SparkSession, root: str) -> None:
    Broker.for_url(root).admin.create_partitioned_topic("guarded", 2)
    good = spark.createDataFrame([("x", "k")], "value string, key string")
    writer_to(good, root, topic="guarded").save()
    before = versions(root, "guarded")
    files = sorted(segment_files(root, "guarded"))

    cases = [
        (good.withColumn("eventTime", F.lit("now")), {}, "column 'eventTime' must be timestamp or long"),
        (good.withColumn("extra", F.lit(1)), {}, "column 'extra' is not a message column"),
        (good.drop("value"), {}, "column 'value' is required"),
        (good, {"compressionType": "brotli"}, "compressionType"),
        (good, {"routingmode": "Sticky"}, "routingMode"),
        (good, {"sendTimeoutMs": "10"}, "unknown option 'sendtimeoutms'"),
    ]
    for df, options, message in cases:
        with pytest.raises(Exception, match=message):
            writer_to(df, root, topic="guarded", **options).save()
    with pytest.raises(Exception, match=r"append-only log; use mode\('append'\)"):
        writer_to(good, root, topic="guarded").mode("overwrite").save()
    with pytest.raises(Exception, match="option topic"):
        good.write.format("pubsub").option("serviceUrl", root).mode("append").save()
    with pytest.raises(Exception, match=re.escape("option topic 'bad/../name'")):
        writer_to(good, root, topic="bad/../name").save()

    # Row-level problems fail the task: nothing is committed and the task's staged files are removed.
    bad_partition = good.withColumn("partition", F.lit(5))
    with pytest.raises(Exception, match=r"column 'partition' holds 5, outside \[0, 2\)"):
        writer_to(bad_partition, root, topic="guarded").save()
    bad_topic = spark.createDataFrame([("x", "guarded"), ("y", "no//such")], "value string, topic string")
    with pytest.raises(Exception, match="column topic holds 'no//such'"):
        writer_to(bad_topic.coalesce(1), root).save()
    null_topic = spark.createDataFrame([("x", None)], "value string, topic string")
    with pytest.raises(Exception, match="column 'topic' is null"):
        writer_to(null_topic, root).save()

    assert versions(root, "guarded") == before
    assert sorted(segment_files(root, "guarded")) == files


def test_writers_and_commit_messages_pickle(root: str) -> None:
    schema = StructType([StructField("value", BinaryType()), StructField("key", StringType())])
    options = parse_options(SinkOptions, {"serviceurl": root, "topic": "pickled", "sinkid": "s1"})
    for writer in (PubSubBatchWriter(options, schema, overwrite=False),
                   PubSubStreamWriter(options, schema, overwrite=False)):
        clone = pickle.loads(pickle.dumps(writer))
        message = clone.write(iter([pa.RecordBatch.from_pydict({"value": [b"a"], "key": ["k"]})]))
        assert isinstance(pickle.loads(pickle.dumps(message)), SinkCommitMessage)
        assert message.rows == 1


# -- streaming writes -------------------------------------------------------------------------------


def _json_files(directory: Path, start: int, files: int, rows: int) -> None:
    directory.mkdir(exist_ok=True)
    for f in range(files):
        with open(directory / f"part-{start + f:04d}.json", "w") as handle:
            for r in range(rows):
                i = (start + f) * rows + r
                handle.write(json.dumps({"id": i, "k": f"k{i % 5}"}) + "\n")


def test_streaming_write_available_now_is_exactly_once_per_batch(spark: SparkSession, root: str,
                                                                  tmp_path: Path) -> None:
    Broker.for_url(root).admin.create_partitioned_topic("events", 2)
    source, checkpoint = tmp_path / "in", str(tmp_path / "ckpt")
    _json_files(source, 0, 3, 10)

    def run() -> None:
        stream = (spark.readStream.schema("id long, k string").option("maxFilesPerTrigger", 2)
                  .json(str(source))
                  .select(F.col("id").cast("string").alias("value"), F.col("k").alias("key"),
                          F.create_map(F.lit("id"), F.col("id").cast("string")).alias("properties")))
        query = (stream.writeStream.format("pubsub").option("serviceUrl", root).option("topic", "events")
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
        assert query.exception() is None

    run()
    _json_files(source, 3, 1, 10)
    run()  # restart from the checkpoint: only the new file is written

    values = sorted(int(r["value"]) for r in all_rows(root, "events"))
    assert values == list(range(40))
    app_id = sink_module.SINK_APP_PREFIX + default_sink_id(checkpoint)
    recorded = [_log(root, str(p)).snapshot().txn_version(app_id)
                for p in Broker.for_url(root).partitions("events")]
    assert max(v for v in recorded if v is not None) == 2  # batches 0, 1 (first run) and 2
    assert len(os.listdir(Path(root, STAGED_TXN_DIR, app_id))) <= 1  # older manifests are cleaned up


def test_default_sink_id_follows_the_checkpoint(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt"
    first = default_sink_id(str(checkpoint))
    assert first == default_sink_id("file:" + str(checkpoint))
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text('{"id":"0f4d8c1e-query"}\n')
    with_query = default_sink_id(str(checkpoint))
    assert with_query != first and with_query == default_sink_id(str(checkpoint))
    (checkpoint / "metadata").write_text('{"id":"another-query"}\n')  # a reset checkpoint: a new sink
    assert default_sink_id(str(checkpoint)) != with_query


# -- the streaming commit protocol, driven by hand ----------------------------------------------------

_SCHEMA = StructType([StructField("value", StringType()), StructField("partition", IntegerType())])


def _stream_writer(root: str, topic: str = "eo", **extra: str) -> PubSubStreamWriter:
    options = parse_options(SinkOptions, {"serviceurl": root, "topic": topic, "sinkid": "unit", **extra})
    return PubSubStreamWriter(options, _SCHEMA, overwrite=False)


def _task(writer: PubSubStreamWriter, ids: range, shift: int = 0) -> SinkCommitMessage:
    """One write task of ids, routed to partition (id + shift) % 3: a replay may route differently."""
    batch = pa.RecordBatch.from_pydict({"value": [str(i) for i in ids],
                                        "partition": pa.array([(i + shift) % 3 for i in ids], pa.int32())})
    return writer.write(iter([batch]))


def _ids(root: str, topic: str = "eo") -> list[int]:
    return sorted(int(r["value"]) for r in all_rows(root, topic))


@pytest.fixture
def eo_root(root: str) -> str:
    Broker.for_url(root).admin.create_partitioned_topic("eo", 3)
    return root


def test_commit_called_twice_for_one_batch_writes_once(eo_root: str) -> None:
    writer = _stream_writer(eo_root)
    messages = [_task(writer, range(0, 6)), None, _task(writer, range(6, 9))]  # None: a failed task
    writer.commit(messages, 0)
    after_first = versions(eo_root, "eo")
    writer.commit(messages, 0)  # the same messages again: a no-op that must not touch committed files
    assert versions(eo_root, "eo") == after_first
    assert _ids(eo_root) == list(range(9))

    # A replay of the batch by new tasks (new staged files, rows routed differently): written once,
    # and the replay's staged files are deleted.
    files = set(segment_files(eo_root, "eo"))
    writer.commit([_task(writer, range(0, 9), shift=1)], 0)
    assert _ids(eo_root) == list(range(9))
    assert set(segment_files(eo_root, "eo")) == files

    writer.commit([_task(writer, range(9, 12))], 1)
    assert _ids(eo_root) == list(range(12))


def test_replay_after_a_crash_between_partitions_completes_the_recorded_batch(
    eo_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = _stream_writer(eo_root)
    writer.commit([_task(writer, range(0, 3))], 0)
    first_attempt = [_task(writer, range(3, 12))]

    real = TopicLog.commit_staged
    calls = []

    def crash_after_one(self: TopicLog, *args: Any, **kwargs: Any) -> Any:
        calls.append(self.path)
        if len(calls) == 2:
            raise OSError("driver died mid-commit")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(TopicLog, "commit_staged", crash_after_one)
    with pytest.raises(OSError):
        writer.commit(first_attempt, 1)
    monkeypatch.setattr(TopicLog, "commit_staged", real)
    partial = _ids(eo_root)
    assert 3 < len(partial) < 12  # one partition of batch 1 is visible, the others are not

    # Spark aborts the failed attempt: files the recorded batch still needs are kept.
    writer.abort(first_attempt, 1)
    # The replay's tasks route every row to a different partition than the first attempt did.
    writer.commit([_task(writer, range(3, 12), shift=2)], 1)
    assert _ids(eo_root) == list(range(12))
    for index, table in enumerate(read_topic(eo_root, "eo")):
        assert all(int(v) % 3 == index for v in table.column("value").to_pylist())  # first attempt's routing


def test_abort_deletes_staged_files_and_failed_tasks_clean_up(eo_root: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    writer = _stream_writer(eo_root)
    messages = [_task(writer, range(0, 6))]
    assert segment_files(eo_root, "eo")
    writer.abort([*messages, None], 0)
    assert segment_files(eo_root, "eo") == []
    assert _ids(eo_root) == []

    # A task stages every MAX_BUFFERED_ROWS rows (bounded memory); if it fails, it removes its files.
    monkeypatch.setattr(sink_module, "MAX_BUFFERED_ROWS", 2)

    def failing() -> Iterator[pa.RecordBatch]:
        yield pa.RecordBatch.from_pydict({"value": ["a", "b", "c"], "partition": pa.array([0] * 3, "int32")})
        assert segment_files(eo_root, "eo")
        raise RuntimeError("task killed")

    with pytest.raises(RuntimeError):
        writer.write(failing())
    assert segment_files(eo_root, "eo") == []
    batches = [pa.RecordBatch.from_pydict({"value": [str(i)], "partition": pa.array([1], pa.int32())})
               for i in range(5)]
    message = writer.write(iter(batches))
    ((_, segments),) = message.staged
    assert [s.num_records for s in segments] == [2, 2, 1]
    writer.commit([message], 0)
    assert read_topic(eo_root, "eo")[1].column("value").to_pylist() == [b"0", b"1", b"2", b"3", b"4"]


def test_reused_sink_id_with_a_reset_checkpoint_is_an_error(eo_root: str) -> None:
    writer = _stream_writer(eo_root)
    for batch in range(3):
        writer.commit([_task(writer, range(batch * 3, batch * 3 + 3))], batch)
    with pytest.raises(InvalidConfiguration, match=re.escape("already holds write 2 of 'pubsub.sink.unit'")):
        writer.commit([_task(writer, range(100, 103))], 0)
    assert _ids(eo_root) == list(range(9))


def test_a_sink_id_shared_by_two_queries_is_an_error(eo_root: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    first = _stream_writer(eo_root, checkpointlocation=str(tmp_path / "ck-a"))
    second = _stream_writer(eo_root, checkpointlocation=str(tmp_path / "ck-b"))
    monkeypatch.setattr(TopicLog, "commit_staged", lambda *a, **k: (_ for _ in ()).throw(OSError("crash")))
    with pytest.raises(OSError):
        first.commit([_task(first, range(0, 6))], 0)  # batch 0 of the first query is begun, not done
    monkeypatch.undo()
    with pytest.raises(InvalidConfiguration, match="was begun by"):
        second.commit([_task(second, range(100, 106))], 0)  # not silently taken for a replay
    first.commit([_task(first, range(0, 6), shift=1)], 0)
    assert _ids(eo_root) == list(range(6))


def test_stream_writer_option_errors(root: str) -> None:
    options = parse_options(SinkOptions, {"serviceurl": root, "topic": "x"})
    with pytest.raises(InvalidConfiguration, match="checkpointLocation"):
        PubSubStreamWriter(options, _SCHEMA, overwrite=False)
    with pytest.raises(InvalidConfiguration, match=re.escape("option sinkId='../up'")):
        _stream_writer(root, topic="x", sinkid="../up")
    with pytest.raises(InvalidConfiguration, match="append-only"):
        PubSubStreamWriter(parse_options(SinkOptions, {"serviceurl": root, "topic": "x", "sinkid": "a"}),
                           _SCHEMA, overwrite=True)
    with pytest.raises(Exception, match="non-persistent"):
        _stream_writer(root, topic="non-persistent://public/default/np")


def test_commit_staged_once_ignores_empty_writes(root: str) -> None:
    broker = Broker.for_url(root)
    result = commit_staged_once(broker.io, lambda t: broker.topic_log(TopicName.parse(t)), {},
                                app_id="pubsub.sink.empty", version=0)
    assert result == {}
    assert not Path(root, STAGED_TXN_DIR, "pubsub.sink.empty").exists()
