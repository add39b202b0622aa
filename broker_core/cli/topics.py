"""``pubsub topics ...``: create, list, delete, stats (peek, skip and reset-cursor are in ``messages``)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from broker_core.broker.stats import EMPTY_PULSAR_FIELDS, sum_pulsar_fields, topic_stats
from broker_core.cli import messages, policies
from broker_core.cli.chart import bar_chart, can_draw_blocks
from broker_core.cli.common import (
    Context,
    Output,
    UsageError,
    add_command,
    add_group,
    count,
    persistent_topic,
    require_target,
    require_topic,
)
from broker_core.jobs.check import check_topic
from broker_core.naming import NamespaceName, TopicName

_NAMES = "topic names: 'x' (persistent://public/default/x), 'tenant/ns/x', 'persistent://tenant/ns/x'"


def register(commands: Any) -> None:
    topics = add_group(commands, "topics", help="create, list, delete, inspect topics; peek, skip, reset")
    create = add_command(
        topics,
        "create",
        help="create a topic (partitioned with --partitions)",
        handler=_create,
        description="Create a non-partitioned persistent topic (its log), or with --partitions N a "
        "partitioned topic whose partition logs are created by their first producer or reader.",
        epilog=f"{_NAMES}\n\nexamples:\n  pubsub topics create orders\n"
        "  pubsub topics create acme/sales/events --partitions 4",
    )
    create.add_argument("topic", metavar="TOPIC")
    create.add_argument("--partitions", type=count, metavar="N", help="number of partitions (>= 1)")
    listing = add_command(topics, "list", help="list a namespace's topics", handler=_list)
    listing.add_argument("namespace", metavar="TENANT/NAMESPACE")
    delete = add_command(
        topics,
        "delete",
        help="delete a topic and everything it stores",
        handler=_delete,
        description="Delete a persistent topic: every partition's directory (messages, log, "
        "subscriptions, producer registry, compacted view), its topic policies and its partition "
        "metadata. Refused while producers or consumers are connected (live leases) unless --force; "
        "connected producers are then disconnected: their sends fail with TopicDeleted.",
    )
    delete.add_argument("topic", metavar="TOPIC")
    delete.add_argument(
        "--force",
        action="store_true",
        help="delete even with connected producers/consumers (producers are fenced; stop consumers first)",
    )
    stats = add_command(topics, "stats", help="sizes, publishers, subscriptions and backlogs", handler=_stats)
    stats.add_argument("topic", metavar="TOPIC")
    stats.add_argument(
        "--chart",
        action="store_true",
        help="also draw the backlog per subscription as a text bar chart (text output only)",
    )
    check = add_command(
        topics,
        "check",
        help="verify a topic's files; --repair what can be repaired",
        handler=_check,
        description="Verify every partition's log (no missing commit, every path a segment name), "
        "checkpoints, segments (present, readable, the recorded row count) and cursors, and report each "
        "problem with its file. Exit status 1 while problems remain. With --repair (a dry run unless "
        "--execute): rebuild damaged checkpoints from the JSON commits, set damaged segments aside with "
        "a data-loss record (their messages are lost: readers skip them, a Spark query with "
        "failOnDataLoss=true fails naming them) and supersede damaged cursor versions. A missing or "
        "undecodable commit cannot be repaired: restore it from a backup.",
        epilog="examples:\n  pubsub topics check orders\n  pubsub topics check --namespace acme/sales\n"
        "  pubsub topics check orders --repair --execute",
    )
    check.add_argument("topic", metavar="TOPIC", nargs="?", help="a topic (every partition), or use --namespace")
    check.add_argument("--namespace", metavar="TENANT/NAMESPACE", help="every persistent topic of it")
    check.add_argument("--repair", action="store_true", help="repair what can be repaired (see above)")
    check.add_argument("--execute", action="store_true", help="with --repair: apply it (default: a dry run)")
    messages.register(topics)
    policies.register(topics, "topic")


def _check(ctx: Context, args: argparse.Namespace) -> Output:
    target = require_target(args)
    if args.execute and not args.repair:
        raise UsageError("--execute applies a --repair: give both, or neither")
    summary = check_topic(ctx.broker, target, repair=args.repair, dry_run=not args.execute)
    lines = summary.describe().splitlines()
    remaining = [f for r in summary.results for f in r.findings if not (r.changed and f.repair)]
    if args.repair and not args.execute and any(r.findings for r in summary.results):
        lines.append("dry run: nothing was changed; add --execute to repair")
    data = [{"topic": r.topic, "ok": r.ok, "repaired": list(r.repaired),
             "findings": [{"kind": f.kind, "file": f.file, "detail": f.detail, "repair": f.repair}
                          for f in r.findings]} for r in summary.results]
    return Output(data, lines, exit_code=1 if remaining else 0)


def _create(ctx: Context, args: argparse.Namespace) -> Output:
    name = TopicName.parse(args.topic)
    admin = ctx.broker.admin
    if args.partitions is not None:
        admin.create_partitioned_topic(name, args.partitions)
    else:
        admin.create_topic(name)
    parts = args.partitions or 0
    what = f"partitioned topic {name} with {parts} partitions" if parts else f"topic {name}"
    return Output({"topic": str(name), "partitions": parts, "created": True}, [f"created {what}"])


def _list(ctx: Context, args: argparse.Namespace) -> Output:
    ns = str(NamespaceName.parse(args.namespace))
    admin = ctx.broker.admin
    topics: list[dict[str, Any]] = [
        {"topic": t, "partitions": admin.partitioned_topic_metadata(t)} for t in admin.list_topics(ns)
    ]
    lines = [t["topic"] + (f"  ({t['partitions']} partitions)" if t["partitions"] else "") for t in topics]
    return Output({"namespace": ns, "topics": topics}, lines)


def _delete(ctx: Context, args: argparse.Namespace) -> Output:
    name = TopicName.parse(args.topic)
    result = ctx.broker.admin.delete_topic(name, force=args.force)
    subs = result["subscriptions"]
    lines = [
        f"deleted topic {name}: {len(result['internalTopics'])} internal topic(s)"
        + (f", subscriptions {', '.join(subs)}" if subs else "")
    ]
    return Output({"topic": str(name), "deleted": True, **result}, lines)


_EMPTY_PARTITION: dict[str, Any] = {
    **EMPTY_PULSAR_FIELDS,
    "firstOffset": 0,
    "nextOffset": 0,
    "msgCount": 0,
    "storageSize": 0,
    "segments": 0,
    "logVersion": None,
    "publishers": [],
    "subscriptions": {},
}


def _stats(ctx: Context, args: argparse.Namespace) -> Output:
    name = persistent_topic(args.topic)
    broker = ctx.broker
    parts = require_topic(broker, name)
    now_ms = time.time_ns() // 1_000_000
    out: dict[str, Any] = {
        "topic": str(name),
        "partitions": {},
        "msgCount": 0,
        "storageSize": 0,
        "msgBacklog": {},
    }
    for part in parts:
        if not broker.topic_log(part, create=False).exists():  # created by its first producer or reader
            out["partitions"][str(part)] = dict(_EMPTY_PARTITION)
            continue
        stats = topic_stats(broker, part, now_ms=now_ms)
        out["partitions"].update(stats["partitions"])
        out["msgCount"] += stats["msgCount"]
        out["storageSize"] += stats["storageSize"]
        for sub, backlog in stats["msgBacklog"].items():
            out["msgBacklog"][sub] = out["msgBacklog"].get(sub, 0) + backlog
    out.update(sum_pulsar_fields(out["partitions"].values(), now_ms=now_ms))
    lines = [f"{name}: {out['msgCount']} message(s), {out['storageSize']} bytes, "
             f"in {out['msgRateIn']:.2f} msg/s, out {out['msgRateOut']:.2f} msg/s (last minute), "
             f"oldest backlog message {out['oldestBacklogMessageAgeSeconds']} s old"]
    for part_name, part in out["partitions"].items():
        publishers = ", ".join(p["producerName"] for p in part["publishers"]) or "none"
        lines.append(
            f"  {part_name}: offsets [{part['firstOffset']}, {part['nextOffset']}), "
            f"{part['segments']} segment(s), log version {part['logVersion']}, publishers: {publishers}"
        )
        for sub, st in sorted(part["subscriptions"].items()):
            consumers = ", ".join(c["consumerName"] for c in st["consumers"]) or "none"
            lines.append(
                f"    subscription {sub} ({st['type']}): backlog {st['msgBacklog']}, "
                f"unacked {st['unackedMessages']}, consumers: {consumers}"
            )
    if args.chart:
        lines += _backlog_chart(out["msgBacklog"])
    return Output(out, lines)


def _backlog_chart(backlogs: dict[str, int]) -> list[str]:
    """The topic's backlog per subscription (every partition summed), largest first, as bars."""
    if not backlogs:
        return ["backlog per subscription: no subscriptions, nothing to chart"]
    ordered = dict(sorted(backlogs.items(), key=lambda kv: (-kv[1], kv[0])))
    blocks = can_draw_blocks(getattr(sys.stdout, "encoding", None))
    return ["backlog per subscription:"] + ["  " + line for line in bar_chart(ordered, unit="msg", blocks=blocks)]


__all__ = ["register"]
