"""``pubsub topics peek|skip|reset-cursor``: look at and move a subscription's position.

- ``peek`` reads the next messages of a subscription (unacknowledged, from its cursor) or from the
  earliest live message, without changing anything.  On a partitioned topic it reads each
  partition and shows the first N by publish time.
- ``skip`` acknowledges the next N unacknowledged messages (one cursor commit, re-applied to the
  latest cursor on a lost race); ``--all`` clears the backlog.
- ``reset-cursor`` moves the cursor to a publish time (inclusive) or a message id (inclusive unless
  ``--exclude-message``), forward or back, as ``Consumer.seek`` does.
"""

from __future__ import annotations

import argparse
import base64
from typing import Any

import numpy as np
import pyarrow as pa

from broker_core.broker.broker import Broker
from broker_core.cli.common import (
    Context,
    Output,
    UsageError,
    add_command,
    count,
    iso,
    persistent_topic,
    require_topic,
    time_ms,
)
from broker_core.errors import InvalidConfiguration, NotAllowedError, SubscriptionNotFound
from broker_core.jobs.ttl import acknowledge_ranges
from broker_core.message_id import MessageId
from broker_core.naming import TopicName
from broker_core.subscription.cursor import Cursor
from broker_core.subscription.cursor_store import validate_subscription_name
from broker_core.subscription.ranges import RangeSet
from broker_core.topic.topic_log import TopicLog

_READ_ROWS = 4096


def register(topics: Any) -> None:
    peek = add_command(
        topics,
        "peek",
        help="show the next messages without acknowledging them",
        handler=_peek,
        epilog="examples:\n  pubsub topics peek orders --subscription billing -n 5"
        "\n  pubsub topics peek orders --earliest -n 20 --json",
    )
    peek.add_argument("topic", metavar="TOPIC")
    where = peek.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--subscription", "-s", metavar="S", help="the messages this subscription has not acked"
    )
    where.add_argument("--earliest", action="store_true", help="the oldest messages still stored")
    peek.add_argument("-n", "--count", type=count, default=1, metavar="N", help="how many (default 1)")

    skip = add_command(
        topics,
        "skip",
        help="acknowledge the next N messages of a subscription",
        handler=_skip,
        description="Acknowledge the next N unacknowledged messages of a subscription (on one "
        "partition: name it <topic>-partition-<i>), or with --all every message (all partitions).",
    )
    skip.add_argument("topic", metavar="TOPIC")
    skip.add_argument("--subscription", "-s", metavar="S", required=True, help="the subscription")
    amount = skip.add_mutually_exclusive_group(required=True)
    amount.add_argument("-n", "--count", type=count, metavar="N", help="how many messages to skip")
    amount.add_argument("--all", action="store_true", help="skip the whole backlog (clear it)")

    reset = add_command(
        topics,
        "reset-cursor",
        help="move a subscription to a time or a message id",
        handler=_reset,
        description="Move a subscription's cursor (forward or back) to the first message published at or "
        "after a time, or to a message id. Refused while consumers are connected unless --force: they "
        "keep reading from their own position until they reconnect.",
        epilog="times: ISO 8601 (2024-05-01T12:00:00Z; no zone = UTC), epoch ms, or a duration ago (10m, 2h, "
        "7d)\nmessage ids: ledger:entry[:partition[:batch]], earliest, latest\n\nexamples:\n"
        "  pubsub topics reset-cursor orders -s billing --time 2h\n"
        "  pubsub topics reset-cursor orders -s billing --message-id 1717171717171:42",
    )
    reset.add_argument("topic", metavar="TOPIC")
    reset.add_argument("--subscription", "-s", metavar="S", required=True, help="the subscription")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--time", "-t", metavar="TIME", help="publish time to reset to (inclusive)")
    to.add_argument("--message-id", "-m", metavar="ID", help="message id to reset to")
    reset.add_argument("--exclude-message", "-e", action="store_true", help="start after the message id")
    reset.add_argument("--force", action="store_true", help="reset even with connected consumers")


def _log(broker: Broker, part: TopicName) -> TopicLog | None:
    log = broker.topic_log(part, create=False)
    return log if log.exists() else None


def _cursor(broker: Broker, part: TopicName, subscription: str) -> Cursor | None:
    return broker.cursor_store(part, subscription).load()[1]


def _missing(subscription: str, name: TopicName) -> SubscriptionNotFound:
    return SubscriptionNotFound(
        f"subscription {subscription!r} does not exist on {name}; create it with "
        f"'pubsub subscriptions create {name} {subscription}'",
        subscription=subscription,
    )


# -- peek ---------------------------------------------------------------------------------------------


def _peek(ctx: Context, args: argparse.Namespace) -> Output:
    name = persistent_topic(args.topic)
    sub = None if args.subscription is None else validate_subscription_name(args.subscription)
    broker = ctx.broker
    found, rows = False, []
    for part in require_topic(broker, name):
        cursor = None if sub is None else _cursor(broker, part, sub)
        log = _log(broker, part)
        found = found or sub is None or cursor is not None
        if log is not None and (sub is None or cursor is not None):
            rows += _messages(log, part, cursor, args.count)
    if not found:
        raise _missing(str(sub), name)
    rows.sort(key=lambda m: (m["publishTime"], m["topic"], m["offset"]))
    rows = rows[: args.count]
    lines = [line for m in rows for line in _describe(m)] or ["no messages"]
    return Output({"topic": str(name), "subscription": sub, "messages": rows}, lines)


def _messages(log: TopicLog, part: TopicName, cursor: Cursor | None, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` live messages at or after the cursor that it has not acknowledged."""
    snap = log.snapshot()
    pos = snap.first_offset if cursor is None else max(cursor.mark_delete, snap.first_offset)
    tables, offsets = [], []
    taken = 0
    while taken < limit and pos < snap.next_offset:
        table, offs = log.read(pos, pos + _READ_ROWS, snapshot=snap)
        pos += _READ_ROWS
        if cursor is not None and len(offs):
            keep = ~cursor.acked.contains_array(offs)
            table, offs = table.filter(pa.array(keep)), offs[keep]
        table, offs = table.slice(0, limit - taken), offs[: limit - taken]
        tables.append(table)
        offsets.append(offs)
        taken += len(offs)
    if not taken:
        return []
    table, offs = pa.concat_tables(tables), np.concatenate(offsets)
    entries, batches = log.ids_for_offsets(offs, snapshot=snap)
    micros = {
        c: table.column(c).cast(pa.int64()).to_pylist() for c in ("publish_time", "event_time", "deliver_at")
    }
    out = []
    for i, row in enumerate(
        table.select(
            [
                "value",
                "key",
                "ordering_key",
                "properties",
                "producer_name",
                "sequence_id",
                "chunk_id",
                "num_chunks",
            ]
        ).to_pylist()
    ):
        msg_id = MessageId(
            partition=part.partition_index,
            ledger_id=snap.ledger_id,
            entry_id=int(entries[i]),
            batch_index=int(batches[i]),
        )
        value = row["value"]
        text = _text(value)
        out.append(
            {
                "topic": str(part),
                "offset": int(offs[i]),
                "messageId": msg_id.to_admin_string(),
                "publishTime": micros["publish_time"][i] // 1000,
                "eventTime": (micros["event_time"][i] or 0) // 1000,
                "deliverAt": None if micros["deliver_at"][i] is None else micros["deliver_at"][i] // 1000,
                "key": row["key"],
                "orderingKey": None
                if row["ordering_key"] is None
                else base64.b64encode(row["ordering_key"]).decode(),
                "properties": dict(row["properties"] or []),
                "producerName": row["producer_name"],
                "sequenceId": row["sequence_id"],
                "redeliveryCount": 0 if cursor is None else cursor.redelivery.get(int(offs[i]), 0),
                "chunk": None if row["num_chunks"] is None else f"{row['chunk_id']}/{row['num_chunks']}",
                "size": None if value is None else len(value),
                "value": None
                if value is None
                else text
                if text is not None
                else base64.b64encode(value).decode(),
                "valueEncoding": None if value is None else "utf-8" if text is not None else "base64",
            }
        )
    return out


def _text(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _describe(m: dict[str, Any]) -> list[str]:
    if m["value"] is None:
        value = "(null: a tombstone)"
    else:
        value = m["value"] if m["valueEncoding"] == "utf-8" else f"base64:{m['value']}"
    props = ", ".join(f"{k}={v}" for k, v in sorted(m["properties"].items()))
    lines = [
        f"--- {m['topic']}  offset {m['offset']}  id {m['messageId']}",
        f"publish time: {iso(m['publishTime'])}  producer: {m['producerName']}  sequence: {m['sequenceId']}",
    ]
    lines += [f"key: {m['key']}"] if m["key"] is not None else []
    lines += [f"properties: {props}"] if props else []
    lines += [f"deliver at: {iso(m['deliverAt'])}"] if m["deliverAt"] is not None else []
    lines += [f"redelivery count: {m['redeliveryCount']}"] if m["redeliveryCount"] else []
    lines += [f"chunk: {m['chunk']}"] if m["chunk"] else []
    return [*lines, f"value ({m['size'] or 0} bytes): {value}"]


# -- skip ---------------------------------------------------------------------------------------------


def next_unacked(cursor: Cursor, start: int, end: int, limit: int | None) -> RangeSet:
    """The first ``limit`` (None: all) offsets in [start, end) the cursor has not acknowledged."""
    out, pos, left = RangeSet(), start, limit
    for s, e in [*cursor.acked.to_json(), (end, end)]:
        if left == 0 or pos >= end:
            break
        if s > pos:
            stop = min(s, end) if left is None else min(s, end, pos + left)
            out.add(pos, stop)
            left = None if left is None else left - (stop - pos)
        pos = max(pos, e)
    return out


def _skip(ctx: Context, args: argparse.Namespace) -> Output:
    name = persistent_topic(args.topic)
    sub = validate_subscription_name(args.subscription)
    broker = ctx.broker
    parts = require_topic(broker, name)
    if len(parts) > 1 and not args.all:
        raise NotAllowedError(
            f"{name} is partitioned: skip N messages on one partition ({parts[0]} ...), or use --all",
            topic=str(name),
        )
    if not any(_cursor(broker, p, sub) for p in parts):
        raise _missing(sub, name)
    results: list[dict[str, Any]] = []
    for part in parts:
        log = _log(broker, part)
        if log is None or _cursor(broker, part, sub) is None:
            continue
        snap, done = log.snapshot(), {"n": 0, "from": 0, "to": 0}

        def fn(cursor: Cursor | None, snap: Any = snap, done: dict[str, int] = done) -> Cursor | None:
            if cursor is None:
                raise _missing(sub, name)
            done["from"] = done["to"] = cursor.mark_delete
            start = max(cursor.mark_delete, snap.first_offset)
            skipped = acknowledge_ranges(cursor, next_unacked(cursor, start, snap.next_offset, args.count))
            done.update(n=skipped, to=cursor.mark_delete)
            return cursor if skipped else None

        broker.cursor_store(part, sub).update(fn)
        results.append(
            {
                "topic": str(part),
                "skipped": done["n"],
                "nextOffsetBefore": done["from"],
                "nextOffsetAfter": done["to"],
            }
        )
    total = sum(r["skipped"] for r in results)
    lines = [f"skipped {total} message(s) of subscription {sub} on {name}"]
    lines += [
        f"  {r['topic']}: {r['skipped']} (cursor {r['nextOffsetBefore']} -> {r['nextOffsetAfter']})"
        for r in results
        if len(results) > 1
    ]
    return Output({"topic": str(name), "subscription": sub, "skipped": total, "partitions": results}, lines)


# -- reset-cursor -------------------------------------------------------------------------------------


def _targets(name: TopicName, parts: list[TopicName], msg_id: MessageId) -> list[TopicName]:
    """The internal topics a message id applies to (its partition field picks one)."""
    if msg_id in (MessageId.earliest, MessageId.latest):
        return parts
    index = msg_id.partition()
    if len(parts) > 1:
        chosen = [p for p in parts if p.partition_index == index]
        if not chosen:
            raise InvalidConfiguration(
                f"message id {msg_id.to_admin_string()} names partition {index}, but "
                f"{name} has partitions 0..{len(parts) - 1}: give ledger:entry:partition"
            )
        return chosen
    if index not in (-1, parts[0].partition_index):
        raise InvalidConfiguration(
            f"message id {msg_id.to_admin_string()} names partition {index}, but {name} is not that partition"
        )
    return parts


def _reset(ctx: Context, args: argparse.Namespace) -> Output:
    name = persistent_topic(args.topic)
    sub = validate_subscription_name(args.subscription)
    msg_id = None if args.message_id is None else MessageId.parse(args.message_id)
    if args.exclude_message and msg_id is None:
        raise UsageError("--exclude-message goes with --message-id")
    broker = ctx.broker
    when = None if args.time is None else time_ms(args.time, now_ms=ctx.now())
    parts = require_topic(broker, name)
    targets = parts if msg_id is None else _targets(name, parts, msg_id)
    cursors = {p: _cursor(broker, p, sub) for p in targets}
    if not any(cursors.values()):
        raise _missing(sub, name)
    now = ctx.now()
    live = sorted({c for cur in cursors.values() if cur for c in cur.live_consumers(now)})
    if live and not args.force:
        raise NotAllowedError(
            f"subscription {sub!r} has connected consumers {live}: they keep their own "
            "read position until they reconnect; close them first, or use --force"
        )
    results: list[dict[str, Any]] = []
    for part, cursor in cursors.items():
        log = _log(broker, part)
        if cursor is None or log is None:
            continue
        if msg_id is None:
            assert when is not None
            target = log.offset_for_publish_time(when)
        else:
            target = log.offset_for_message_id(msg_id, inclusive=not args.exclude_message)
        before: list[int] = []

        def fn(cursor: Cursor | None, target: int = target, before: list[int] = before) -> Cursor | None:
            if cursor is None:
                raise _missing(sub, name)
            before[:] = [cursor.mark_delete]
            cursor.seek(target)
            return cursor

        broker.cursor_store(part, sub).update(fn)
        results.append({"topic": str(part), "nextOffsetBefore": before[0], "nextOffsetAfter": target})
    to = f"time {iso(when)}" if msg_id is None else f"message id {msg_id.to_admin_string()}"
    lines = [f"reset subscription {sub} on {name} to {to}"]
    lines += [f"  {r['topic']}: cursor {r['nextOffsetBefore']} -> {r['nextOffsetAfter']}" for r in results]
    data = {
        "topic": str(name),
        "subscription": sub,
        "time": when,
        "messageId": None if msg_id is None else msg_id.to_admin_string(),
        "partitions": results,
    }
    return Output(data, lines)


__all__ = ["next_unacked", "register"]
