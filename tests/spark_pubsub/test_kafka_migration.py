"""Moving over from Spark's Kafka connector: option aliases, Kafka-shaped columns in and out.

A Kafka pipeline should move by changing the format and the server option; what differs is in
docs/SPARK.md's migration table.  Parsing tests run without Spark; the round trip uses the session.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyspark.sql.functions as F
import pytest
from source_job import create_partitioned, make_root, produce

from broker_core.errors import InvalidConfiguration
from spark_pubsub.offsets import PartitionPlanner, parse_offsets_spec
from spark_pubsub.options import SinkOptions, SourceOptions, parse_options


def parse(**options: str) -> SourceOptions:
    values: dict[str, str] = {"serviceurl": "/r", **{k.lower(): v for k, v in options.items()}}
    return parse_options(SourceOptions, values)


def test_kafka_option_names_are_aliases() -> None:
    assert parse(subscribe="a, b").topics == "a, b"
    assert parse(subscribePattern="orders-.*").topics_pattern == "persistent://public/default/orders-.*"
    assert parse(subscribePattern="persistent://t/n/x.*").topics_pattern == "persistent://t/n/x.*"
    assert parse(topic="t", maxOffsetsPerTrigger="10").max_messages_per_trigger == 10
    for same in ("startingOffsets", "endingOffsets", "failOnDataLoss", "minPartitions", "startingTimestamp",
                 "includeHeaders"):
        assert same.lower() in {f.alias for f in SourceOptions.model_fields.values()}


def test_alias_errors_name_the_option_as_the_user_wrote_it() -> None:
    with pytest.raises(InvalidConfiguration, match="maxOffsetsPerTrigger='lots'"):
        parse(topic="t", maxOffsetsPerTrigger="lots")
    with pytest.raises(InvalidConfiguration, match="subscribe and topics mean the same thing"):
        parse(subscribe="a", topics="b")
    with pytest.raises(InvalidConfiguration, match=r"kafka.bootstrap.servers.*serviceUrl"):
        parse(topic="t", **{"kafka.bootstrap.servers": "localhost:9092"})
    with pytest.raises(InvalidConfiguration, match="did you mean 'subscribePattern'"):
        parse(subscribepatern="x.*")
    with pytest.raises(InvalidConfiguration, match="did you mean 'createRoot'"):
        parse_options(SinkOptions, {"serviceurl": "/r", "topic": "t", "createroots": "true"})


def test_offsets_json_keyed_by_topic_and_partition_number(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root")
    create_partitioned(root, "p", 2)
    produce(root, "p", [f"m{i}" for i in range(10)], keys=lambda i: f"k{i}")
    produce(root, "plain", ["a", "b", "c"])
    planner = PartitionPlanner(parse_options(SourceOptions, {"path": root, "subscribe": "p,plain"}))
    latest = planner.latest_positions()
    spec = json.dumps({"p": {"0": 1, "1": -2}, "plain": {"0": -1}})
    got = parse_offsets_spec(planner, spec, "startingOffsets")
    assert got == {"persistent://public/default/p-partition-0": 1, "persistent://public/default/p-partition-1": 0,
                   "persistent://public/default/plain": latest["persistent://public/default/plain"]}
    with pytest.raises(InvalidConfiguration, match="partition 'x'"):
        parse_offsets_spec(planner, json.dumps({"p": {"x": 1}}), "startingOffsets")
    with pytest.raises(InvalidConfiguration, match="not one of this query's internal topics"):
        parse_offsets_spec(planner, json.dumps({"p": {"5": 1}}), "startingOffsets")


def test_a_kafka_pipeline_round_trips_with_only_the_format_and_server_option_changed(
    spark: Any, tmp_path: Path
) -> None:
    root = make_root(tmp_path / "root")
    create_partitioned(root, "orders", 2)
    kafka_shaped = spark.createDataFrame(
        [(bytearray(b"k1"), "v1", 0), (bytearray(b"k2"), "v2", 1), (None, "v3", 1)],
        "key binary, value string, partition int",
    ).select(
        "key", "value", "partition", F.lit("orders").alias("topic"),
        F.array(F.struct(F.lit("trace").alias("key"), F.lit(b"abc").alias("value"))).alias("headers"),
    )
    kafka_shaped.write.format("pubsub").option("serviceUrl", root).mode("append").save()
    rows = (
        spark.read.format("pubsub").option("serviceUrl", root).option("subscribe", "orders")
        .option("startingOffsets", "earliest").option("includeHeaders", "true").load()
        .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "topic", "partition",
                    "timestamp", "timestampType", "headers", "properties", "sequenceId")
        .collect()
    )
    got = sorted(((r.key, r.value, r.topic, r.partition) for r in rows), key=lambda t: (t[0] or "", t[1]))
    assert got == [(None, "v3", "persistent://public/default/orders", 1),
                   ("k1", "v1", "persistent://public/default/orders", 0),
                   ("k2", "v2", "persistent://public/default/orders", 1)]
    for r in rows:
        assert r.timestamp is not None and r.timestampType == 0
        assert [(h.key, bytes(h.value)) for h in r.headers] == [("trace", b"abc")]
        assert r.properties == {"trace": "abc"}
        assert r.sequenceId is not None  # set by the sink
    assert len({r.sequenceId for r in rows}) == 3


def test_headers_and_properties_convert_both_ways_vectorised_with_nulls_and_slices() -> None:
    import pyarrow as pa

    from spark_pubsub.schema import ARROW_SOURCE_SCHEMA_WITH_HEADERS, properties_as_headers
    from spark_pubsub.sink_columns import headers_as_properties

    headers_type = ARROW_SOURCE_SCHEMA_WITH_HEADERS.field("headers").type
    props = pa.array([[("a", "1"), ("b", "2")], None, [], [("c", "x")]], type=pa.map_(pa.string(), pa.string()))
    expected = [[("a", b"1"), ("b", b"2")], None, [], [("c", b"x")]]
    for lo in range(4):
        got = properties_as_headers(props.slice(lo), headers_type).to_pylist()
        assert [None if h is None else [(e["key"], e["value"]) for e in h] for h in got] == expected[lo:]
        back = headers_as_properties(properties_as_headers(props.slice(lo), headers_type))
        assert back.to_pylist() == props.slice(lo).to_pylist()
    bad = pa.array([[{"key": "k", "value": b"\xff"}]], type=headers_type)
    with pytest.raises(Exception, match="not UTF-8"):
        headers_as_properties(bad)
