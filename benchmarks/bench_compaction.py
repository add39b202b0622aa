"""Topic compaction of a large topic: the local (pyarrow) run against the Spark job, with baselines.

Run from the repository root::

    .venv/bin/python benchmarks/bench_compaction.py [--messages 5000000] [--keys 100000] [--no-spark]

The topic holds ``--messages`` messages (64-byte values, ``--keys`` distinct keys drawn uniformly,
1% tombstones, 1% without a key) in segments of ``--segment-rows``.  Figures, each timed in this run:

a. baseline: ``pyarrow.parquet.read_table`` of every segment (the scan any compaction must pay), and
   the same scan plus ``group_by(key).max(offset)`` (the least a latest-per-key reduction costs);
b. ``compact_topic`` (local, pyarrow): the full first run, writing and committing the view;
c. an incremental run after appending ``--increment`` more messages (folds only the new ones);
d. the Spark job (``compact_with_spark`` on ``local[N]``) on the same topic, session start reported
   apart; its view is checked to equal the local one.  It runs ``--repeats`` times, each run
   paired with the local job on the same topic (interleaved, so both see the same machine load, the
   order inside a pair alternating), after one uncounted warm-up pair (the first full-size Spark run
   pays the JVM's compilation of its hot code); each pair's ratio and their median are printed.  The
   first counted run's wall time is accounted for
   in full: the job's phases (planning; winners: the narrow scan, the reduction and the winners
   to the driver; payload plan; views: the kept rows read from the files holding a winner, by the
   driver when they are few (D107) or by a Spark scan and semi-join, and the view file written;
   commit), each Spark stage inside them (tasks, wall and executor CPU seconds, from Spark's status
   store), and the driver's own time between stages.  With ``--probes``: the
   stages alone into Spark's ``noop`` sink, and the one-scan shape (``carry_payload=True``);
e. readers of the result: a ``readCompacted`` ``read_batch`` of the whole view, and a ``TableView``
   loading it;
f. with ``--memory``: each job once more in a fresh process of its own (the Spark one with its own
   session), timed and with the peak resident memory of its whole process tree (the JVM included),
   sampled from ``/proc`` every 0.2 s.  ``--jobs-only`` writes the topic and runs only f (the
   50,000,000-message run: ``--messages 50000000 --jobs-only``; kept out of the test suite).

This is a benchmark, not a test: nothing is asserted beyond the two views being equal.  Page caches
are not dropped, so the scans read files the OS may hold in memory, for the baseline and for us alike.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:  # run as a script from a checkout without installing the project
    sys.path.insert(0, str(_REPO))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from broker_core.broker.broker import Broker  # noqa: E402
from broker_core.client.client import Client  # noqa: E402
from broker_core.jobs.compaction import compact_topic  # noqa: E402
from broker_core.message_id import MessageId  # noqa: E402
from broker_core.naming import TopicName  # noqa: E402
from broker_core.producer.bulk import to_segment_rows  # noqa: E402
from broker_core.topic import compacted_view  # noqa: E402
from broker_core.topic.compacted_view import COMPACTED_DIR, decode_view, view_store  # noqa: E402

TOPIC = "bench-compaction"


def progress(text: str) -> None:
    print(f"  .. {text}", file=sys.stderr, flush=True)


def make_rows(n: int, keys: int, seed: int) -> pa.Table:
    """``SEGMENT_SCHEMA`` rows: uniform keys, 64-byte values, 1% tombstones, 1% keyless."""
    rng = np.random.default_rng(seed)
    key_ids = rng.integers(0, keys, n)
    key_text = pc.binary_join_element_wise("key-", pa.array(key_ids).cast(pa.string()), "")
    keyless = rng.random(n) < 0.01
    key = pc.if_else(pa.array(keyless), pa.nulls(n, pa.string()), key_text)
    payload = pa.FixedSizeBinaryArray.from_buffers(pa.binary(64), n, [None, pa.py_buffer(rng.bytes(64 * n))])
    value = pc.if_else(pa.array(rng.random(n) < 0.01), pa.nulls(n, pa.binary()), payload.cast(pa.binary()))
    rows, _ = to_segment_rows(pa.table({"value": value, "key": key}), publish_time_ms=int(time.time() * 1000),
                              max_message_size=0, default_producer="bench")
    return rows


def fill(root: str, messages: int, keys: int, segment_rows: int, seed: int) -> None:
    log = Broker.for_url(root).topic_log(TopicName.parse(TOPIC))
    done = 0
    while done < messages:
        n = min(segment_rows, messages - done)
        log.append(make_rows(n, keys, seed + done), layout=[n])
        done += n


def timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def topic_path(root: str) -> Path:
    return Path(root) / "public" / "default" / "persistent" / TOPIC


def baseline(root: str) -> tuple[float, float, int]:
    """(scan s, scan + group_by s, distinct keys) over the segment files, plain pyarrow."""
    files = sorted(topic_path(root).glob("part-*.parquet"))
    scan_s, tables = timed(lambda: [pq.read_table(f) for f in files])
    del tables

    def reduce() -> int:
        pieces = []
        base = 0
        for f in files:
            t = pq.read_table(f, columns=["key"])
            offsets = pa.array(np.arange(base, base + t.num_rows))
            pieces.append(pa.table({"key": t.column("key"), "offset": offsets}))
            base += t.num_rows
        grouped = pa.concat_tables(pieces).group_by("key").aggregate([("offset", "max")])
        return grouped.num_rows

    reduce_s, groups = timed(reduce)
    return scan_s, reduce_s, groups


def forget_views(root: str) -> None:
    """Delete the topic's views so that the next job is a first run.  Deleting them behind the library's
    back also needs the process's cached view pointers dropped: a pointer handle checks for cleaned-up
    versions at most once a second, and a job started within that second would plan from the deleted
    view's pointer (a benchmark shortcut, not an operation the library supports)."""
    shutil.rmtree(topic_path(root) / COMPACTED_DIR, ignore_errors=True)
    with compacted_view._REGISTRY_LOCK:
        compacted_view._STORES.clear()


def current_view(root: str) -> pa.Table:
    log = Broker.for_url(root).topic_log(TopicName.parse(TOPIC))
    pointer = view_store(log.io, log.path).latest()
    assert pointer is not None
    return decode_view(log.io.open_input(f"{log.path}/{pointer.file}"))


def stage_probes(spark: Any, root: str) -> list[tuple[str, float, str]]:
    """Where the Spark job's time goes: each stage of its plan alone, into Spark's ``noop`` sink
    (each includes the ones before it; the differences are the stages' own costs)."""
    from broker_core.jobs.compaction import plan_compaction
    from spark_pubsub.compaction_frames import end_rows, kept_rows, topic_reads, winners_frame, winners_on_driver

    log = Broker.for_url(root).topic_log(TopicName.parse(TOPIC))
    forget_views(root)
    plan = plan_compaction(log, str(TopicName.parse(TOPIC)))
    assert plan is not None
    plans, base = [(log, plan)], Path(root).resolve().as_uri()
    reads = topic_reads(plans)
    stages = (("scan (key, offset, chunk columns)", lambda: end_rows(spark, base, plans, reads)),
              ("scan + aggregate (max offset per key)", lambda: winners_frame(spark, base, plans, reads)),
              ("winners to the driver, then their files read: the kept rows (Spark's payload pass)",
               lambda: kept_rows(spark, base, plans, reads, winners_on_driver(spark, base, plans, reads))))
    from spark_pubsub.compaction_job import shuffle_partitions_for

    # the job's own shuffle partitions (it sets them for its duration only)
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions_for(spark, reads[0].rows)))
    out, before = [], 0.0
    for name, frame in stages:
        seconds, _ = timed(lambda: frame().write.format("noop").mode("overwrite").save())
        out.append((f"d.   probe: {name}", seconds, f"+{seconds - before:.2f} s over the previous probe"))
        before = seconds
    return out


def spark_stages(spark: Any) -> dict[int, tuple[str, int, float, float, float]]:
    """Spark's finished stages so far, ``id -> (call site, tasks, submitted s, completed s, executor
    CPU s)``, from the driver's status store (a classic session's JVM; the benchmark's own session)."""
    gateway = spark.sparkContext._gateway
    java_list = gateway.jvm.java.util.ArrayList
    store = spark.sparkContext._jsc.sc().statusStore()
    stages = store.stageList(java_list(), False, False, gateway.new_array(gateway.jvm.double, 0), java_list())
    out, it = {}, stages.iterator()
    while it.hasNext():
        stage = it.next()
        submitted, completed = stage.submissionTime(), stage.completionTime()
        if not (submitted.isDefined() and completed.isDefined()):
            continue  # skipped (its shuffle output reused) or unfinished
        out[stage.stageId()] = (stage.name().split(" at ")[0], stage.numTasks(), submitted.get().getTime() / 1e3,
                                completed.get().getTime() / 1e3, stage.executorCpuTime() / 1e9)
    return out


def covered_s(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by the union of ``(start, end)`` spans."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        total += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    return total


def spark_breakdown(phases: dict[str, float], stages: dict[int, tuple[str, int, float, float, float]],
                    total_s: float) -> list[tuple[str, float, str]]:
    """The job's wall time accounted for: its phases, the Spark stages that ran, and the driver's time."""
    out = [(f"d.   phase: {name}", seconds, "summed over tasks, inside 'views'" if name == "write" else "")
           for name, seconds in phases.items() if name not in ("written",)]
    for stage_id, (site, tasks, start, end, cpu) in sorted(stages.items()):
        out.append((f"d.     stage {stage_id} ({site}, {tasks} tasks)", end - start,
                    f"executor CPU {cpu:.2f} s"))
    in_stages = covered_s([(start, end) for _, _, start, end, _ in stages.values()])
    out.append(("d.   in Spark stages (their wall-clock union)", in_stages, ""))
    out.append(("d.   on the driver between stages (planning, submission, transfers, commit)",
                total_s - in_stages, ""))
    return out


def run_one(root: str, job: str, master: str) -> None:
    """f's child: compact ``root``'s topic from scratch with one job and print its seconds."""
    forget_views(root)
    if job == "local":
        seconds, _ = timed(lambda: compact_topic(Broker.for_url(root), TOPIC))
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        from spark_pubsub.jobs import compact_with_spark

        spark = (SparkSession.builder.master(master).config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "4g")
                 .getOrCreate())
        seconds, _ = timed(lambda: compact_with_spark(spark, root, TOPIC))
        spark.stop()
    print(f"seconds {seconds}", flush=True)
    os._exit(0)


def _process_tree(pid: int) -> Iterator[int]:
    """``pid`` and all its live descendants, from ``/proc`` (one that exits meanwhile is skipped)."""
    stack = [pid]
    while stack:
        current = stack.pop()
        yield current
        with contextlib.suppress(OSError, ValueError):
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as fh:
                    stack += [int(c) for c in fh.read().split()]


def _tree_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants, from ``/proc``."""
    total = 0
    for current in _process_tree(pid):
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{current}/status") as fh:
            total += next((int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:")), 0)
    return total


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by ``pid`` and all its live descendants, from ``/proc``:
    for this process, the driver plus its JVM and the JVM's Python workers.  A machine shared with
    other work stretches wall times by the load, CPU seconds much less."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for current in _process_tree(pid):
        with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{current}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def run_measured(root: str, job: str, master: str) -> tuple[float, int]:
    """Run one job in a child process; (its own timing of the job, peak RSS of its process tree)."""
    import subprocess

    proc = subprocess.Popen([sys.executable, __file__, "--job", job, "--on", root, "--master", master],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss_bytes(proc.pid))
        time.sleep(0.2)
    out = proc.stdout.read() if proc.stdout else ""
    seconds = next((float(line.split()[1]) for line in out.splitlines() if line.startswith("seconds ")), 0.0)
    return seconds, peak


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--segment-rows", type=int, default=250_000, help="messages per segment (one append)")
    parser.add_argument("--increment", type=int, default=0, help="messages appended before the incremental "
                        "run (default: 10%% of --messages)")
    parser.add_argument("--master", default="local[2]", help="Spark master for the job")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark job")
    parser.add_argument("--repeats", type=int, default=3, help="Spark and local job pairs (d), after one "
                        "uncounted warm-up pair")
    parser.add_argument("--probes", action="store_true", help="d: also the stage probes and the one-scan shape")
    parser.add_argument("--root", help="parent directory for the storage root (default: a temporary one)")
    parser.add_argument("--memory", action="store_true", help="f: each job in its own process, peak memory")
    parser.add_argument("--jobs-only", action="store_true", help="only f: write the topic, then each job once "
                        "in a process of its own, timed with its peak memory (for the 50M-message run)")
    parser.add_argument("--job", choices=["local", "spark"], help=argparse.SUPPRESS)  # f's child process
    parser.add_argument("--on", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.job:
        run_one(args.on, args.job, args.master)
        return
    increment = args.increment or max(1, args.messages // 10)

    parent = args.root or tempfile.gettempdir()
    os.makedirs(parent, exist_ok=True)
    root = tempfile.mkdtemp(prefix="bench-compaction-", dir=parent)
    (Path(root) / "_pubsub").mkdir()
    # fsync off, as the pyarrow baselines do not fsync either
    (Path(root) / "_pubsub" / "broker.toml").write_text("fsyncEnabled = false\n")
    print(f"storage root: {root}  (cpus: {os.cpu_count()}, pyarrow {pa.__version__})")
    print(f"topic: {args.messages:,} messages, {args.keys:,} keys, segments of {args.segment_rows:,}")
    figures: list[tuple[str, float, str]] = []
    cleanup = [root]
    try:
        progress("writing the topic")
        write_s, _ = timed(lambda: fill(root, args.messages, args.keys, args.segment_rows, seed=1))
        figures.append(("write the topic (TopicLog.append, fsync off)", write_s, ""))

        if not args.jobs_only:
            progress("baselines")
            scan_s, reduce_s, groups = baseline(root)
            figures.append(("a. baseline: pq.read_table of every segment", scan_s,
                            f"{args.messages / scan_s:,.0f} msg/s"))
            figures.append(("a. baseline: read keys + group_by(key).max(offset)", reduce_s,
                            f"{groups:,} groups"))

            progress("local compaction")
            broker = Broker.for_url(root)
            local_s, summary = timed(lambda: compact_topic(broker, TOPIC))
            figures.append(("b. compact_topic, first run (local, pyarrow)", local_s,
                            f"{args.messages / local_s:,.0f} msg/s -> {summary.rows:,} rows in the view"))

            progress(f"incremental compaction after {increment:,} more messages")
            fill(root, increment, args.keys, args.segment_rows, seed=2)
            inc_s, inc = timed(lambda: compact_topic(broker, TOPIC))
            figures.append(("c. compact_topic, incremental run", inc_s,
                            f"{inc.messages_read:,} new messages, {inc.rows:,} rows in the view"))

            progress("readers of the view")
            client = Client(root)
            reader = client.create_reader(TOPIC, MessageId.earliest, is_read_compacted=True)
            read_s, batch = timed(lambda: reader.read_batch(10_000_000))
            figures.append(("e. readCompacted read_batch of the view", read_s, f"{batch.num_rows:,} rows"))
            view_s, table_view = timed(lambda: client.create_table_view(TOPIC))
            figures.append(("e. create_table_view (loads the view)", view_s, f"{len(table_view):,} keys"))
            client.close()

        if not args.no_spark and not args.jobs_only:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
            from pyspark.sql import SparkSession

            from spark_pubsub.jobs import compact_with_spark

            progress("Spark session")
            builder = (SparkSession.builder.master(args.master).appName("bench-compaction")
                       .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                       .config("spark.driver.memory", "4g"))
            start_s, spark = timed(builder.getOrCreate)
            spark.sparkContext.setLogLevel("ERROR")
            figures.append((f"d. SparkSession start ({args.master})", start_s, "not counted below"))
            progress("Spark warm-up on a tiny topic (Python workers, code generation)")
            warm = tempfile.mkdtemp(prefix="bench-compaction-warm-", dir=parent)
            cleanup.append(warm)
            fill(warm, 1000, 100, 1000, seed=3)
            warm_s, _ = timed(lambda: compact_with_spark(spark, warm, TOPIC))
            figures.append(("d. Spark job on a 1,000-message topic (first job of the session)", warm_s,
                            "not counted below"))
            # first runs over the whole topic (the increment included), as b did over the first part.
            # One pair first, not counted: the first full-size Spark run pays HotSpot's compilation of
            # Spark's operators and of the job's generated code (the 1,000-message job runs too few rows
            # to compile them), measured at ~1.5x the executor CPU of later runs, which made the first
            # pair the outlier of every run (5.22x against 3.70x and 2.64x).  Then the measured pairs,
            # the order inside a pair alternating (Spark first, then local first) so neither job
            # always runs on the machine the other just left; the median of their ratios is the figure.
            total = args.messages + increment

            cpu: dict[str, list[float]] = {"spark": [], "local": []}

            def spark_run(phases: dict[str, float]) -> tuple[float, Any, dict[int, Any], pa.Table]:
                forget_views(root)
                before, cpu_before = spark_stages(spark), tree_cpu_s(os.getpid())
                seconds, summary = timed(lambda: compact_with_spark(spark, root, TOPIC, timings=phases))
                cpu["spark"].append(tree_cpu_s(os.getpid()) - cpu_before)
                stages = {k: v for k, v in spark_stages(spark).items() if k not in before}
                return seconds, summary, stages, current_view(root)

            def local_run() -> tuple[float, pa.Table]:
                forget_views(root)
                cpu_before = tree_cpu_s(os.getpid())  # the JVM idles meanwhile (a few ms of CPU)
                seconds, _ = timed(lambda: compact_topic(broker, TOPIC))
                cpu["local"].append(tree_cpu_s(os.getpid()) - cpu_before)
                return seconds, current_view(root)

            progress("warm-up pair over the whole topic (not counted)")
            cold_s, _, _, _ = spark_run({})
            cold_local_s, _ = local_run()
            figures.append(("d. ratio of the warm-up pair (first full-size runs, not counted)",
                            cold_s / cold_local_s, f"{cold_s:.2f} s / {cold_local_s:.2f} s = "
                            f"{cold_s / cold_local_s:.2f}x; load average {os.getloadavg()[0]:.1f}"))
            ratios, spark_view, local2, first = [], None, None, True
            for run in range(args.repeats):
                phases: dict[str, float] = {}
                progress(f"Spark and local compaction, pair {run + 1}/{args.repeats}")
                if run % 2 == 0:
                    spark_s, spark_summary, stages, spark_view = spark_run(phases)
                    local2_s, local2 = local_run()
                else:
                    local2_s, local2 = local_run()
                    spark_s, spark_summary, stages, spark_view = spark_run(phases)
                ratios.append(spark_s / local2_s)
                load = f"load average {os.getloadavg()[0]:.1f}"
                if first:
                    figures.append(("d. Spark job, first counted run over the whole topic", spark_s,
                                    f"{total / spark_s:,.0f} msg/s -> {spark_summary.rows:,} rows in the view"))
                    figures.append(("d. compact_topic first run, same topic as the Spark job", local2_s,
                                    f"{total / local2_s:,.0f} msg/s; {load}"))
                    figures += spark_breakdown(phases, stages, spark_s)
                    figures.append(("d. ratio of pair 1: Spark job / compact_topic", spark_s / local2_s,
                                    f"{spark_s:.2f} s / {local2_s:.2f} s"))
                    first = False
                else:
                    order = "Spark first" if run % 2 == 0 else "local first"
                    figures.append((f"d. ratio of pair {run + 1}: Spark job / compact_topic", spark_s / local2_s,
                                    f"{spark_s:.2f} s / {local2_s:.2f} s ({order}); {load}"))
            median = float(np.median(ratios))
            figures.append((f"d. ratio: Spark job / compact_topic, median of {len(ratios)} pairs (goal <= 3)",
                            median, f"{median:.2f}x"))
            spark_cpu, local_cpu = float(np.median(cpu["spark"][1:])), float(np.median(cpu["local"][1:]))
            figures.append((f"d. ratio of CPU seconds (process trees), median of {len(ratios)} pairs",
                            spark_cpu / local_cpu, f"Spark job {spark_cpu:.2f} s (driver, JVM, Python workers) / "
                            f"compact_topic {local_cpu:.2f} s; the load stretches these much less than wall time"))
            assert spark_view is not None and local2 is not None
            figures.append(("d. Spark view equals local view", 0.0, str(spark_view.equals(local2))))
            if args.probes:
                progress("probes: the Spark job's stages, each alone into Spark's noop sink")
                figures += stage_probes(spark, root)
                progress("the one-scan shape (max_by(struct(row), offset)) for comparison")
                forget_views(root)
                carry_s, _ = timed(lambda: compact_with_spark(spark, root, TOPIC, carry_payload=True))
                figures.append(("d. Spark job, one-scan shape (carry_payload=True)", carry_s,
                                f"{carry_s / local2_s:.2f}x compact_topic; same view: "
                                f"{current_view(root).equals(local2)}"))
            spark.stop()
        if args.memory or args.jobs_only:
            for job in ("local", "spark"):
                progress(f"{job} job in a process of its own (peak memory)")
                seconds, peak = run_measured(root, job, args.master)
                figures.append((f"f. {job} job in its own process", seconds,
                                f"peak RSS of its process tree {peak / 2**20:,.0f} MiB"))
    finally:
        for path in cleanup:
            shutil.rmtree(path, ignore_errors=True)
    print()
    width = max(len(name) for name, _, _ in figures)
    for name, seconds, note in figures:
        shown = (" " * 10 if not seconds else f"{seconds:8.2f}  " if "ratio" in name else f"{seconds:8.2f} s")
        print(f"{name:<{width}}  {shown}  {note}")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
