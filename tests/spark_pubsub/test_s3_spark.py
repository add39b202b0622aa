"""Spark on an S3 root (moto): the source and the sink reach ``s3://`` through ``storage.*`` options in the
driver and the Python workers (no Hadoop S3 connector), credentials stay out of plans and progress, and
the exactly-once sink reads its identity from checkpoint metadata on object stores too."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from moto_s3 import SECRET_ACCESS_KEY, MotoS3
from pyspark.sql import SparkSession
from source_job import Collector, names, run_available_now, source

from broker_core import Client
from broker_core.storage import file_io_for
from spark_pubsub.sink import default_sink_id


def _storage(server: MotoS3) -> dict[str, str]:
    return {f"storage.{key}": value for key, value in server.storage_options.items()}


def test_batch_write_and_read_of_an_s3_root_keep_credentials_out_of_plans(spark: SparkSession,
                                                                       moto_s3: MotoS3) -> None:
    root = moto_s3.fresh_root()
    values = names("s3", 300)
    df = spark.createDataFrame([(v.encode(), f"k{i % 7}") for i, v in enumerate(values)], "value binary, key string")
    df.write.format("pubsub").options(**_storage(moto_s3)).option("topic", "orders").mode("append").save(root)
    read = spark.read.format("pubsub").options(**_storage(moto_s3)).option("topic", "orders").load(root)
    assert sorted(bytes(r.value).decode() for r in read.select("value").collect()) == sorted(values)
    plans = read._jdf.queryExecution().toString()  # parsed, analyzed, optimized and physical plans
    assert "pubsub" in plans and SECRET_ACCESS_KEY not in plans
    io = file_io_for(root, storage_options=moto_s3.storage_options)
    assert io.list_dir("public/default/persistent/orders/_delta_log")


def test_streaming_read_and_exactly_once_write_on_s3_keep_credentials_out_of_progress(
        spark: SparkSession, moto_s3: MotoS3, tmp_path: Path) -> None:
    root = moto_s3.fresh_root()
    client = Client(root, storage_options=moto_s3.storage_options)
    try:
        producer = client.create_producer("in")
        for value in names("in", 50):
            producer.send(value.encode())
        producer.flush()
    finally:
        client.close()
    stream = source(spark, root, topic="in", subscription="s", subscriptionInitialPosition="Earliest",
                    **_storage(moto_s3))
    collector = Collector()
    query = run_available_now(stream, tmp_path / "read-ck", collector)
    assert sorted(collector.values) == sorted(names("in", 50))
    progress = json.dumps([str(p) for p in query.recentProgress])
    assert SECRET_ACCESS_KEY not in progress

    write = (source(spark, root, topic="in", startingOffsets="earliest", **_storage(moto_s3))
             .select("value").writeStream.format("pubsub").options(**_storage(moto_s3)).option("topic", "out")
             .option("serviceUrl", root)
             .option("checkpointLocation", str(tmp_path / "write-ck")).trigger(availableNow=True).start())
    write.awaitTermination()
    assert SECRET_ACCESS_KEY not in json.dumps([str(p) for p in write.recentProgress])
    out = spark.read.format("pubsub").options(**_storage(moto_s3)).option("topic", "out").load(root)
    assert sorted(bytes(r.value).decode() for r in out.collect()) == sorted(names("in", 50))


@pytest.mark.parametrize("scheme", ["s3", "s3a"])
def test_the_sink_identity_follows_a_checkpoint_on_s3_deleted_and_restarted(moto_s3: MotoS3, scheme: str) -> None:
    prefix = moto_s3.fresh_root().removeprefix("s3://")
    checkpoint = f"{scheme}://{prefix}/ckpt"
    options = moto_s3.storage_options
    io = file_io_for(f"s3://{prefix}/ckpt", storage_options=options)
    io.put_if_absent("metadata", json.dumps({"id": str(uuid.uuid4())}).encode() + b"\n")
    first = default_sink_id(checkpoint, options)
    assert default_sink_id(checkpoint, options) == first  # a restart on the same checkpoint: same sink
    for name in io.list_dir(""):  # the checkpoint is deleted ...
        io.delete(name)
    io.put_if_absent("metadata", json.dumps({"id": str(uuid.uuid4())}).encode() + b"\n")  # ... and restarted
    assert default_sink_id(checkpoint, options) != first  # a reset checkpoint is a new sink


def test_a_checkpoint_on_a_file_system_spark_cannot_open_is_an_error_not_a_silent_id(spark: SparkSession) -> None:
    from broker_core.errors import InvalidConfiguration

    with pytest.raises(InvalidConfiguration, match="sinkId"):
        default_sink_id("nosuchfs://somewhere/ckpt")
