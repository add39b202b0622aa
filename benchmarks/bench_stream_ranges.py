"""Streaming reads: ``format("pubsub")`` against ``emit=ranges`` + ``read_ranges`` in ``foreachBatch``.

Run from the repository root (it sets ``PYSPARK_PYTHON`` to this interpreter itself)::

    .venv/bin/python benchmarks/bench_stream_ranges.py                           # 2,000,000 messages
    .venv/bin/python benchmarks/bench_stream_ranges.py --messages 5000000 --batches 0,1000000,100000

Data: as ``bench_spark.py`` (N messages of 100 B, one internal topic, segments of 250,000 rows),
written once (``--root DIR`` keeps and reuses it).  Every query is a streaming query from the
earliest offset with ``Trigger.AvailableNow`` and ``maxOffsetsPerTrigger`` = each of ``--batches``
(0: no limit, one batch), timed from ``start()`` to the end of ``awaitTermination()`` (fresh
checkpoint each time), so Spark's per-query and per-batch costs are in every figure:

* messages, noop: ``readStream.format("pubsub")`` into the ``noop`` sink: the stream as it is;
* messages, foreachBatch: the same stream, each batch written to ``noop`` from ``foreachBatch``
  (what a ``foreachBatch`` job pays on the Data Source path);
* ranges + read_ranges: ``.option("emit", "ranges")``, each batch read by
  ``spark_pubsub.read_ranges`` (driver planning, the JVM Parquet reader) and written to ``noop``
  from ``foreachBatch``.

Queries run round-robin: one warm-up round, then ``--repeats`` rounds; each figure is the best round.
The summary prints, per batch size, ranges / messages for both message queries.  This is a
benchmark, not a test: nothing is asserted.  The load average is printed before and after.
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

from bench_spark import TOPIC, make_data, segment_dir, session  # noqa: E402


def _stream(spark: Any, root: Path, max_per_trigger: int, **options: str) -> Any:
    reader = (spark.readStream.format("pubsub").option("topic", TOPIC).option("startingOffsets", "earliest")
              .options(**options))
    if max_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_per_trigger))
    return reader.load(str(root))


def queries(spark: Any, root: Path, max_per_trigger: int) -> dict[str, Any]:
    """name -> a function starting the query with a checkpoint folder."""
    from spark_pubsub import read_ranges

    def messages_noop(ck: str) -> Any:
        return (_stream(spark, root, max_per_trigger).writeStream.format("noop").option("checkpointLocation", ck)
                .trigger(availableNow=True).start())

    def messages_batch(ck: str) -> Any:
        def each(df: Any, _: int) -> None:
            df.write.format("noop").mode("overwrite").save()

        return (_stream(spark, root, max_per_trigger).writeStream.foreachBatch(each)
                .option("checkpointLocation", ck).trigger(availableNow=True).start())

    def ranges_batch(ck: str) -> Any:
        def each(ranges: Any, _: int) -> None:
            read_ranges(ranges.sparkSession, str(root), ranges).write.format("noop").mode("overwrite").save()

        return (_stream(spark, root, max_per_trigger, emit="ranges").writeStream.foreachBatch(each)
                .option("checkpointLocation", ck).trigger(availableNow=True).start())

    return {"messages, noop sink": messages_noop, "messages, foreachBatch -> noop": messages_batch,
            "ranges + read_ranges, foreachBatch -> noop": ranges_batch}


def run_once(start_query: Any) -> tuple[float, int]:
    """Wall seconds of one AvailableNow run (fresh checkpoint) and its number of non-empty batches."""
    checkpoint = tempfile.mkdtemp(prefix="bench-ranges-ck-")
    try:
        t0 = time.perf_counter()
        query = start_query(checkpoint)
        query.awaitTermination()
        elapsed = time.perf_counter() - t0
        batches = sum(1 for p in query.recentProgress if p["numInputRows"])
        return elapsed, batches
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--batches", default="0,500000,100000,20000",
                        help="maxOffsetsPerTrigger sizes, comma-separated (0: one batch)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--root", type=Path, default=None,
                        help="work directory (default: a temp dir); data already there is reused")
    args = parser.parse_args()
    work = args.root or Path(tempfile.mkdtemp(prefix="bench-ranges-"))
    root, plain = work / "root", work / "plain"
    print(f"load average before: {os.getloadavg()}", flush=True)
    if not segment_dir(root).exists():
        print(f"writing {args.messages:,} messages of 100 B ... {make_data(root, plain, args.messages):.1f} s",
              flush=True)
    sizes = [int(s) for s in args.batches.split(",")]
    spark = session()
    try:
        results: dict[tuple[int, str], list[float]] = {}
        batches: dict[tuple[int, str], int] = {}
        for round_ in range(args.repeats + 1):  # round 0 warms the JVM and the Python workers
            for size in sizes:
                for name, start_query in queries(spark, root, size).items():
                    elapsed, count = run_once(start_query)
                    if round_:
                        results.setdefault((size, name), []).append(elapsed)
                        batches[(size, name)] = count
            print(f"round {round_} done, load average {os.getloadavg()}", flush=True)
        print(f"\n{args.messages:,} messages, Trigger.AvailableNow, local[2] (best of {args.repeats}; runs in s)")
        for size in sizes:
            label = f"maxOffsetsPerTrigger={size:,}" if size else "no limit"
            print(f"  {label}")
            for name in queries(spark, root, size):
                runs = results[(size, name)]
                print(f"    {name:44} {min(runs):7.2f} s  {batches[(size, name)]:4d} batches  "
                      f"(runs: {', '.join(f'{t:.2f}' for t in runs)})")
        print("\nsummary (time ratios, ranges + read_ranges / messages; below 1: ranges faster)")
        for size in sizes:
            best = {name: min(results[(size, name)]) for name in queries(spark, root, size)}
            noop, each, ranges = best.values()
            label = f"maxOffsetsPerTrigger={size:,}" if size else "no limit"
            print(f"  {label:32} vs noop sink {ranges / noop:5.2f}   vs foreachBatch {ranges / each:5.2f}")
    finally:
        spark.stop()
        print(f"load average after: {os.getloadavg()}", flush=True)
        if args.root is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
