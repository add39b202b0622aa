"""``pubsub subscriptions ...``: create, list and delete durable subscriptions."""

from __future__ import annotations

import argparse
from typing import Any

from broker_core.cli.common import Context, Output, add_command, add_group, persistent_topic, require_topic
from broker_core.errors import AlreadyExists
from broker_core.subscription.cursor_store import validate_subscription_name


def register(commands: Any) -> None:
    subs = add_group(commands, "subscriptions", help="create, list and delete durable subscriptions")
    create = add_command(
        subs,
        "create",
        help="create a subscription with no consumer",
        handler=_create,
        description="Create a durable subscription on every partition of a topic, positioned at the "
        "earliest stored message (default) or after the latest. It holds messages back from retention "
        "until acknowledged, like a Pulsar subscription.",
        epilog="example: pubsub subscriptions create orders billing --position latest",
    )
    create.add_argument("topic", metavar="TOPIC")
    create.add_argument("subscription", metavar="SUBSCRIPTION")
    create.add_argument(
        "--position",
        choices=("earliest", "latest"),
        default="earliest",
        help="where it starts (default: earliest)",
    )
    listing = add_command(subs, "list", help="list a topic's subscriptions", handler=_list)
    listing.add_argument("topic", metavar="TOPIC")
    delete = add_command(
        subs,
        "delete",
        help="delete a subscription",
        handler=_delete,
        description="Delete a durable subscription on every partition. Refused while consumers are "
        "connected unless --force (a connected consumer that renews its lease re-creates it).",
    )
    delete.add_argument("topic", metavar="TOPIC")
    delete.add_argument("subscription", metavar="SUBSCRIPTION")
    delete.add_argument("--force", action="store_true", help="delete even with connected consumers")


def _create(ctx: Context, args: argparse.Namespace) -> Output:
    name = persistent_topic(args.topic)
    sub = validate_subscription_name(args.subscription)
    require_topic(ctx.broker, name)
    if not ctx.broker.create_subscription(name, sub, earliest=args.position == "earliest"):
        raise AlreadyExists(f"subscription {sub!r} exists already on {name}", subscription=sub)
    return Output(
        {"topic": str(name), "subscription": sub, "position": args.position, "created": True},
        [f"created subscription {sub} on {name} at the {args.position} position"],
    )


def _list(ctx: Context, args: argparse.Namespace) -> Output:
    name = persistent_topic(args.topic)
    broker = ctx.broker
    parts = require_topic(broker, name)
    now = ctx.now()
    out: list[dict[str, Any]] = []
    for sub in broker.admin.list_subscriptions(name):
        cursors = [c for p in parts if (c := broker.cursor_store(p, sub).load()[1]) is not None]
        consumers = sorted({n for c in cursors for n in c.live_consumers(now)})
        out.append(
            {
                "subscription": sub,
                "type": cursors[0].sub_type.name if cursors else None,
                "partitions": len(cursors),
                "consumers": consumers,
            }
        )
    lines = [
        f"{s['subscription']}  ({s['type']}, consumers: {', '.join(s['consumers']) or 'none'})" for s in out
    ]
    return Output({"topic": str(name), "subscriptions": out}, lines)


def _delete(ctx: Context, args: argparse.Namespace) -> Output:
    name = persistent_topic(args.topic)
    sub = validate_subscription_name(args.subscription)
    require_topic(ctx.broker, name)
    deleted = ctx.broker.admin.delete_subscription(name, sub, force=args.force)
    return Output(
        {"topic": str(name), "subscription": sub, "deleted": True, "internalTopics": deleted},
        [f"deleted subscription {sub} on {name}"],
    )


__all__ = ["register"]
