"""The reconcile jobs as commands: retention, ttl, backlog, compact, merge-segments, checkpoint,
cleanup-logs, vacuum.

Each command calls the library job (``broker_core.jobs``, ``broker_core.jobs.compaction``) and prints its
summary: per internal topic what was (or would be) removed, moved or kept, and why.  Commands that
destroy, move or rewrite something (retention, ttl, backlog --evict, merge-segments, cleanup-logs,
vacuum) are dry runs
unless ``--execute`` is given, as delta-rs's vacuum is.  The jobs show progress on stderr when it
is a terminal.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from broker_core.cli.common import (
    Context,
    Output,
    UsageError,
    add_command,
    count,
    duration_ms,
    megabytes,
    minutes,
    offset,
    persistent_topic,
    plain,
    require_target,
    require_topic,
    seconds,
    size_bytes,
)
from broker_core.errors import InvalidConfiguration
from broker_core.jobs import (
    MIN_SAFE_AGE_MS,
    backlog_status,
    checkpoint,
    cleanup_logs,
    enforce_backlog_quota,
    merge_segments,
    run_retention,
    run_ttl,
    vacuum,
)
from broker_core.jobs.compaction import compact_topic
from broker_core.jobs.merge_segments import DEFAULT_MIN_AGE_MS, DEFAULT_MIN_SEGMENTS, DEFAULT_TARGET_BYTES
from broker_core.jobs.progress import check_age
from broker_core.naming import TopicName


def _job(
    commands: Any,
    name: str,
    *,
    help: str,
    description: str,
    handler: Any,
    destructive: bool,
    namespace: bool = True,
    epilog: str | None = None,
) -> Any:
    parser = add_command(commands, name, help=help, description=description, handler=handler, epilog=epilog)
    parser.add_argument(
        "topic",
        metavar="TOPIC",
        nargs=None if not namespace else "?",
        help="a topic (every partition)" + (" or use --namespace" if namespace else ""),
    )
    if namespace:
        parser.add_argument("--namespace", metavar="TENANT/NAMESPACE", help="every persistent topic of it")
    if destructive:
        parser.add_argument("--execute", action="store_true", help="apply the changes (default: a dry run)")
    parser.add_argument("--now", metavar="TIME", help="evaluate as of this time (ISO 8601, epoch ms)")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every file affected")
    return parser


def register(commands: Any) -> None:
    retention = _job(
        commands,
        "retention",
        help="retire acknowledged front segments per the retention policy",
        handler=_retention,
        destructive=True,
        description="Retire the front segments that every durable subscription acknowledged and the "
        "retention policy no longer keeps (their files stay until vacuum). A dry run unless --execute.",
        epilog="example: pubsub retention --namespace acme/orders --execute",
    )
    retention.add_argument(
        "--time",
        type=minutes,
        metavar="DURATION",
        help="override retentionTimeInMinutes (e.g. 3h, 7d; -1: no limit)",
    )
    retention.add_argument(
        "--size",
        type=megabytes,
        metavar="SIZE",
        help="override retentionSizeInMB (e.g. 500M, 10G; -1: no limit)",
    )
    ttl = _job(
        commands,
        "ttl",
        help="acknowledge messages older than the message TTL",
        handler=_ttl,
        destructive=True,
        description="Acknowledge, in every durable subscription (or one), the "
        "unacknowledged messages older than messageTTLInSeconds. A dry run unless --execute.",
    )
    ttl.add_argument("--subscription", "-s", metavar="S", help="only this subscription")
    ttl.add_argument("--ttl", type=seconds, metavar="DURATION", help="override messageTTLInSeconds (0: off)")
    backlog = _job(
        commands,
        "backlog",
        help="backlog against the backlog quota; --evict enforces it",
        handler=_backlog,
        destructive=True,
        description="Show each partition's backlog against its quota. With --evict, move "
        "subscriptions over a consumer_backlog_eviction quota forward (with --execute).",
    )
    backlog.add_argument("--evict", action="store_true", help="enforce consumer_backlog_eviction quotas")
    compact = _job(
        commands,
        "compact",
        help="topic compaction: the latest message per key",
        handler=_compact,
        destructive=False,
        namespace=False,
        description="Compact a topic: keep the newest message per key (tombstones remove keys) in a "
        "view that readCompacted readers read; the log itself is untouched.",
    )
    compact.add_argument("--up-to-offset", type=offset, metavar="N", help="horizon (default: the end)")
    compact.add_argument("--dry-run", action="store_true", help="compute, write nothing")
    compact.add_argument("--retain-null-key", action="store_true", help="keep messages without a key")
    merge = _job(
        commands,
        "merge-segments",
        help="merge small old segments into larger ones (Delta's OPTIMIZE)",
        handler=_merge_segments,
        destructive=True,
        description="Rewrite runs of consecutive small segments older than --min-age as one segment each "
        "(same messages, offsets and message ids; the old files stay until vacuum). A dry run unless "
        "--execute.",
        epilog="example: pubsub merge-segments --namespace acme/orders --target-size 128M --execute",
    )
    merge.add_argument(
        "--target-size",
        type=_target_size,
        default=DEFAULT_TARGET_BYTES,
        metavar="SIZE",
        help="leave segments this large alone; a merged run stays within it (default 128M)",
    )
    merge.add_argument(
        "--min-segments",
        type=_min_segments,
        default=DEFAULT_MIN_SEGMENTS,
        metavar="N",
        help=f"the fewest segments worth merging (at least 2, default {DEFAULT_MIN_SEGMENTS})",
    )
    merge.add_argument(
        "--min-age",
        type=duration_ms,
        default=DEFAULT_MIN_AGE_MS,
        metavar="DURATION",
        help=f"segments committed more recently stay (default {DEFAULT_MIN_AGE_MS // 60_000}m)",
    )
    _job(
        commands,
        "checkpoint",
        help="write a log checkpoint of the latest version",
        handler=_checkpoint,
        destructive=False,
        description="Write a Delta checkpoint of each partition's latest log version.",
    )
    cleanup = _job(
        commands,
        "cleanup-logs",
        help="delete old log commits and checkpoints",
        handler=_cleanup,
        destructive=True,
        description="Delete log commits and checkpoints older than the newest "
        "checkpoint written before now minus --retention. A dry run unless --execute.",
        epilog="example: pubsub cleanup-logs orders --retention 30d --execute",
    )
    cleanup.add_argument(
        "--retention",
        type=duration_ms,
        required=True,
        metavar="DURATION",
        help="keep log history this long (at least 1h)",
    )
    vac = _job(
        commands,
        "vacuum",
        help="delete removed and orphan segment files",
        handler=_vacuum,
        destructive=True,
        description="Delete segment files removed by retention or merges (or orphaned by "
        "killed writers) longer ago than --min-age, and expire surplus dedup entries. A dry run "
        "unless --execute.",
        epilog="example: pubsub vacuum --namespace acme/orders --min-age 7d",
    )
    vac.add_argument(
        "--min-age",
        type=duration_ms,
        required=True,
        metavar="DURATION",
        help="files younger than this stay (at least 1h)",
    )
    vac.add_argument(
        "--tombstone-retention",
        type=duration_ms,
        metavar="DURATION",
        help="how long removals stay in the log (default: --min-age)",
    )
    vac.add_argument("--max-producers", type=count, metavar="N", help="dedup entries kept per partition")
    for parser in (cleanup, vac):
        parser.add_argument(
            "--unsafe-short-age",
            action="store_true",
            help="allow ages under 1h (only when nothing else uses the topic)",
        )


def _target(ctx: Context, args: argparse.Namespace) -> str | TopicName:
    target = require_target(args)
    if isinstance(target, TopicName):
        require_topic(ctx.broker, persistent_topic(str(target)))
    return target


def _output(ctx: Context, args: argparse.Namespace, summary: Any) -> Output:
    lines = summary.describe().splitlines()
    if args.verbose:
        for result in summary.results:
            for f in dataclasses.fields(result):
                value = getattr(result, f.name)
                if isinstance(value, tuple) and value and all(isinstance(v, str) for v in value):
                    lines += [f"    {result.topic} {f.name}: {v}" for v in value]
    if summary.dry_run and hasattr(args, "execute") and not args.execute and summary.job != "backlog-status":
        lines.append("dry run: nothing was changed; add --execute to apply")
    return Output(plain(summary), lines)


def _retention(ctx: Context, args: argparse.Namespace) -> Output:
    target = _target(ctx, args)
    return _output(
        ctx,
        args,
        run_retention(
            ctx.broker,
            target,
            dry_run=not args.execute,
            now_ms=ctx.now(),
            retention_time_in_minutes=args.time,
            retention_size_in_mb=args.size,
        ),
    )


def _ttl(ctx: Context, args: argparse.Namespace) -> Output:
    target = _target(ctx, args)
    return _output(
        ctx,
        args,
        run_ttl(
            ctx.broker,
            target,
            now_ms=ctx.now(),
            dry_run=not args.execute,
            subscription=args.subscription,
            ttl_seconds=args.ttl,
        ),
    )


def _backlog(ctx: Context, args: argparse.Namespace) -> Output:
    if args.execute and not args.evict:
        raise UsageError("--execute goes with --evict (without it, backlog only reports)")
    target = _target(ctx, args)
    if args.evict:
        summary: Any = enforce_backlog_quota(ctx.broker, target, now_ms=ctx.now(), dry_run=not args.execute)
    else:
        summary = backlog_status(ctx.broker, target, now_ms=ctx.now())
    return _output(ctx, args, summary)


def _compact(ctx: Context, args: argparse.Namespace) -> Output:
    name = persistent_topic(args.topic)
    require_topic(ctx.broker, name)
    summary = compact_topic(
        ctx.broker,
        name,
        up_to_offset=args.up_to_offset,
        dry_run=args.dry_run,
        retain_null_key=args.retain_null_key,
    )
    lines = [
        f"compaction of {name}: {summary.messages_read} message(s) read, {summary.rows} row(s) in the view"
    ]
    lines += [
        f"  {r.topic}: {r.status}, horizon {r.previous_horizon} -> {r.horizon}, {r.messages_read} read, "
        f"{r.rows} rows" + (f", view {r.file}" if args.verbose and r.file else "")
        for r in summary.results
    ]
    lines += ["dry run: nothing was written"] if args.dry_run else []
    return Output(summary.to_json(), lines)


def _target_size(text: str) -> int:
    """A ``--target-size`` (argparse type): a size of at least one byte."""
    size = size_bytes(text)
    if size < 1:
        raise argparse.ArgumentTypeError(f"expected a size of at least 1 byte, got {text!r}")
    return size


def _min_segments(text: str) -> int:
    """A ``--min-segments`` (argparse type): merging fewer than two segments changes nothing."""
    least = count(text)
    if least < 2:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 2, got {text!r}")
    return least


def _merge_segments(ctx: Context, args: argparse.Namespace) -> Output:
    target = _target(ctx, args)
    return _output(
        ctx,
        args,
        merge_segments(
            ctx.broker,
            target,
            target_bytes=args.target_size,
            min_segments=args.min_segments,
            min_age_ms=args.min_age,
            dry_run=not args.execute,
            now_ms=ctx.now(),
        ),
    )


def _checkpoint(ctx: Context, args: argparse.Namespace) -> Output:
    return _output(ctx, args, checkpoint(ctx.broker, _target(ctx, args)))


def _check_age(ms: int, option: str, args: argparse.Namespace) -> None:
    """The job's own age check, before anything runs, its refusal said in the CLI's terms."""
    try:
        check_age(ms, option, enforce=not args.unsafe_short_age)
    except InvalidConfiguration:
        raise UsageError(
            f"{option} is under the safe minimum of {MIN_SAFE_AGE_MS // 60_000} minutes: in-flight writes"
            " and slow readers could lose files; add --unsafe-short-age only when nothing else uses the topic"
        ) from None


def _cleanup(ctx: Context, args: argparse.Namespace) -> Output:
    _check_age(args.retention, "--retention", args)
    target = _target(ctx, args)
    return _output(
        ctx,
        args,
        cleanup_logs(
            ctx.broker,
            target,
            retention_ms=args.retention,
            dry_run=not args.execute,
            now_ms=ctx.now(),
            enforce_min_age=not args.unsafe_short_age,
        ),
    )


def _vacuum(ctx: Context, args: argparse.Namespace) -> Output:
    _check_age(args.min_age, "--min-age", args)
    target = _target(ctx, args)
    return _output(
        ctx,
        args,
        vacuum(
            ctx.broker,
            target,
            min_age_ms=args.min_age,
            dry_run=not args.execute,
            now_ms=ctx.now(),
            tombstone_retention_ms=args.tombstone_retention,
            max_producers=args.max_producers,
            enforce_min_age=not args.unsafe_short_age,
        ),
    )


__all__ = ["register"]
