"""Batch-reconcile jobs as Spark entry points (DESIGN.md section 7).

Run a job with ``spark-submit spark_pubsub/jobs.py <command> ...`` or ``python -m spark_pubsub.jobs
<command> ...``; ``main(argv)`` dispatches the subcommand and prints a JSON summary.  Each command is
a thin driver over ``broker_core``: the core plans the work and commits the result (so a job is as
safe to kill and to run beside producers and consumers as the library function it mirrors), Spark
only spreads the heavy part over executors.

Commands:

- ``compact --root R --topic T [--up-to-offset N] [--dry-run] [--retain-null-key]``: topic
  compaction (``broker_core/jobs/compaction.py``) on Spark (``spark_pubsub/compaction_job.py``): the
  native scan, Spark's own aggregation, view files written by tasks, pointers committed on the
  driver exactly like the local run, for topics too large for one process.
- ``retention``, ``ttl``, ``merge-segments``, ``vacuum --root R (--topic T | --namespace NS) [--execute]
  ...``: the
  library jobs (``broker_core/jobs``) spread over executors one internal topic per task, with the
  same options as the ``pubsub`` command and, like it, dry runs unless ``--execute``.  The driver
  resolves the internal topics and fixes "now", so every task decides by the same clock.
- ``maintain --root R [--namespace NS ... | --all] [--execute]``: one maintenance pass (``pubsub
  maintain``), the topics spread over executors (``spark_pubsub/maintain_job.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from broker_core.broker.broker import Broker
from broker_core.naming import TopicName
from spark_pubsub.compaction_fallback import compact_planned_in_tasks, latest_per_key_df
from spark_pubsub.compaction_job import compact_with_spark, default_parallelism

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# -- the command line ------------------------------------------------------------------------------


@contextmanager
def _spark_session(master: str | None, app_name: str) -> Iterator[SparkSession]:
    """The active session (a ``spark-submit`` job's, or a caller's), else a new one stopped at the end."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    spark = builder.getOrCreate()
    try:
        yield spark
    finally:
        spark.stop()


def _add_storage_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--storage-option", metavar="KEY=VALUE", action="append", default=[],
                        help="an object-store option (aws_endpoint=...; repeatable); AWS_* variables also apply")


def _storage(args: argparse.Namespace) -> dict[str, str]:
    from broker_core.cli.common import storage_options

    return storage_options(args.storage_option)


def _run_compact(args: argparse.Namespace) -> int:
    with _spark_session(args.master, "pubsub-compact") as spark:
        summary = compact_with_spark(spark, args.root, args.topic, up_to_offset=args.up_to_offset,
                                     dry_run=args.dry_run, retain_null_key=args.retain_null_key,
                                     parallelism=args.parallelism, storage_options=_storage(args))
    print(json.dumps(summary.to_json()))
    return 0


# -- retention, TTL and vacuum: one internal topic per task ---------------------------------------


def _job_result(broker: Broker, job: str, topic: str, options: dict[str, Any]) -> dict[str, Any]:
    """Run a library job on one internal topic; its result as JSON-able data."""
    from broker_core.cli.common import plain
    from broker_core.jobs import merge_segments, run_retention, run_ttl, vacuum

    jobs: dict[str, Callable[..., Any]] = {"retention": run_retention, "ttl": run_ttl, "vacuum": vacuum,
                                           "merge-segments": merge_segments}
    summary = jobs[job](broker, TopicName.parse(topic), **options)
    return dict(plain(summary.results[0]))


def _partition_runner(root: str, job: str, options: dict[str, Any], storage: Mapping[str, str] | None = None
                      ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function: each input row names an internal topic, each output row its result."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        broker = Broker.for_url(root, storage_options=storage)
        for batch in batches:
            topics = batch.column(0).to_pylist()
            results = [json.dumps(_job_result(broker, job, t, options)) for t in topics]
            yield pa.RecordBatch.from_arrays([pa.array(topics, pa.string()), pa.array(results, pa.string())],
                                             names=["topic", "result"])

    return run


def _fail_fast(job: str, options: dict[str, Any]) -> None:
    """Refuse on the driver what every task would refuse (the library checks again in each task)."""
    from broker_core.jobs import RetentionLimits
    from broker_core.jobs.merge_segments import check_options
    from broker_core.jobs.progress import check_age

    if job == "merge-segments":
        check_options(options["target_bytes"], options["min_segments"], options["min_age_ms"])
    if job == "vacuum":
        check_age(options["min_age_ms"], "--min-age", enforce=options.get("enforce_min_age", True))
    minutes, mb = options.get("retention_time_in_minutes"), options.get("retention_size_in_mb")
    if job == "retention" and minutes is not None and mb is not None:
        RetentionLimits(time_in_minutes=minutes, size_in_mb=mb)


def run_per_partition(spark: SparkSession, root: str, job: str, target: str | TopicName, *,
                      options: dict[str, Any], parallelism: int | None = None,
                      storage_options: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run ``retention``, ``ttl``, ``merge-segments`` or ``vacuum`` on every internal topic of ``target``
    (a ``TopicName`` or a ``tenant/namespace``), one Spark task per internal topic; a summary like
    ``pubsub --json``.

    ``options`` are the library job's keyword arguments; ``now_ms`` is fixed here when absent.
    """
    from broker_core.errors import SubscriptionNotFound
    from broker_core.jobs.progress import resolve_targets
    from broker_core.jobs.retention import durable_cursors

    started = time.monotonic()
    broker = Broker.for_url(root, storage_options=storage_options)
    name, partitions = resolve_targets(broker, target)
    options = {"now_ms": time.time_ns() // 1_000_000, **options}
    _fail_fast(job, options)
    if options.get("subscription") is not None:  # only the internal topics that have it
        partitions = [p for p in partitions if options["subscription"] in durable_cursors(broker, p)]
        if not partitions:
            raise SubscriptionNotFound(f"subscription {options['subscription']!r} does not exist on {name}",
                                       subscription=options["subscription"])
    rows: list[Any] = []
    if partitions:
        slices = max(1, min(len(partitions), parallelism or default_parallelism(spark)))
        frame = spark.createDataFrame([(str(p),) for p in partitions], "topic string").repartition(slices)
        runner = _partition_runner(root, job, options, storage_options)
        rows = frame.mapInArrow(runner, "topic string, result string").collect()
    results = sorted((json.loads(row["result"]) for row in rows), key=lambda r: r["topic"])
    return {"job": job, "target": name, "dryRun": options["dry_run"], "results": results,
            "changed": any(r["changed"] for r in results), "elapsedMs": (time.monotonic() - started) * 1000}


def _run_library_job(args: argparse.Namespace) -> int:
    from broker_core.cli.common import time_ms

    options: dict[str, Any] = {"dry_run": not args.execute}
    if args.now is not None:
        options["now_ms"] = time_ms(args.now, now_ms=time.time_ns() // 1_000_000)
    if args.command == "retention":
        options.update(retention_time_in_minutes=args.time, retention_size_in_mb=args.size)
    elif args.command == "ttl":
        options.update(subscription=args.subscription, ttl_seconds=args.ttl)
    elif args.command == "merge-segments":
        options.update(target_bytes=args.target_size, min_segments=args.min_segments, min_age_ms=args.min_age)
    else:
        options.update(min_age_ms=args.min_age, tombstone_retention_ms=args.tombstone_retention,
                       max_producers=args.max_producers, enforce_min_age=not args.unsafe_short_age)
    with _spark_session(args.master, f"pubsub-{args.command}") as spark:
        target = TopicName.parse(args.topic) if args.topic else args.namespace
        summary = run_per_partition(spark, args.root, args.command, target, options=options,
                                    parallelism=args.parallelism, storage_options=_storage(args))
    print(json.dumps(summary))
    return 0


def _add_library_jobs(commands: Any) -> None:
    """``retention``, ``ttl``, ``merge-segments`` and ``vacuum``: the library jobs, one Spark task per
    internal topic."""
    from broker_core.cli.common import count, duration_ms, megabytes, minutes, seconds, size_bytes
    from broker_core.jobs.merge_segments import DEFAULT_MIN_AGE_MS, DEFAULT_MIN_SEGMENTS, DEFAULT_TARGET_BYTES

    helps = {"retention": "retire acknowledged front segments per the retention policy",
             "ttl": "acknowledge messages older than the message TTL",
             "merge-segments": "merge small old segments into larger ones (Delta's OPTIMIZE)",
             "vacuum": "delete removed and orphan segment files"}
    for job, text in helps.items():
        parser = commands.add_parser(job, help=text, description=f"{text} (a dry run unless --execute)")
        parser.add_argument("--root", required=True, help="the storage root (a folder, file:// or s3:// URL)")
        _add_storage_option(parser)
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--topic", help="a topic (every partition)")
        target.add_argument("--namespace", metavar="TENANT/NAMESPACE", help="every persistent topic of it")
        parser.add_argument("--execute", action="store_true", help="apply the changes (default: a dry run)")
        parser.add_argument("--now", help="evaluate as of this time (ISO 8601 or epoch ms)")
        parser.add_argument("--parallelism", type=count, default=None, help="Spark tasks (default: cores)")
        parser.set_defaults(run=_run_library_job)
        if job == "retention":
            parser.add_argument("--time", type=minutes, help="override retentionTimeInMinutes (3h, 7d; -1)")
            parser.add_argument("--size", type=megabytes, help="override retentionSizeInMB (500M, 10G; -1)")
        elif job == "ttl":
            parser.add_argument("--subscription", help="only this subscription")
            parser.add_argument("--ttl", type=seconds, help="override messageTTLInSeconds (0: off)")
        elif job == "merge-segments":
            parser.add_argument("--target-size", type=size_bytes, default=DEFAULT_TARGET_BYTES,
                                help="leave segments this large alone; a run stays within it (128M)")
            parser.add_argument("--min-segments", type=count, default=DEFAULT_MIN_SEGMENTS,
                                help="the fewest segments worth merging (at least 2)")
            parser.add_argument("--min-age", type=duration_ms, default=DEFAULT_MIN_AGE_MS,
                                help="segments committed more recently stay (10m)")
        else:
            parser.add_argument("--min-age", type=duration_ms, required=True, help="files younger stay (7d)")
            parser.add_argument("--tombstone-retention", type=duration_ms, default=None)
            parser.add_argument("--max-producers", type=count, default=None)
            parser.add_argument("--unsafe-short-age", action="store_true", help="allow ages under 1h")


def _run_maintain(args: argparse.Namespace) -> int:
    from spark_pubsub.maintain_job import maintain_with_spark

    with _spark_session(args.master, "pubsub-maintain") as spark:
        summary = maintain_with_spark(spark, args.root, namespaces=args.namespace, execute=args.execute,
                                      parallelism=args.parallelism, storage_options=_storage(args),
                                      lease_ms=args.lease)
    print(json.dumps(summary, default=str))
    return 0


def _add_maintain(commands: Any) -> None:
    """``maintain``: one maintenance pass (``pubsub maintain``), the topics spread over executors."""
    from broker_core.cli.common import count
    from broker_core.cli.maintain import interval_ms
    from broker_core.jobs.maintenance_lease import DEFAULT_LEASE_MS

    text = "run every maintenance job that is due, on every topic, the topics spread over executors"
    parser = commands.add_parser("maintain", help=text, description=f"{text} (a dry run unless --execute)")
    parser.add_argument("--root", required=True, help="the storage root (a folder, file:// or s3:// URL)")
    _add_storage_option(parser)
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--namespace", metavar="TENANT/NAMESPACE", action="append",
                       help="only this namespace (repeatable)")
    scope.add_argument("--all", action="store_true", help="every namespace of the root (the default)")
    parser.add_argument("--execute", action="store_true", help="apply the changes (default: a dry run)")
    parser.add_argument("--parallelism", type=count, default=None, help="Spark tasks (default: cores)")
    parser.add_argument("--lease", type=interval_ms, default=DEFAULT_LEASE_MS, metavar="DURATION",
                        help="how long the leader lease lasts unrenewed (default 120s)")
    parser.set_defaults(run=_run_maintain)


def build_parser() -> argparse.ArgumentParser:
    """The CLI: one subcommand per job, each with ``run`` set to its driver function."""
    parser = argparse.ArgumentParser(prog="spark_pubsub.jobs",
                                     description="spark-pubsub batch-reconcile jobs on Spark")
    parser.add_argument("--master", help="Spark master when no session is active (e.g. local[2])")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    compact = commands.add_parser("compact", help="topic compaction: the latest message per key")
    compact.add_argument("--root", required=True, help="the storage root (a folder, file:// or s3:// URL)")
    _add_storage_option(compact)
    compact.add_argument("--topic", required=True, help="topic; a partitioned topic compacts every partition")
    compact.add_argument("--up-to-offset", type=int, default=None,
                         help="the horizon (default: each partition's end offset when the job starts)")
    compact.add_argument("--dry-run", action="store_true", help="compute and report, write nothing")
    compact.add_argument("--retain-null-key", action="store_true",
                         help="keep keyless messages (Pulsar's topicCompactionRetainNullKey)")
    compact.add_argument("--parallelism", type=int, default=None,
                         help="Spark tasks per scan (default: 4 per core)")
    compact.set_defaults(run=_run_compact)
    _add_library_jobs(commands)
    _add_maintain(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the chosen job, return its exit status."""
    args = build_parser().parse_args(argv)
    result: int = args.run(args)
    return result


__all__ = ["build_parser", "compact_planned_in_tasks", "compact_with_spark", "latest_per_key_df", "main",
           "run_per_partition"]


if __name__ == "__main__":
    sys.exit(main())
