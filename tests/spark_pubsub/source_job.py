"""Helpers shared by the source tests, and a subprocess job they run.

As a module (``from source_job import ...``; pytest puts this directory on ``sys.path``): storage
roots, bulk producing with ``broker_core``, and small runners for streaming queries.

As a script, one of two jobs, each in its own SparkSession:

- ``consume ROOT CHECKPOINT OUT``: a Shared-subscription streaming query whose ``foreachBatch``
  appends ``<batchId> <value>`` lines (fsynced) to OUT, forever; the durability test SIGKILLs it and
  starts it again from the same checkpoint with the same consumerName.
- ``cluster ROOT OUT MASTER``: an end-to-end job on ``local-cluster``: read a topic in batch and
  streaming (subscription) form, record which processes ran the tasks, write through the pubsub sink
  when ``spark_pubsub/sink.py`` exists, and write a JSON report to OUT.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # when run as a script
    sys.path.insert(0, str(REPO_ROOT))

from broker_core import Admin, Client  # noqa: E402

# -- storage roots and data ---------------------------------------------------------------------------


def make_root(path: Path, **settings: Any) -> str:
    """A storage root whose ``_pubsub/broker.toml`` turns fsync off (plus ``settings``, by Pulsar name).

    The settings live in the root so that every process (the Spark driver's Python runner, the
    executors, this test) resolves the same broker config."""
    (path / "_pubsub").mkdir(parents=True, exist_ok=True)
    lines = ["fsyncEnabled = false"]
    for key, value in settings.items():
        lines.append(f"{key} = {json.dumps(value)}")
    (path / "_pubsub" / "broker.toml").write_text("\n".join(lines) + "\n")
    return str(path)


def create_partitioned(root: str, topic: str, partitions: int) -> None:
    Admin.open(root).create_partitioned_topic(topic, partitions)


def values_table(values: list[str], **columns: Iterable[Any]) -> pa.Table:
    data: dict[str, Any] = {"value": [v.encode() for v in values]}
    for name, column in columns.items():
        data[name] = list(column)
    if "properties" in data:
        data["properties"] = pa.array(data["properties"], pa.map_(pa.string(), pa.string()))
    if "deliver_at" in data:
        data["deliver_at"] = pa.array(data["deliver_at"], pa.int64())
    if "event_time" in data:
        data["event_time"] = pa.array(data["event_time"], pa.int64())
    return pa.table(data)


def produce(
    root: str,
    topic: str,
    values: list[str],
    *,
    keys: Callable[[int], str | None] | None = None,
    client: Client | None = None,
    **columns: Iterable[Any],
) -> list[str]:
    """Append ``values`` (as UTF-8) to ``topic`` in one bulk ``send_table`` (one segment per
    partition), keys from ``keys(i)``; returns ``values``."""
    if keys is not None:
        columns["key"] = [keys(i) for i in range(len(values))]
    own = client is None
    client = client or Client(root)
    try:
        producer = client.create_producer(topic)
        producer.send_table(values_table(values, **columns))
        producer.close()
    finally:
        if own:
            client.close()
    return values


def names(prefix: str, n: int, start: int = 0) -> list[str]:
    return [f"{prefix}-{i}" for i in range(start, start + n)]


# -- streaming queries ---------------------------------------------------------------------------------


def source(spark: Any, root: str, **options: Any) -> Any:
    """``spark.readStream.format("pubsub")`` with ``options`` (values turned into strings)."""
    reader = spark.readStream.format("pubsub")
    for key, value in options.items():
        reader = reader.option(key, value if isinstance(value, str) else json.dumps(value))
    return reader.load(root)


class Collector:
    """A ``foreachBatch`` sink that keeps every batch's rows (selected columns) in this process."""

    def __init__(
        self, columns: tuple[str, ...] = ("value",), on_batch: Callable[[Any, int], None] | None = None
    ):
        self.columns = columns
        self.on_batch = on_batch
        self.batches: list[tuple[int, list[tuple[Any, ...]]]] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = [tuple(r) for r in df.select(*self.columns).collect()]
        self.batches.append((batch_id, rows))
        if self.on_batch is not None:
            self.on_batch(df, batch_id)

    @property
    def rows(self) -> list[tuple[Any, ...]]:
        return [row for _, batch in self.batches for row in batch]

    @property
    def values(self) -> list[str]:
        """The first selected column of every row, decoded when it is the binary value."""
        out = []
        for row in self.rows:
            first = row[0]
            out.append(first.decode() if isinstance(first, bytes | bytearray) else first)
        return out


def run_available_now(df: Any, checkpoint: str | Path, collector: Collector) -> Any:
    """Run the query once with ``Trigger.AvailableNow`` into ``collector``; returns the query."""
    query = (
        df.writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return query


def start_continuous(df: Any, checkpoint: str | Path, collector: Collector) -> Any:
    """Start the query with the default (as fast as possible) trigger."""
    return (
        df.writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(checkpoint))
        .queryName(f"q{uuid.uuid4().hex[:8]}")
        .start()
    )


def batch_sizes(query: Any) -> list[int]:
    """Input rows of every micro-batch that ran (progress entries of empty triggers excluded)."""
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]


# -- the subprocess jobs --------------------------------------------------------------------------------


def _session(master: str, app: str) -> Any:
    from pyspark.sql import SparkSession

    import spark_pubsub

    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if master.startswith("local-cluster"):
        builder = builder.config("spark.executor.memory", "768m").config("spark.driver.memory", "1g")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark_pubsub.register(spark)
    return spark


def consume_job(root: str, checkpoint: str, out: str) -> None:
    """A Shared-subscription query that appends what each batch read to ``out`` (at-least-once)."""
    spark = _session("local[2]", "pubsub-durability")
    df = source(
        spark,
        root,
        topic="dur",
        subscription="dur-sub",
        subscriptionType="Shared",
        consumerName="dur-consumer",
        subscriptionInitialPosition="Earliest",
        maxMessagesPerTrigger=300,
        leaseRenewMs=60_000,
    )

    def append(batch: Any, batch_id: int) -> None:
        lines = [f"{batch_id} {row.value.decode()}\n" for row in batch.select("value").collect()]
        with open(out, "a") as fh:
            fh.writelines(lines)
            fh.flush()
            os.fsync(fh.fileno())

    query = (
        df.writeStream.foreachBatch(append)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    query.awaitTermination()


def cluster_job(root: str, out: str, master: str, s3: dict[str, Any] | None = None) -> None:
    """Produce, read in batch and as a subscription stream on ``master``, optionally write through the
    sink, and report what happened (rows, task processes, driver process) as JSON.

    ``s3`` (``{"root": url, "options": storage_options}``): also produce to an S3 root, read it in batch
    on the executors and copy it through the sink there, all with ``storage.*`` options."""
    from pyspark.sql import functions as F

    spark = _session(master, "pubsub-local-cluster")
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    deadline = time.monotonic() + 180
    while status.size() < 3 and time.monotonic() < deadline:  # the driver and two executors
        time.sleep(0.5)
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    if status.size() < 3:
        Path(out).write_text(
            json.dumps({"skip": f"only {status.size() - 1} executor(s) registered in 180 s"})
        )
        spark.stop()
        return
    create_partitioned(root, "lc", 2)
    produce(root, "lc", names("lc", 2000), keys=lambda i: f"k{i % 37}")

    pids = F.udf(lambda: os.getpid(), "int")
    batch = spark.read.format("pubsub").option("topic", "lc").option("minPartitions", "4").load(root)
    batch_rows = batch.withColumn("pid", pids()).select(
        "value", "key", "pid", F.spark_partition_id().alias("task")
    )
    collected = batch_rows.collect()
    keys_per_task = (
        batch_rows.groupBy("key").agg(F.countDistinct("task").alias("n")).agg(F.max("n")).first()[0]
    )

    # a subscription stream: the driver claims and acknowledges, the executors only read
    stream = source(
        spark,
        root,
        topic="lc",
        subscription="lc-sub",
        subscriptionType="Shared",
        subscriptionInitialPosition="Earliest",
        maxMessagesPerTrigger=700,
    )
    stream_out = str(Path(out).with_suffix(".stream"))
    writer = (
        stream.select("value", "messageId")
        .writeStream.format("parquet")
        .option("checkpointLocation", stream_out + "-ck")
        .option("path", stream_out)
        .trigger(availableNow=True)
    )
    query = writer.start()
    query.awaitTermination()
    stream_batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    writer.start().awaitTermination()  # a second run acknowledges the first one's last batch
    streamed = spark.read.parquet(stream_out).select("value").collect()

    report: dict[str, Any] = {
        "driver_pid": os.getpid(),
        "master": spark.sparkContext.master,
        "executors": spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1,
        "batch_values": sorted(r.value.decode() for r in collected),
        "task_pids": sorted({r.pid for r in collected}),
        "batch_partitions": batch.rdd.getNumPartitions(),
        "max_tasks_per_key": keys_per_task,
        "stream_values": sorted(r.value.decode() for r in streamed),
        "stream_batches": stream_batches,
        "sink": None,
    }
    if (REPO_ROOT / "spark_pubsub" / "sink.py").exists():
        try:
            batch.select("key", "value").write.format("pubsub").option("topic", "lc-copy").mode(
                "append"
            ).save(root)
            copied = (
                spark.read.format("pubsub").option("topic", "lc-copy").load(root).select("value").collect()
            )
            report["sink"] = sorted(r.value.decode() for r in copied)
        except Exception as exc:  # reported, the test decides
            report["sink"] = f"error: {type(exc).__name__}: {str(exc)[:2000]}"
    # the native scan and the Spark compaction job, read and written by the executors
    from spark_pubsub import read_topic
    from spark_pubsub.compaction_job import compact_with_spark

    def ids(df: Any) -> list[list[Any]]:
        rows = df.select("topic", "offset", "messageId", "key", "value").collect()
        return sorted([r.topic, r.offset, r.messageId, r.key, r.value.decode()] for r in rows)

    native = read_topic(spark, root, topic="lc")
    report["native_jvm"] = "spark_pubsub_planned_segments" in native._jdf.queryExecution().executedPlan().toString()
    report["native_rows"] = ids(native)
    report["source_rows"] = ids(spark.read.format("pubsub").option("topic", "lc").load(root))
    compacted = compact_with_spark(spark, root, "lc")
    report["compaction"] = sorted(r.status for r in compacted.results)
    if s3 is not None:
        report["s3"] = _s3_phase(spark, s3["root"], s3["options"], pids)
    Path(out).write_text(json.dumps(report))
    spark.stop()


def _s3_phase(spark: Any, root: str, options: dict[str, str], pids: Any) -> dict[str, Any]:
    """Produce to an S3 root, read it on the executors, write a copy through the sink, read the copy."""
    storage = {f"storage.{k}": v for k, v in options.items()}
    Admin.open(root, storage_options=options).create_partitioned_topic("lc3", 2)
    client = Client(root, storage_options=options)
    produce(root, "lc3", names("s3", 500), keys=lambda i: f"k{i % 11}", client=client)
    client.close()
    batch = (spark.read.format("pubsub").options(**storage).option("topic", "lc3").option("minPartitions", "4")
             .load(root))
    rows = batch.withColumn("pid", pids()).select("value", "pid").collect()
    batch.select("key", "value").write.format("pubsub").options(**storage).option("topic", "lc3-copy").mode(
        "append").save(root)
    copied = spark.read.format("pubsub").options(**storage).option("topic", "lc3-copy").load(root).collect()
    return {"values": sorted(bytes(r.value).decode() for r in rows), "task_pids": sorted({r.pid for r in rows}),
            "copied": sorted(bytes(r.value).decode() for r in copied)}


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    mode = sys.argv[1]
    if mode == "consume":
        consume_job(sys.argv[2], sys.argv[3], sys.argv[4])
    elif mode == "cluster":
        cluster_job(sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5]) if len(sys.argv) > 5 else None)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
