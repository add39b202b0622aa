"""The Spark connector against Spark's own Parquet source and sink, on the same data.

Run from the repository root (it sets ``PYSPARK_PYTHON`` to this interpreter itself)::

    .venv/bin/python benchmarks/bench_spark.py [--messages N] [--root DIR] [--repeats R] [--keep]

Data: N messages (default 5,000,000) with 100-byte random values and short string keys (1,000
distinct), appended with ``Producer.send_table`` in chunks of 250,000 rows to ONE internal topic (so
N / 250,000 segment files), and the same rows written as plain Parquet files (key, value), one per
chunk.  Every query runs in one ``local[2]`` SparkSession (UI off), is a streaming query with
``Trigger.AvailableNow`` and is timed from ``start()`` to the end of ``awaitTermination()``, so every
figure includes Spark's per-query and per-batch fixed costs alike.

What it measures (goal: each pubsub figure within 2x of Spark's own):

a. read: ``format("pubsub")`` into the ``noop`` sink, vs Spark's streaming Parquet file source
   over the directory of the topic's segment files (the very files the pubsub source reads; Spark
   skips ``_delta_log`` and ``_producers``) into ``noop``; also vs the plain Parquet copy.  One
   internal topic is one task unless ``minPartitions`` splits it (by key hash: every task decodes
   every segment and keeps its keys), while Spark splits files over both cores, so the pubsub read
   is also shown with ``minPartitions=2``;
b. write: the plain Parquet copy read by Spark's file source (streaming) and written through
   ``format("pubsub")`` vs the same input written by Spark's Parquet sink (skipped, and said so,
   when ``spark_pubsub/sink.py`` does not exist);
c. parallelism: a 1-partition topic read with ``minPartitions=8`` vs ``minPartitions=1``;
d. batch reads (``spark.read``) into ``noop``: the native scan ``spark_pubsub.read_topic`` (planning
   included) and ``spark.read.format("pubsub")`` vs ``spark.read.parquet`` over the very segment
   files (goal for the native scan: <= 1.3x).  ``benchmarks/bench_native_scan.py`` measures the same
   round-robin, with the native scan's floor and its join paths as reference rows.

Reference rows (no goal): the floor of the Python Data Source API itself, a streaming source defined
here that reads no storage at all and yields one pre-built record batch of the pubsub source's
schema (same row count, same 100-byte values) over and over, in one task and in two.  Whatever
this costs is Spark's Arrow-to-row conversion and the per-query Python process, which the pubsub
source pays too and cannot go below.

This is a benchmark, not a test: nothing is asserted.  Each figure is the best of ``--repeats``
runs (default 2; the first run of a query warms the Python workers).  On a machine with other load,
rerun before trusting a single figure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from broker_core import Client  # noqa: E402
from broker_core.broker.broker import Broker  # noqa: E402
from broker_core.naming import TopicName  # noqa: E402

CHUNK = 250_000
TOPIC = "bench"
FLOOR_BATCH_ROWS = 65_536  # the pubsub source's own batch size (broker_core.topic.scan)


def floor_source() -> type:
    """A streaming data source that yields a pre-built ``SOURCE_SCHEMA`` batch (no storage work).

    Options: ``rows`` in total, split over ``tasks`` input partitions.  Defined in a function so that
    Spark pickles the classes by value to its Python processes.
    """
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    from spark_pubsub.schema import SOURCE_SCHEMA, to_source_batch

    def prebuilt_batch(n: int) -> pa.RecordBatch:
        rng = np.random.default_rng(7)
        values = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(100), n, [None, pa.py_buffer(rng.integers(0, 256, n * 100, dtype=np.uint8).tobytes())]
        ).cast(pa.binary())
        utc = pa.timestamp("us", tz="UTC")
        rows = pa.table({
            "key": pa.array([f"key-{j % 1000}" for j in range(n)], pa.string()),
            "value": values,
            "publish_time": pa.array(np.full(n, 1_700_000_000_000_000, dtype=np.int64)).cast(utc),
            "event_time": pa.nulls(n, utc),
            "properties": pa.nulls(n, pa.map_(pa.string(), pa.string())),
            "producer_name": pa.array(["bench"] * n, pa.string()),
            "sequence_id": pa.array(np.arange(n, dtype=np.int64)),
            "ordering_key": pa.nulls(n, pa.binary()),
            "deliver_at": pa.nulls(n, utc),
        })
        return to_source_batch(rows, topic=f"persistent://public/default/{TOPIC}", partition=-1,
                               offsets=np.arange(n), ledger_id=1_700_000_000_000, entry_ids=np.arange(n),
                               batch_indexes=np.full(n, -1))

    class FloorReader(DataSourceStreamReader):
        def __init__(self, rows: int, tasks: int) -> None:
            self.rows, self.tasks = rows, tasks

        def initialOffset(self) -> dict[str, int]:
            return {"o": 0}

        def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None) -> dict[str, int]:
            return {"o": self.rows}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            total = end["o"] - start["o"]
            return [InputPartition(total * (i + 1) // self.tasks - total * i // self.tasks)
                    for i in range(self.tasks)]

        def read(self, partition: InputPartition) -> Any:
            batch = prebuilt_batch(FLOOR_BATCH_ROWS)
            left = partition.value
            while left > 0:
                yield batch if left >= batch.num_rows else batch.slice(0, left)
                left -= batch.num_rows

        def commit(self, end: dict[str, int]) -> None:
            return None

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "pubsub_api_floor"

        def schema(self) -> Any:
            return SOURCE_SCHEMA

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return FloorReader(int(self.options["rows"]), int(self.options.get("tasks", "1")))

    return FloorSource


def make_data(root: Path, plain: Path, n: int) -> float:
    """Append ``n`` messages to ``TOPIC`` (bulk) and write the same rows as plain Parquet."""
    (root / "_pubsub").mkdir(parents=True, exist_ok=True)
    (root / "_pubsub" / "broker.toml").write_text("fsyncEnabled = false\n")
    plain.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(42)
    client = Client(str(root))
    producer = client.create_producer(TOPIC, producer_name="bench")
    started = time.perf_counter()
    for i, start in enumerate(range(0, n, CHUNK)):
        rows = min(CHUNK, n - start)
        values = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(100),
            rows,
            [None, pa.py_buffer(rng.integers(0, 256, rows * 100, dtype=np.uint8).tobytes())],
        ).cast(pa.binary())
        keys = pa.array([f"key-{j % 1000}" for j in range(start, start + rows)], pa.string())
        table = pa.table({"key": keys, "value": values})
        producer.send_table(table)
        pq.write_table(table, plain / f"part-{i:05d}.parquet")
    elapsed = time.perf_counter() - started
    producer.close()
    client.close()
    return elapsed


def segment_dir(root: Path) -> Path:
    return root / Path(*TopicName.parse(TOPIC).relative_path())


def session() -> Any:
    from pyspark.sql import SparkSession

    import spark_pubsub

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark_pubsub.register(spark)
    return spark


def timed(start_query: Any, repeats: int) -> tuple[float, int, int]:
    """Best wall time of ``repeats`` runs of a query (each with a fresh checkpoint); rows and batches
    of the best run."""
    best = (float("inf"), 0, 0)
    for _ in range(repeats):
        checkpoint = tempfile.mkdtemp(prefix="bench-ck-")
        t0 = time.perf_counter()
        query = start_query(checkpoint)
        query.awaitTermination()
        elapsed = time.perf_counter() - t0
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        rows = sum(p["numInputRows"] for p in progress)
        shutil.rmtree(checkpoint, ignore_errors=True)
        if elapsed < best[0]:
            best = (elapsed, rows, len(progress))
    return best


def summary(ratios: list[tuple[str, float]]) -> None:
    print("\nsummary (time ratios; goal for pubsub / Spark: <= 2.0; for the native batch scan: <= 1.3)")
    print(f"  {'':52} {'ratio':>7}")
    for name, ratio in ratios:
        reference = name.startswith(("minPartitions", "reference")) or "Data Source" in name
        goal_ratio = 1.3 if "native" in name else 2.0
        goal = "" if reference else ("  MET" if ratio <= goal_ratio else "  MISSED")
        print(f"  {name:52} {ratio:7.2f}{goal}")


def batch_reads(spark: Any, root: Path, repeats: int, results: list[Any]) -> list[tuple[str, float]]:
    """d: bounded reads into ``noop``, each timed from planning to the end of the write (best of
    ``repeats``)."""
    from spark_pubsub import read_topic

    files = [str(p) for p in sorted(segment_dir(root).glob("part-*.parquet"))]

    jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())

    def jvm_cpu_s() -> float:
        """User + system CPU seconds of the JVM so far (less sensitive to other load than wall time)."""
        fields = Path(f"/proc/{jvm_pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    cpu: dict[str, float] = {}

    def best(name: str, make_df: Any) -> float:
        times, cpus = [], []
        for _ in range(repeats):
            c0, t0 = jvm_cpu_s(), time.perf_counter()
            make_df().write.format("noop").mode("overwrite").save()
            times.append(time.perf_counter() - t0)
            cpus.append(jvm_cpu_s() - c0)
        cpu[name] = min(cpus)
        print(f"  batch  {name:58} {min(times):7.2f} s  JVM CPU {min(cpus):6.2f} s  "
              f"(runs: {', '.join(f'{t:.2f}' for t in times)})", flush=True)
        results.append(("batch", name, min(times), 0, 1))
        return min(times)

    print("d. batch read into noop (spark.read ... .write.format('noop'))")
    parquet = best("Spark Parquet reader, the topic's segment files", lambda: spark.read.parquet(*files))
    native = best("native scan: spark_pubsub.read_topic", lambda: read_topic(spark, str(root), topic=TOPIC))
    source = best("Data Source path: spark.read.format('pubsub')",
                  lambda: spark.read.format("pubsub").option("topic", TOPIC).load(str(root)))
    names = list(cpu)
    return [("batch: native scan / Parquet (segment files)", native / parquet),
            ("batch: Data Source path / Parquet (segment files)", source / parquet),
            ("reference: JVM CPU, native scan / Parquet", cpu[names[1]] / cpu[names[0]])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5_000_000)
    parser.add_argument("--root", type=Path, default=None, help="work directory (default: a temp dir)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--sections", default="abcd", help="which of a, b, c, d to run (default: all)")
    args = parser.parse_args()
    work = args.root or Path(tempfile.mkdtemp(prefix="bench-spark-"))
    root, plain = work / "root", work / "plain"
    n = args.messages

    print(f"bench_spark: {n:,} messages of 100 B, {(n + CHUNK - 1) // CHUNK} segments, work dir {work}")
    print(f"data: send_table wrote {n:,} messages in {make_data(root, plain, n):.1f} s")
    spark = session()
    segment_schema = spark.read.parquet(str(segment_dir(root))).schema
    plain_schema = spark.read.parquet(str(plain)).schema
    results: list[tuple[str, str, float, int, int]] = []

    def run(group: str, name: str, start_query: Any) -> float:
        elapsed, rows, batches = timed(start_query, args.repeats)
        results.append((group, name, elapsed, rows, batches))
        print(
            f"  {group:6} {name:58} {elapsed:7.2f} s  {rows / elapsed / 1e6:6.2f} M rows/s  ({rows:,} rows, "
            f"{batches} batches)",
            flush=True,
        )
        return elapsed

    def pubsub_read(**options: str) -> Any:
        reader = (
            spark.readStream.format("pubsub").option("topic", TOPIC).option("startingOffsets", "earliest")
        )
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load(str(root))

    def noop(df: Any) -> Any:
        return lambda ck: (
            df.writeStream.format("noop").option("checkpointLocation", ck).trigger(availableNow=True).start()
        )

    ratios: list[tuple[str, float]] = []
    if "d" in args.sections:
        ratios += batch_reads(spark, root, args.repeats, results)
    if "a" not in args.sections:
        summary(ratios)
        spark.stop()
        if not args.keep and args.root is None:
            shutil.rmtree(work, ignore_errors=True)
        return
    print("a. read into noop (streaming, Trigger.AvailableNow)")
    ours = run("read", "pubsub source", noop(pubsub_read()))
    theirs = run(
        "read",
        "Spark Parquet file source, the topic's segment files",
        noop(spark.readStream.schema(segment_schema).parquet(str(segment_dir(root)))),
    )
    plain_read = run(
        "read",
        "Spark Parquet file source, the plain Parquet copy",
        noop(spark.readStream.schema(plain_schema).parquet(str(plain))),
    )
    both_cores = run(
        "read", "pubsub source, minPartitions=2 (one task per core)", noop(pubsub_read(minPartitions="2"))
    )
    split_offsets = run(
        "read",
        "pubsub source, maxRecordsPerPartition=n/2 (two offset slices)",
        noop(pubsub_read(maxRecordsPerPartition=str(max(1, args.messages // 2)))),
    )
    spark.dataSource.register(floor_source())

    def floor_read(tasks: int) -> Any:
        df = spark.readStream.format("pubsub_api_floor").option("rows", str(n)).option("tasks", str(tasks)).load()
        return noop(df)

    floor_one = run("read", "reference: API floor, pre-built batches, 1 task", floor_read(1))
    floor_two = run("read", "reference: API floor, pre-built batches, 2 tasks", floor_read(2))
    ratios += [
        ("read: pubsub / Parquet (segment files)", ours / theirs),
        ("read: pubsub / Parquet (plain copy)", ours / plain_read),
        ("read: pubsub minPartitions=2 / Parquet (segments)", both_cores / theirs),
        ("read: pubsub maxRecordsPerPartition / Parquet (segments)", split_offsets / theirs),
        ("reference: API floor 1 task / Parquet (segments)", floor_one / theirs),
        ("reference: API floor 2 tasks / Parquet (segments)", floor_two / theirs),
        ("reference: pubsub / API floor, 1 task each", ours / floor_one),
    ]

    print("b. write (streaming, Trigger.AvailableNow; input: Spark's file source over the plain copy)")
    source_df = spark.readStream.schema(plain_schema).parquet(str(plain))
    if (REPO / "spark_pubsub" / "sink.py").exists():
        counter = iter(range(1000))

        def to_pubsub(ck: str) -> Any:
            return (
                source_df.writeStream.format("pubsub")
                .option("topic", f"bench-out-{next(counter)}")
                .option("checkpointLocation", ck)
                .trigger(availableNow=True)
                .start(str(root))
            )

        ours_w = run("write", "pubsub sink", to_pubsub)
        out = work / "parquet-out"

        def to_parquet(ck: str) -> Any:
            shutil.rmtree(out, ignore_errors=True)
            return (
                source_df.writeStream.format("parquet")
                .option("path", str(out))
                .option("checkpointLocation", ck)
                .trigger(availableNow=True)
                .start()
            )

        theirs_w = run("write", "Spark Parquet sink", to_parquet)
        ratios.append(("write: pubsub / Parquet", ours_w / theirs_w))
        written = sum(
            Broker.for_url(str(root)).topic_log(TopicName.parse(f"bench-out-{i}")).snapshot().next_offset
            for i in range(args.repeats)
        )
        print(f"  (the pubsub sink committed {written:,} messages over {args.repeats} runs)")
    else:
        print("  skipped: spark_pubsub/sink.py does not exist yet")

    print("c. one internal topic, minPartitions (streaming read into noop)")
    eight = run("split", "pubsub source, minPartitions=8", noop(pubsub_read(minPartitions="8")))
    one = run("split", "pubsub source, minPartitions=1", noop(pubsub_read(minPartitions="1")))
    ratios.append(("minPartitions=8 / minPartitions=1 (time)", eight / one))

    summary(ratios)
    spark.stop()
    if not args.keep and args.root is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
