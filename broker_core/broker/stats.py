"""Topic and subscription statistics as plain data, in the spirit of Pulsar's topic stats.

Everything is computed from storage (logs, cursors, the producer registry), so any process can ask;
numbers are as of the moment of the call.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import numpy as np

from broker_core.broker.broker import Broker
from broker_core.broker.stats_fields import backlog_bytes, backlog_messages, first_unacked, in_rates, publish_time_ms
from broker_core.log.snapshot import Snapshot
from broker_core.naming import TopicName
from broker_core.producer.registry import ProducerRegistry
from broker_core.subscription import activity
from broker_core.subscription.cursor import ConsumerType, Cursor
from broker_core.subscription.cursor_store import list_subscriptions
from broker_core.subscription.dispatch import claim_owners, cursor_selector


def subscription_stats(broker: Broker, topic: TopicName, subscription: str, *, now_ms: int) -> dict[str, Any]:
    """Backlog, unacked and per-consumer state of one subscription on one internal topic."""
    log = broker.topic_log(topic, create=False)
    snap = log.snapshot()
    _, doc = broker.cursor_store(topic, subscription).load_document()
    if doc is None:
        return {"exists": False}
    cursor = Cursor.from_json(doc)
    backlog = backlog_messages(snap, cursor)
    unacked_total = sum(rs.count() for rs in cursor.claims.values())
    consumers: list[dict[str, Any]] = []
    ranges: dict[str, list[tuple[int, int]]] = {}
    draining: dict[str, list[int]] = {}
    live = cursor.live_consumers(now_ms)
    if cursor.sub_type == ConsumerType.KeyShared and live:
        selector, names = cursor_selector(cursor, now_ms)
        ranges = selector.ranges()
        held = [(name, rs) for name, rs in cursor.claims.items() if rs]
        if held:
            offsets = np.fromiter((o for _, rs in held for o in rs.offsets()), dtype=np.int64)
            if len(offsets):
                offsets.sort()
                table, read_offsets = log.read(int(offsets[0]), int(offsets[-1]) + 1, snapshot=snap)
                index = np.searchsorted(read_offsets, offsets)
                index = index[index < len(read_offsets)]
                hashes = table.column("sticky_key_hash").to_numpy(zero_copy_only=False)[index].astype(np.int64)
                owners_now = selector.owner_of_hashes(hashes)
                sticky = selector.sticky_hashes(hashes)  # draining hashes in the selector's own range
                claimers, claim_names = claim_owners(cursor, read_offsets[index])
                for row, claimer in enumerate(claimers.tolist()):
                    if claimer < 0:
                        continue
                    name = claim_names[claimer]
                    owner = names[owners_now[row]] if owners_now[row] >= 0 else None
                    if owner != name:
                        draining.setdefault(name, []).append(int(sticky[row]))
    for name, entry in sorted(live.items(), key=lambda kv: kv[1].join_order):
        claims = cursor.claims.get(name)
        consumers.append({
            "consumerName": name,
            "priorityLevel": entry.priority_level,
            "leaseExpiresMs": entry.lease_expires_ms,
            "unackedMessages": claims.count() if claims else 0,
            "keyHashRanges": [list(r) for r in ranges.get(name, [])],
            "drainingHashes": sorted(set(draining.get(name, []))),
        })
    first = first_unacked(snap, cursor)
    earliest = publish_time_ms(log, snap, first) if backlog else None
    recent = activity.read(doc, now_ms)
    stored = sum(s.size_bytes for s in snap.segments)
    live_msgs = snap.next_offset - snap.first_offset
    return {
        "exists": True,
        "type": cursor.sub_type.name,
        # Pulsar's fields (``stats_fields``, D160/D161): rates per second over the last minute
        "msgRateOut": recent.msg_rate_out,
        "msgThroughputOut": recent.msg_rate_out * (stored / live_msgs if live_msgs else 0.0),
        "msgRateRedeliver": recent.msg_rate_redeliver,
        "backlogSize": backlog_bytes(snap, first, backlog),
        "earliestMsgPublishTimeInBacklog": earliest or 0,
        "lastAckedTimestamp": recent.last_acked_ms,
        "lastConsumedTimestamp": recent.last_consumed_ms,
        "markDeletePosition": cursor.mark_delete - 1,
        "msgBacklog": backlog,
        "unackedMessages": unacked_total,
        "individuallyAckedMessages": cursor.acked.count(),
        "redeliveredMessages": len(cursor.redelivery),
        "maxRedeliveryCount": max(cursor.redelivery.values(), default=0),
        "consumers": consumers,
        "keySharedMode": cursor.key_shared.get("mode") if cursor.sub_type == ConsumerType.KeyShared else None,
    }


def topic_stats(broker: Broker, topic: str | TopicName, *, now_ms: int | None = None) -> dict[str, Any]:
    """Stats of a topic: per internal topic, its size, publishers and subscriptions."""
    name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    partitions = broker.partitions(name, auto_create=False)
    out: dict[str, Any] = {"topic": str(name), "partitions": {}}
    totals: dict[str, Any] = {"msgCount": 0, "storageSize": 0, "msgBacklog": {}}
    for part in partitions:
        log = broker.topic_log(part, create=False)
        if not log.exists():  # a partition nobody has written to or subscribed on yet
            out["partitions"][str(part)] = {**EMPTY_PULSAR_FIELDS, "firstOffset": 0, "nextOffset": 0, "msgCount": 0,
                                            "storageSize": 0, "segments": 0, "logVersion": -1, "publishers": [],
                                            "subscriptions": {}}
            continue
        snap = log.snapshot()
        path = "/".join(part.relative_path())
        subs = {sub: subscription_stats(broker, part, sub, now_ms=now) for sub in list_subscriptions(broker.io, path)}
        subs = {k: v for k, v in subs.items() if v.get("exists")}
        size = sum(s.size_bytes for s in snap.segments)
        publishers = ProducerRegistry(broker.io, path).live_producers(now_ms=now)
        out["partitions"][str(part)] = {
            **pulsar_topic_fields(snap, subs, now_ms=now),
            "firstOffset": snap.first_offset,
            "nextOffset": snap.next_offset,
            "msgCount": snap.next_offset - snap.first_offset,
            "storageSize": size,
            "segments": len(snap.segments),
            "logVersion": snap.version,
            "publishers": [{"producerName": n, "accessMode": m} for n, m in sorted(publishers.items())],
            "subscriptions": subs,
        }
        totals["msgCount"] += snap.next_offset - snap.first_offset
        totals["storageSize"] += size
        for sub, st in subs.items():
            totals["msgBacklog"][sub] = totals["msgBacklog"].get(sub, 0) + st["msgBacklog"]
    out.update(totals)
    out.update(sum_pulsar_fields(out["partitions"].values(), now_ms=now))
    return out


EMPTY_PULSAR_FIELDS: dict[str, Any] = {
    "msgRateIn": 0.0, "msgRateOut": 0.0, "msgThroughputIn": 0.0, "msgThroughputOut": 0.0, "msgInCounter": 0,
    "backlogSize": 0, "earliestMsgPublishTimeInBacklogs": 0, "oldestBacklogMessageAgeSeconds": 0,
    "lastPublishTimeStamp": 0,
}
"""Pulsar's topic-level fields of an internal topic with no log yet."""


def pulsar_topic_fields(snap: Snapshot, subs: dict[str, dict[str, Any]], *, now_ms: int) -> dict[str, Any]:
    """Pulsar's topic-level fields of one internal topic from its snapshot and subscriptions' stats.

    Out-rates add up over subscriptions (as Pulsar's do); ``backlogSize`` and the oldest backlog
    message are the slowest subscription's (the bytes storage must keep for it).
    """
    rates = in_rates(snap, now_ms)
    earliest = min((st["earliestMsgPublishTimeInBacklog"] for st in subs.values()
                    if st["earliestMsgPublishTimeInBacklog"]), default=0)
    return {
        "msgRateIn": rates.msg_rate_in,
        "msgRateOut": sum(st["msgRateOut"] for st in subs.values()),
        "msgThroughputIn": rates.msg_throughput_in,
        "msgThroughputOut": sum(st["msgThroughputOut"] for st in subs.values()),
        "msgInCounter": snap.next_offset,
        "backlogSize": max((st["backlogSize"] for st in subs.values()), default=0),
        "earliestMsgPublishTimeInBacklogs": earliest,
        "oldestBacklogMessageAgeSeconds": max(0, now_ms - earliest) // 1000 if earliest else 0,
        "lastPublishTimeStamp": rates.last_publish_ms,
    }


def sum_pulsar_fields(partitions: Iterable[dict[str, Any]], *, now_ms: int) -> dict[str, Any]:
    """A partitioned topic's Pulsar fields from its partitions' (sums; oldest and newest times)."""
    parts = list(partitions)
    out: dict[str, Any] = {key: sum(p.get(key, 0) for p in parts)
                           for key in ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut",
                                       "msgInCounter", "backlogSize")}
    earliest = min((p["earliestMsgPublishTimeInBacklogs"] for p in parts
                    if p.get("earliestMsgPublishTimeInBacklogs")), default=0)
    out["earliestMsgPublishTimeInBacklogs"] = earliest
    out["oldestBacklogMessageAgeSeconds"] = max(0, now_ms - earliest) // 1000 if earliest else 0
    out["lastPublishTimeStamp"] = max((p.get("lastPublishTimeStamp", 0) for p in parts), default=0)
    return out


__all__ = ["EMPTY_PULSAR_FIELDS", "pulsar_topic_fields", "subscription_stats", "sum_pulsar_fields", "topic_stats"]
