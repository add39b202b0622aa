"""Message TTL: durable subscriptions acknowledge the messages that waited too long.

Pulsar's message expiry (seeds: "Message retention and expiry") moves unacknowledged messages older
than ``messageTTLInSeconds`` to the acknowledged state, "even if the messages are delayed messages and
does not care about when the expected delayed time is" (seeds 3.3, "Work with backlog TTL policy").
A message is expired when ``publish time < now - ttl`` (the official client's ``isExpired``: now is
after publish time + TTL).  0 disables expiry.  TTL deletes nothing: it only acknowledges, and
retention then retires what every subscription has acknowledged.

Per durable cursor, only the live offsets at or after its mark-delete position are examined.  A
segment whose ``pubsub.maxPublishTimeMs`` is before the cutoff expires whole and one whose
``pubsub.minPublishTimeMs`` is at or after it is skipped, both without being read; only segments
that straddle the cutoff have their ``publish_time`` column read, vectorised.  Publish times are not
monotonic across producers, so this is an exact per-message rule rather than a single "expire up to
here" position.

The acknowledgment is one ``CursorStore.update`` per subscription, a pure function of the latest
cursor, so it re-applies cleanly after a lost race and never moves a cursor backwards; consumers
holding a claim on an expired message lose the claim, as with any acknowledgment.

Precedence: broker ``ttlDurationDefaultInSeconds`` < namespace < topic ``messageTTLInSeconds`` <
the explicit ``ttl_seconds`` argument.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from broker_core.broker.broker import Broker
from broker_core.errors import InvalidConfiguration, SubscriptionNotFound
from broker_core.jobs.progress import (
    JobSummary,
    check_flag,
    existing_log,
    now_or,
    resolve_targets,
    run_each,
)
from broker_core.jobs.retention import durable_cursors
from broker_core.log.segment_ref import SegmentRef
from broker_core.log.snapshot import Snapshot
from broker_core.naming import TopicName
from broker_core.subscription.cursor import Cursor
from broker_core.subscription.cursor_store import validate_subscription_name
from broker_core.subscription.ranges import RangeSet
from broker_core.topic.topic_log import TopicLog


@dataclass(frozen=True, slots=True)
class SubscriptionExpiry:
    """What TTL did to one subscription's cursor."""

    subscription: str
    expired_messages: int
    mark_delete_before: int
    mark_delete_after: int


@dataclass(frozen=True, slots=True)
class TtlResult:
    """TTL on one internal topic: the cutoff applied and each subscription's expiry."""

    topic: str
    ttl_seconds: int
    cutoff_ms: int | None
    subscriptions: tuple[SubscriptionExpiry, ...]
    dry_run: bool

    @property
    def expired_messages(self) -> int:
        return sum(s.expired_messages for s in self.subscriptions)

    @property
    def changed(self) -> bool:
        return not self.dry_run and self.expired_messages > 0

    def describe(self) -> str:
        if self.ttl_seconds == 0:
            return "message TTL is off (0)"
        parts = [
            f"{s.subscription}: {s.expired_messages} expired (markDelete {s.mark_delete_before} -> "
            f"{s.mark_delete_after})"
            for s in self.subscriptions
        ]
        return f"TTL {self.ttl_seconds} s, cutoff {self.cutoff_ms}; " + (
            "; ".join(parts) or "no subscriptions"
        )


def publish_times_us(log: TopicLog, seg: SegmentRef) -> np.ndarray:
    """A segment's ``publish_time`` column as int64 microseconds (only that column is read)."""
    column = pq.read_table(log.io.open_input(f"{log.path}/{seg.path}"), columns=["publish_time"]).column(0)
    return column.cast(pa.int64()).to_numpy()


def expired_ranges(log: TopicLog, snap: Snapshot, cursor: Cursor, cutoff_ms: int) -> RangeSet:
    """Offsets the cursor has not acknowledged whose publish time is before ``cutoff_ms``."""
    start = max(cursor.mark_delete, snap.first_offset)
    out = RangeSet()
    for seg in snap.segments[snap.segment_index_for(start) :]:
        if seg.min_publish_ms >= cutoff_ms:
            continue
        lo = max(start, seg.base_offset)
        if seg.max_publish_ms < cutoff_ms:
            out.add(lo, seg.end_offset)
            continue
        old = publish_times_us(log, seg)[lo - seg.base_offset :] < cutoff_ms * 1000
        if not old.any():
            continue
        edges = np.diff(np.concatenate(([0], old.astype(np.int8), [0])))
        for s, e in zip(np.nonzero(edges == 1)[0].tolist(), np.nonzero(edges == -1)[0].tolist(), strict=True):
            out.add(lo + s, lo + e)
    for s, e in cursor.acked.to_json():
        out.remove(s, e)
    return out


def acknowledge_ranges(cursor: Cursor, ranges: RangeSet) -> int:
    """Acknowledge ``ranges`` in ``cursor`` (range-wise, so millions of offsets stay cheap); returns
    how many offsets became acknowledged."""
    before = cursor.mark_delete + cursor.acked.count()
    touched = RangeSet()
    for start, end in ranges.to_json():
        if end <= cursor.mark_delete:
            continue
        start = max(start, cursor.mark_delete)
        touched.add(start, end)
        if start == cursor.mark_delete:
            cursor.ack_cumulative(end - 1)  # moves markDelete and merges the acked ranges behind it
            continue
        cursor.acked.add(start, end)
        for claims in cursor.claims.values():
            claims.remove(start, end)
    if cursor.redelivery and touched:
        cursor.redelivery = {k: v for k, v in cursor.redelivery.items() if k not in touched}
    return cursor.mark_delete + cursor.acked.count() - before


def _commit_expiry(
    broker: Broker, topic: TopicName, subscription: str, ranges: RangeSet
) -> tuple[int, Cursor | None]:
    """Acknowledge ``ranges`` in the latest cursor (re-applied after a lost race; never moves back)."""
    counted = [0]

    def fn(latest: Cursor | None) -> Cursor | None:
        counted[0] = 0 if latest is None else acknowledge_ranges(latest, ranges)
        return latest if counted[0] else None

    after = broker.cursor_store(topic, subscription).update(fn)
    return counted[0], after


def run_ttl(
    broker: Broker,
    topic: str | TopicName,
    *,
    now_ms: int | None = None,
    dry_run: bool = False,
    subscription: str | None = None,
    ttl_seconds: int | None = None,
) -> JobSummary[TtlResult]:
    """Acknowledge, in every durable subscription, the unacknowledged messages older than the TTL.

    Args:
        broker: the storage root's broker.
        topic: a topic (all its partitions) or a namespace ``tenant/namespace``.
        now_ms: "now" (defaults to the wall clock).
        dry_run: count what would expire; change nothing.
        subscription: only this subscription (it must exist on the topic).
        ttl_seconds: override the policies (0: expiry off).

    Raises:
        TopicNotFound, NamespaceNotFound, SubscriptionNotFound: nothing to expire in (nothing created).
        InvalidConfiguration: a bad argument (nothing changed).
    """
    check_flag(dry_run, "dry_run")
    now = now_or(now_ms)
    if subscription is not None:
        validate_subscription_name(subscription)
    if ttl_seconds is not None and (
        isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int) or ttl_seconds < 0
    ):
        raise InvalidConfiguration(
            f"argument 'ttl_seconds' must be an int >= 0 (0: off), got {ttl_seconds!r}",
            argument="ttl_seconds",
        )
    target, partitions = resolve_targets(broker, topic)
    cursors = {p: durable_cursors(broker, p) for p in partitions}
    if subscription is not None and not any(subscription in c for c in cursors.values()):
        raise SubscriptionNotFound(
            f"subscription {subscription!r} does not exist on {target}",
            subscription=subscription,
            topic=target,
        )

    def each(part: TopicName) -> TtlResult:
        policy = broker.policies.effective(part, fresh=True).message_ttl_in_seconds
        chosen = {n: c for n, c in cursors[part].items() if subscription is None or n == subscription}
        ttl = policy if ttl_seconds is None else ttl_seconds
        return _expire(broker, part, chosen, ttl=ttl, now_ms=now, dry_run=dry_run)

    return run_each("ttl", target, partitions, each, dry_run=dry_run)


def _expire(
    broker: Broker, topic: TopicName, cursors: dict[str, Cursor], *, ttl: int, now_ms: int, dry_run: bool
) -> TtlResult:
    log = existing_log(broker, topic)
    if ttl == 0 or log is None:
        return TtlResult(topic=str(topic), ttl_seconds=ttl, cutoff_ms=None, subscriptions=(), dry_run=dry_run)
    cutoff = now_ms - ttl * 1000
    snap = log.snapshot()
    out: list[SubscriptionExpiry] = []
    for name in sorted(cursors):
        ranges = expired_ranges(log, snap, cursors[name], cutoff)
        before = cursors[name].mark_delete
        if dry_run or not ranges:
            preview = Cursor.from_json(cursors[name].to_json())
            count = acknowledge_ranges(preview, ranges)
            out.append(SubscriptionExpiry(name, count, before, preview.mark_delete))
            continue
        count, after = _commit_expiry(broker, topic, name, ranges)
        out.append(SubscriptionExpiry(name, count, before, after.mark_delete if after else before))
    return TtlResult(
        topic=str(topic), ttl_seconds=ttl, cutoff_ms=cutoff, subscriptions=tuple(out), dry_run=dry_run
    )


__all__ = [
    "SubscriptionExpiry",
    "TtlResult",
    "acknowledge_ranges",
    "expired_ranges",
    "publish_times_us",
    "run_ttl",
]
