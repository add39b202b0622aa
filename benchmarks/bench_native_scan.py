"""Batch reads: the native scan ``spark_pubsub.read_topic`` and ``format("pubsub")`` against Spark's own
Parquet reader over the very same segment files, in one SparkSession and one run.

Run from the repository root (it sets ``PYSPARK_PYTHON`` to this interpreter itself)::

    .venv/bin/python benchmarks/bench_native_scan.py                      # 5,000,000 messages
    .venv/bin/python benchmarks/bench_native_scan.py --messages 1000000   # a quick run

Data: as ``bench_spark.py`` (N messages of 100 B, one internal topic, segments of 250,000 rows).
Every query is ``spark.read ... .write.format("noop")``, timed from building the DataFrame (the
native scan's planning included) to the end of the write.  Queries run round-robin, ``--repeats``
rounds after one warm-up round, and each figure is the best round (wall time) and the least JVM CPU
(user + system seconds of the Spark JVM: less sensitive to other load on the machine than wall time).

Rows (goal: native scan / Parquet <= 1.3):

* Spark Parquet reader: ``spark.read.parquet(*files)``, every column of the files: the baseline;
* strict baseline: Spark's Parquet reader of only the 9 columns the source reads from the files, with
  the schema given as the native scan gives it (no footer-inference job).  The files hold 6 more
  columns the source never returns (``sticky_key_hash``, ``schema_version``, the chunk columns):
  decoding them costs the every-column baseline ~20% more JVM CPU, so the ratio against it flatters
  the native scan; both ratios are printed, each with the goal (D106);
* reference, the ``_metadata`` cost: the strict baseline plus ``_metadata.file_name`` and
  ``_metadata.row_index`` (Spark builds the ``_metadata`` struct per row, the vectorized reader stays
  on): what naming each row's file and position costs, before any lookup;
* native scan: ``read_topic(spark, root, topic=...)``, the source's schema and values (the JVM scan,
  ``spark_pubsub.jvm_scan``, D113);
* reference, the DataFrame route: ``read_topic`` with ``spark.pubsub.jvmScan.enabled=false`` (the
  route before D113, and the fallback where the JVM scan cannot be built or loaded); the reference
  rows below are variants of this route;
* Data Source path: ``spark.read.format("pubsub")``;
* reference, the native scan's floor: Spark's Parquet reader over the same files producing the same
  columns (the 9 the source reads, constants, ``_metadata.row_index`` as the offset and the message
  id string built from it as the native scan builds it) but with no per-file lookup: what the
  source's schema costs in Spark;
* reference, file map: the native scan with its file search turned off (``FILE_SEARCH_LIMIT = 0``),
  as a topic with more than ``FILE_SEARCH_LIMIT`` files reads: the base offsets come from a literal
  map keyed by the file name's hash (Spark's hashed ``element_at``);
* reference, string-concat ids: the native scan with its message ids built by ``concat`` of
  strings, as before D97 (now ``concat`` of bytes read as a string: the same text, less CPU);
* reference, no bomb check: the native scan and the DataFrame route with their footer checks against
  ``maxMessageSize`` off (as before D175/D176): what refusing a decompression bomb costs;
* reference, join paths: the native scan with its searches and the map turned off (a broadcast join
  on the file name and one on the offset bucket), as before the map (and as on a Spark without
  hashed map lookups, or a topic with more than ``RUN_SEARCH_LIMIT`` layout runs per scan).

``--segment-rows 50000`` writes 100 segments of the 5,000,000 messages, so that the default read
itself takes the file map (more than ``FILE_SEARCH_LIMIT`` files).

This is a benchmark, not a test: nothing is asserted.  Rerun on a busy machine before trusting one
figure; the load average is printed before and after.
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

import bench_spark  # noqa: E402
from bench_spark import TOPIC, make_data, segment_dir, session  # noqa: E402

GOAL = 1.3


def _floor(spark: Any, files: list[str]) -> Any:
    """The source's columns from Spark's reader with ``row_index`` as the offset: no per-file lookup."""
    from pyspark.sql import functions as F

    from spark_pubsub.native_scan import _SEGMENT_COLUMNS, message_id_column, segment_read_schema

    rows = spark.read.schema(segment_read_schema(_SEGMENT_COLUMNS)).parquet(*files)
    offset = F.col("_metadata.row_index")
    epoch = F.lit(0).cast("timestamp")
    return rows.select(
        "key", "value", F.lit(TOPIC).alias("topic"), F.lit(-1).alias("partition"), offset.alias("offset"),
        message_id_column(F, 1, -1, offset, None).alias("messageId"),
        F.coalesce("publish_time", epoch).alias("publishTime"), F.col("event_time").alias("eventTime"),
        "properties", F.col("producer_name").alias("producerName"), F.col("sequence_id").alias("sequenceId"),
        F.col("ordering_key").alias("orderingKey"), F.lit(0).alias("redeliveryCount"),
        F.col("deliver_at").alias("deliverAt"), F.lit(TOPIC).alias("internalTopic"),
        F.coalesce("publish_time", epoch).alias("timestamp"), F.lit(0).alias("timestampType"))


def _source_reads(spark: Any, files: list[str], metadata: bool = False) -> Any:
    """Spark's reader of the 9 segment columns the source returns (schema given, as the native scan
    reads them); ``metadata``: also each row's file name and row index, as the native scan names them."""
    from pyspark.sql import functions as F

    from spark_pubsub.native_scan import _SEGMENT_COLUMNS, segment_read_schema

    rows = spark.read.schema(segment_read_schema(_SEGMENT_COLUMNS)).parquet(*files)
    if not metadata:
        return rows
    return rows.select(*_SEGMENT_COLUMNS, F.col("_metadata.file_name"), F.col("_metadata.row_index"))


def _dataframe_route(spark: Any, root: Path) -> Any:
    """``read_topic`` by its DataFrame route (the route is chosen when the DataFrame is built)."""
    from spark_pubsub import read_topic
    from spark_pubsub.jvm_scan import ENABLED_CONF

    spark.conf.set(ENABLED_CONF, "false")
    try:
        return read_topic(spark, str(root), topic=TOPIC)
    finally:
        spark.conf.unset(ENABLED_CONF)


def _searches_off(spark: Any, root: Path, *, maps: bool) -> Any:
    """The native scan with no searches: the file map (``maps``) or the join on the file name, and
    the join on the offset bucket when ``maps`` is off."""
    from spark_pubsub import native_ids

    saved = native_ids.FILE_SEARCH_LIMIT, native_ids.RUN_SEARCH_LIMIT, native_ids.hashed_map_entries
    native_ids.FILE_SEARCH_LIMIT = 0
    if not maps:
        native_ids.RUN_SEARCH_LIMIT = 0
        native_ids.hashed_map_entries = lambda spark: None
    try:
        return _dataframe_route(spark, root)
    finally:
        native_ids.FILE_SEARCH_LIMIT, native_ids.RUN_SEARCH_LIMIT, native_ids.hashed_map_entries = saved


def _string_concat_ids(spark: Any, root: Path) -> Any:
    """The native scan with its message ids concatenated as strings (``concat`` of ``string`` parts,
    as before D97), not as bytes."""
    from spark_pubsub import native_scan

    def as_strings(F: Any, ledger_id: int, partition: int, entry: Any, batch: Any) -> Any:
        tail = [F.lit(f":{partition}:-1")] if batch is None else [F.lit(f":{partition}:"), batch.cast("string")]
        return F.coalesce(F.concat(F.lit(f"{ledger_id}:"), entry.cast("string"), *tail), F.lit(""))

    saved = native_scan.message_id_column
    native_scan.message_id_column = as_strings
    try:
        return _dataframe_route(spark, root)
    finally:
        native_scan.message_id_column = saved


def _unchecked(spark: Any, root: Path, *, jvm: bool) -> Any:
    """``read_topic`` without the bomb check (as before D175/D176): planned files carry no
    ``maxMessageSize``, so neither the JVM scan's tasks nor the DataFrame route's driver read footers."""
    import dataclasses

    from spark_pubsub import native_scan

    saved = native_scan.plan_read
    native_scan.plan_read = lambda options: [dataclasses.replace(p, max_message_bytes=None) for p in saved(options)]
    try:
        return read_topic_route(spark, root, jvm=jvm)
    finally:
        native_scan.plan_read = saved


def read_topic_route(spark: Any, root: Path, *, jvm: bool) -> Any:
    from spark_pubsub import read_topic

    return read_topic(spark, str(root), topic=TOPIC) if jvm else _dataframe_route(spark, root)


def batch_reads(spark: Any, root: Path, repeats: int) -> list[tuple[str, float]]:
    """Time every query (see the module docstring); print the figures; return the summary ratios."""
    from spark_pubsub import read_topic

    files = [str(p) for p in sorted(segment_dir(root).glob("part-*.parquet"))]
    jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())

    def jvm_cpu_s() -> float:
        fields = Path(f"/proc/{jvm_pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    queries = {
        "Spark Parquet reader, the topic's segment files": lambda: spark.read.parquet(*files),
        "strict baseline: Parquet reader, the 9 columns the source reads": lambda: _source_reads(spark, files),
        "reference: the 9 columns + _metadata file_name, row_index": lambda: _source_reads(spark, files, True),
        "native scan: spark_pubsub.read_topic": lambda: read_topic(spark, str(root), topic=TOPIC),
        "reference: native scan, DataFrame route (JVM scan off)": lambda: _dataframe_route(spark, root),
        "Data Source path: spark.read.format('pubsub')":
            lambda: spark.read.format("pubsub").option("topic", TOPIC).load(str(root)),
        "reference: Parquet reader + the source's columns, no lookup": lambda: _floor(spark, files),
        "reference: native scan, file map (search off)": lambda: _searches_off(spark, root, maps=True),
        "reference: native scan, join paths (searches and map off)": lambda: _searches_off(spark, root, maps=False),
        "reference: native scan, message ids as string concat": lambda: _string_concat_ids(spark, root),
        "reference: native scan, no bomb check (before D175)": lambda: _unchecked(spark, root, jvm=True),
        "reference: DataFrame route, no bomb check (before D176)": lambda: _unchecked(spark, root, jvm=False),
    }
    walls: dict[str, list[float]] = {name: [] for name in queries}
    cpus: dict[str, list[float]] = {name: [] for name in queries}
    for round_ in range(repeats + 1):  # round 0 warms the JVM and the Python workers
        for name, make_df in queries.items():
            c0, t0 = jvm_cpu_s(), time.perf_counter()
            make_df().write.format("noop").mode("overwrite").save()
            if round_:
                walls[name].append(time.perf_counter() - t0)
                cpus[name].append(jvm_cpu_s() - c0)
    wall = {name: min(v) for name, v in walls.items()}
    cpu = {name: min(v) for name, v in cpus.items()}
    print("batch read into noop (best of each; runs in seconds)")
    for name in queries:
        print(f"  {name:64} {wall[name]:6.2f} s  JVM CPU {cpu[name]:6.2f} s  "
              f"(runs: {', '.join(f'{t:.2f}' for t in walls[name])})", flush=True)
    parquet, strict, metadata, native, frames, source, floor, file_map, joins, string_ids, unchecked, \
        frames_unchecked = queries
    return [("native scan / Parquet (wall)", wall[native] / wall[parquet]),
            ("native scan / Parquet (JVM CPU)", cpu[native] / cpu[parquet]),
            ("native scan / strict baseline (wall)", wall[native] / wall[strict]),
            ("native scan / strict baseline (JVM CPU)", cpu[native] / cpu[strict]),
            ("reference: DataFrame route / Parquet (wall)", wall[frames] / wall[parquet]),
            ("reference: DataFrame route / Parquet (JVM CPU)", cpu[frames] / cpu[parquet]),
            ("reference: _metadata columns / strict baseline (JVM CPU)", cpu[metadata] / cpu[strict]),
            ("reference: floor / strict baseline (JVM CPU)", cpu[floor] / cpu[strict]),
            ("Data Source path / Parquet (wall)", wall[source] / wall[parquet]),
            ("Data Source path / Parquet (JVM CPU)", cpu[source] / cpu[parquet]),
            ("reference: floor / Parquet (wall)", wall[floor] / wall[parquet]),
            ("reference: floor / Parquet (JVM CPU)", cpu[floor] / cpu[parquet]),
            ("reference: DataFrame route / floor (wall)", wall[frames] / wall[floor]),
            ("reference: file map / Parquet (wall)", wall[file_map] / wall[parquet]),
            ("reference: file map / Parquet (JVM CPU)", cpu[file_map] / cpu[parquet]),
            ("reference: join paths / Parquet (wall)", wall[joins] / wall[parquet]),
            ("reference: join paths / Parquet (JVM CPU)", cpu[joins] / cpu[parquet]),
            ("reference: DataFrame route / string-concat ids (wall)", wall[frames] / wall[string_ids]),
            ("reference: DataFrame route / string-concat ids (JVM CPU)", cpu[frames] / cpu[string_ids]),
            ("reference: native scan / no bomb check (wall)", wall[native] / wall[unchecked]),
            ("reference: native scan / no bomb check (JVM CPU)", cpu[native] / cpu[unchecked]),
            ("reference: DataFrame route / no bomb check (wall)", wall[frames] / wall[frames_unchecked])]


def print_summary(ratios: list[tuple[str, float]]) -> None:
    print(f"\nsummary (time ratios; goal for the native scan: <= {GOAL})")
    for name, ratio in ratios:
        goal = "" if name.startswith(("reference", "Data Source")) else ("  MET" if ratio <= GOAL else "  MISSED")
        print(f"  {name:58} {ratio:7.2f}{goal}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--segment-rows", type=int, default=bench_spark.CHUNK,
                        help="messages per segment file (default: %(default)s)")
    parser.add_argument("--root", type=Path, default=None,
                        help="work directory (default: a temp dir); data already there is reused")
    args = parser.parse_args()
    work = args.root or Path(tempfile.mkdtemp(prefix="bench-native-"))
    root, plain = work / "root", work / "plain"
    n = args.messages
    bench_spark.CHUNK = chunk = args.segment_rows  # make_data writes one segment per chunk
    print(f"bench_native_scan: {n:,} messages of 100 B, {(n + chunk - 1) // chunk} segments, work dir {work}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if segment_dir(root).exists():
        print("data: reusing the topic already in the work directory")
    else:
        print(f"data: send_table wrote {n:,} messages in {make_data(root, plain, n):.1f} s")
    spark = session()
    try:
        print_summary(batch_reads(spark, root, args.repeats))
    finally:
        spark.stop()
        if args.root is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
