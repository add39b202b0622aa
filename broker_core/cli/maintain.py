"""``pubsub maintain``: the broker's maintenance timers as one command (``broker_core.jobs.maintain``).

One pass runs every job that is due on every persistent topic (of ``--namespace`` or the whole root),
under the root's maintenance lease, and prints its summary; ``--every`` repeats it (``--passes`` bounds
the repetitions, for cron and tests).  Like the other destructive jobs it is a dry run unless
``--execute``.  With ``--json`` each pass is one JSON line, printed as soon as the pass ends.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from broker_core.cli.common import Context, Output, UsageError, add_command, count, duration_ms
from broker_core.errors import PulsarException
from broker_core.jobs.maintain import MIN_GRACE_MS, MaintenanceSchedule, list_topics, run_maintenance_pass
from broker_core.jobs.maintenance_lease import DEFAULT_LEASE_MS, MaintenanceLease

_sleep = time.sleep  # tests replace it


def register(commands: Any) -> None:
    parser = add_command(
        commands,
        "maintain",
        help="run every maintenance job that is due, on every topic (the broker's timers)",
        handler=_maintain,
        description="Run retention, message expiry, backlog quotas, compaction (over "
        "brokerServiceCompactionThresholdInBytes), segment merging, log checkpoints, log cleanup and vacuum "
        "on each topic whose interval has passed (retentionCheckIntervalInSeconds, "
        "messageExpiryCheckIntervalInMinutes, backlogQuotaCheckIntervalInSeconds, ...). One runner per root "
        "at a time: others stand by. A dry run unless --execute.",
        epilog="examples:\n  pubsub maintain --all --every 1m --execute\n"
        "  pubsub maintain --namespace acme/orders --json            # dry run, one pass",
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--namespace", metavar="TENANT/NAMESPACE", action="append",
                       help="only this namespace (repeatable)")
    scope.add_argument("--all", action="store_true", help="every namespace of the root (the default)")
    parser.add_argument("--every", type=interval_ms, metavar="DURATION",
                        help="repeat a pass this often (e.g. 1m); without it, run one pass")
    parser.add_argument("--passes", type=count, metavar="N", help="with --every: stop after N passes")
    parser.add_argument("--lease", type=interval_ms, default=DEFAULT_LEASE_MS, metavar="DURATION",
                        help=f"how long the leader lease lasts unrenewed (default {DEFAULT_LEASE_MS // 1000}s)")
    parser.add_argument("--log-retention", type=duration_ms, metavar="DURATION",
                        help="cleanup-logs keeps this much log history (default: logHistoryRetentionInSeconds, "
                        "10m; at least 1m)")
    parser.add_argument("--vacuum-min-age", type=duration_ms, metavar="DURATION",
                        help="vacuum deletes segment files removed longer ago than this (default: "
                        "removedSegmentGracePeriodInSeconds, 10m; at least 1m); files no commit names wait "
                        "at least 1h")
    parser.add_argument("--execute", action="store_true", help="apply the changes (default: a dry run)")


def interval_ms(text: str) -> int:
    """A positive duration (argparse type)."""
    ms = duration_ms(text)
    if ms <= 0:
        raise argparse.ArgumentTypeError(f"expected a duration above zero, got {text!r}")
    return ms


def _maintain(ctx: Context, args: argparse.Namespace) -> Output:
    if args.passes is not None and args.every is None:
        raise UsageError("--passes goes with --every (without --every, maintain runs one pass)")
    ages = {"log_retention_ms": (args.log_retention, "--log-retention"),
            "vacuum_min_age_ms": (args.vacuum_min_age, "--vacuum-min-age")}
    for ms, option in ages.values():
        if ms is not None and ms < MIN_GRACE_MS:
            raise UsageError(f"{option} is under the minimum of {MIN_GRACE_MS // 1000} seconds: a read in flight "
                             "could meet a deleted file; give e.g. 10m")
    broker = ctx.broker
    schedule = MaintenanceSchedule.from_config(broker, **{k: ms for k, (ms, _) in ages.items() if ms is not None})
    list_topics(broker, args.namespace)  # an unknown namespace fails now, not as every pass's error
    lease = MaintenanceLease(broker.io, lease_ms=args.lease)
    total = 1 if args.every is None else args.passes
    done = 0
    while total is None or done < total:
        started = time.monotonic()
        try:
            summary = run_maintenance_pass(broker, namespaces=args.namespace, execute=args.execute, lease=lease,
                                           schedule=schedule)
        except (PulsarException, OSError) as exc:
            if args.every is None:
                raise
            # a service outlives a storage hiccup: this pass failed, the next one tries again
            summary = {"status": "error", "error": f"{type(exc).__name__}: {exc}", "execute": args.execute,
                       "topics": []}
        done += 1
        if ctx.json:
            print(json.dumps(summary, separators=(",", ":"), default=str))
        else:
            print("\n".join(_lines(summary)))
        sys.stdout.flush()
        if args.every is not None and (total is None or done < total):
            _sleep(max(0.0, args.every / 1000 - (time.monotonic() - started)))
    return Output(None, printed=True)


def _lines(summary: dict[str, Any]) -> list[str]:
    mode = "" if summary["execute"] else " (dry run)"
    if summary["status"] == "error":
        return [f"maintenance pass{mode}: failed, {summary['error']}; the next pass tries again"]
    if summary["status"] == "standby":
        return [f"maintenance pass{mode}: standby, {summary['leader']} leads"]
    lines = [f"maintenance pass{mode}: {summary['status']}, {len(summary['topics'])} topic(s) with due jobs, "
             f"{summary['elapsedMs']:.0f} ms"]
    for topic in summary["topics"]:
        changed = [job for job, r in topic["jobs"].items() if r.get("changed")]
        lines.append(f"  {topic['topic']}: ran {', '.join(topic['jobs']) or 'nothing'}"
                     + (f"; changed by {', '.join(changed)}" if changed else ""))
        lines += [f"    {job} failed: {error}" for job, error in topic["errors"].items()]
    if not summary["execute"]:
        lines.append("dry run: nothing was changed; add --execute to apply")
    return lines


__all__ = ["interval_ms", "register"]
