"""Typed topics in Spark: value as a struct from the topic's schema, evolution, multi-topic reads, the sink."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)
from records import V1, V2

from broker_core import Client, InitialPosition
from broker_core import schema as m
from broker_core.broker.broker import Broker


class V3(m.Record):
    id = m.Long(required=True)
    name = m.String()
    score = m.Double(default=0.5, required=True, required_default=True)
    tags = m.Map(m.Integer(), required_default=True)  # default null: a compatible addition


V3_TYPE = StructType([StructField("id", LongType()), StructField("name", StringType()),
                      StructField("score", DoubleType()), StructField("tags", MapType(StringType(), IntegerType()))])


@pytest.fixture
def root(tmp_path: Path) -> str:
    path = tmp_path / "root"
    (path / "_pubsub").mkdir(parents=True)
    (path / "_pubsub" / "broker.toml").write_text("fsyncEnabled = false\n")
    return str(path)


def _produce(root: str, topic: str, *batches: tuple[m.Schema, list[object]]) -> None:
    client = Client(f"file://{root}")
    try:
        for schema, values in batches:
            producer = client.create_producer(topic, schema=schema)
            for value in values:
                producer.send(value)
            producer.close()
    finally:
        client.close()


def _read(spark: SparkSession, root: str, **options: str):  # type: ignore[no-untyped-def]
    reader = spark.read.format("pubsub").option("serviceUrl", root)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_rows_of_three_versions_read_as_the_latest_struct(spark: SparkSession, root: str) -> None:
    _produce(root, "typed", (m.AvroSchema(V1), [V1(id=1, name="a")]), (m.AvroSchema(V2), [V2(id=2, score=2.0)]),
             (m.AvroSchema(V3), [V3(id=3, name="c", tags={"x": 1}), None]))
    df = _read(spark, root, topic="typed").select("offset", "value").orderBy("offset")
    expected = spark.createDataFrame(
        [(0, (1, "a", 0.5, None)), (1, (2, None, 2.0, None)), (2, (3, "c", 0.5, {"x": 1})), (3, None)],
        StructType([StructField("offset", LongType(), False), StructField("value", V3_TYPE, True)]))
    assert_df_equality(df, expected, ignore_nullable=True)
    # the raw bytes stay available
    raw = _read(spark, root, topic="typed", valueFormat="binary").orderBy("offset").select("value").collect()
    assert raw[0].value == m.AvroSchema(V1).encode(V1(id=1, name="a")) and raw[3].value is None
    assert dict(_read(spark, root, topic="typed", valueFormat="binary").dtypes)["value"] == "binary"


def test_the_native_scan_reads_a_typed_topic_as_the_source_does(spark: SparkSession, root: str) -> None:
    from spark_pubsub import read_topic

    _produce(root, "typed", (m.AvroSchema(V1), [V1(id=1, name="a")]), (m.AvroSchema(V2), [V2(id=2, score=2.0)]))
    assert_df_equality(read_topic(spark, root, topic="typed").orderBy("offset"),
                       _read(spark, root, topic="typed").orderBy("offset"))
    raw = read_topic(spark, root, topic="typed", valueFormat="binary")
    assert dict(raw.dtypes)["value"] == "binary"
    assert_df_equality(raw.orderBy("offset"), _read(spark, root, topic="typed", valueFormat="binary").orderBy("offset"))


def test_json_topics_and_streams_read_typed(spark: SparkSession, root: str, tmp_path: Path) -> None:
    _produce(root, "js", (m.JsonSchema(V1), [V1(id=1, name="a\nb")]), (m.JsonSchema(V2), [V2(id=2)]))
    stream = (spark.readStream.format("pubsub").option("serviceUrl", root).option("topic", "js")
              .option("startingOffsets", "earliest").load().select("value.*"))
    query = (stream.writeStream.format("memory").queryName("typed_js").trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    query.awaitTermination()
    expected = spark.createDataFrame([(1, "a\nb", 0.5), (2, None, 0.5)], "id long, name string, score double")
    assert_df_equality(spark.table("typed_js"), expected, ignore_row_order=True, ignore_nullable=True)


def test_multi_topic_reads_use_one_schema_or_name_the_topic_that_differs(spark: SparkSession, root: str) -> None:
    _produce(root, "a", (m.AvroSchema(V1), [V1(id=1)]))
    _produce(root, "b", (m.AvroSchema(V2), [V2(id=2, score=1.0)]))
    df = _read(spark, root, topics="a,b").select("value.id", "value.score")
    expected = spark.createDataFrame([(1, 0.5), (2, 1.0)], "id long, score double")
    assert_df_equality(df, expected, ignore_row_order=True, ignore_nullable=True)

    class Other(m.Record):
        id = m.String(required=True)

    _produce(root, "c", (m.AvroSchema(Other), [Other(id="x")]))
    with pytest.raises(Exception, match=re.escape("persistent://public/default/c")):
        _read(spark, root, topics="a,c").collect()
    assert _read(spark, root, topics="a,c", valueFormat="binary").count() == 2
    _produce(root, "plain", (m.BytesSchema(), [b"raw"]))
    with pytest.raises(Exception, match="plain has no schema"):
        _read(spark, root, topics="a,plain").collect()
    with pytest.raises(Exception, match="valueFormat=typed"):
        _read(spark, root, topic="plain", valueFormat="typed").collect()
    with pytest.raises(Exception, match="valueFormat"):
        _read(spark, root, topic="a", valueFormat="avro").collect()


def test_sink_encodes_a_struct_value_with_the_topics_schema(spark: SparkSession, root: str) -> None:
    _produce(root, "out", (m.AvroSchema(V2), [V2(id=0)]))
    df = spark.createDataFrame([(1, "x", 1.5), (2, None, 2.5)], "id long, name string, score double")
    df.select(F.struct("id", "name", "score").alias("value")).write.format("pubsub").option(
        "serviceUrl", root).option("topic", "out").mode("append").save()
    client = Client(f"file://{root}")
    consumer = client.subscribe("out", "s", schema=m.AvroSchema(V2), initial_position=InitialPosition.Earliest)
    got = [consumer.receive(5000) for _ in range(3)]
    assert [g.value() for g in got] == [V2(id=0), V2(id=1, name="x", score=1.5), V2(id=2, score=2.5)]
    assert {g.schema_version() for g in got} == {b"\0" * 8}
    client.close()
    # a topic without a schema gets the column's derived schema registered
    df.select(F.struct("id", "name").alias("value")).write.format("pubsub").option(
        "serviceUrl", root).option("topic", "fresh").mode("append").save()
    registry = Broker.for_url(root).schemas.registry("fresh")
    assert registry.latest() is not None and registry.latest()[0] == 0
    assert_df_equality(_read(spark, root, topic="fresh").select("value.*"),
                       df.select("id", "name"), ignore_row_order=True, ignore_nullable=True)


def test_sink_refuses_columns_that_do_not_fit_and_writes_nothing(spark: SparkSession, root: str) -> None:
    _produce(root, "strict", (m.AvroSchema(V1), [V1(id=0)]))
    policies = Broker.for_url(root).policies
    policies.set_topic_policies("strict", {"isAllowAutoUpdateSchema": False})
    registry = Broker.for_url(root).schemas.registry("strict")
    for frame, column in (
        (spark.createDataFrame([(1, "x", 3)], "id long, name string, extra int"), "value.extra"),
        (spark.createDataFrame([("1", "x")], "id string, name string"), "value.id"),
        (spark.createDataFrame([("x",)], "name string"), "value.id"),
    ):
        with pytest.raises(Exception, match=re.escape(column)) as err:
            frame.select(F.struct(*frame.columns).alias("value")).write.format("pubsub").option(
                "serviceUrl", root).option("topic", "strict").mode("append").save()
        assert "isAllowAutoUpdateSchema" in str(err.value)  # registering the column's schema was refused
    assert len(registry.all_versions()) == 1
    assert _read(spark, root, topic="strict").count() == 1  # nothing written
    with pytest.raises(Exception, match=re.escape("needs .option('topic'")):
        spark.createDataFrame([("strict", 1)], "topic string, id long").select(
            "topic", F.struct("id").alias("value")).write.format("pubsub").option(
            "serviceUrl", root).mode("append").save()


def test_binary_sink_still_writes_untyped_rows(spark: SparkSession, root: str) -> None:
    spark.createDataFrame([(b"x",)], StructType([StructField("value", BinaryType())])).write.format(
        "pubsub").option("serviceUrl", root).option("topic", "bin").mode("append").save()
    assert Broker.for_url(root).schemas.registry("bin").latest() is None
    assert _read(spark, root, topic="bin").collect()[0].value == b"x"


def test_a_refused_typed_writer_registers_nothing(root: str) -> None:
    from spark_pubsub.options import SinkOptions, parse_options
    from spark_pubsub.sink import PubSubStreamWriter

    schema = StructType([StructField("value", StructType([StructField("id", LongType())]))])
    options = parse_options(SinkOptions, {"serviceurl": root, "topic": "later"})
    with pytest.raises(Exception, match="checkpointLocation"):
        PubSubStreamWriter(options, schema, overwrite=False)  # a streaming write without a checkpoint
    assert Broker.for_url(root).schemas.registry("later").all_versions() == []


class Inner(m.Record):
    x = m.Integer(required=True)


class Required(m.Record):
    id = m.Long(required=True)
    note = m.String()
    inner = Inner()  # an optional record with a required field
    items = m.Array(m.Long(), required_default=True)


def test_required_avro_fields_are_not_nullable_and_the_batches_spark_gets_match(spark: SparkSession,
                                                                                root: str) -> None:
    from spark_pubsub.offsets import read_plan
    from spark_pubsub.options import SourceOptions, parse_options
    from spark_pubsub.scan_partition import read_scan_partition, with_typed

    _produce(root, "req", (m.AvroSchema(Required), [Required(id=1, note="a", inner=Inner(x=7), items=[1]),
                                                     Required(id=2)]))
    df = _read(spark, root, topic="req")
    value = df.schema["value"].dataType
    assert isinstance(value, StructType)
    assert [(f.name, f.nullable) for f in value.fields] == [("id", False), ("note", True), ("inner", True),
                                                            ("items", True)]
    inner = value["inner"].dataType
    assert isinstance(inner, StructType) and not inner["x"].nullable
    rows = df.orderBy("offset").select("value.id", "value.note", "value.inner.x").collect()
    assert [tuple(r) for r in rows] == [(1, "a", 7), (2, None, None)]
    assert df.where("value.id > 1").count() == 1
    # the Arrow batches Spark receives carry the same nullability as the schema it was given
    from pyspark.sql.pandas.types import to_arrow_schema

    options = parse_options(SourceOptions, {"path": root, "topic": "req", "startingoffsets": "earliest"})
    typed = read_plan(options)
    assert typed is not None
    expected = to_arrow_schema(typed.spark_schema(), timezone="UTC").field("value")
    from spark_pubsub.batch_reader import PubSubBatchReader

    reader = PubSubBatchReader(options)
    (partition,) = [p for p in with_typed(reader.planner.plan(reader.start, reader.end), typed)]
    batches = list(read_scan_partition(partition))  # type: ignore[arg-type]
    assert batches and all(b.schema.field("value") == expected for b in batches)
