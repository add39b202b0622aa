"""Backlog quotas: how far the slowest durable subscription lags, and what happens when it lags too far.

The backlog of an internal topic is what its slowest durable subscription has not acknowledged,
from that subscription's first unacknowledged offset to the end of the log.  Its size in bytes is
estimated from segment file sizes, pro rata by rows for the segment the position falls in (Pulsar
estimates from ledger sizes the same way); its age is ``now`` minus the publish time of that first
unacknowledged message.  Without durable subscriptions there is no backlog.

Limits (``backlogQuotaLimitSize`` bytes, ``backlogQuotaLimitTime`` seconds; -1 = no limit) and the
policy (``backlogQuotaPolicy``) follow the usual precedence: broker config < namespace < topic.
The quota is exceeded when the size is above its limit or the age is above its limit.

- ``producer_request_hold``: a producer's send waits, re-checking, until the backlog is within quota
  or the send timeout runs out (``ProducerBlockedQuotaExceededError``, a ``Timeout``).  With a send
  timeout of 0 it waits as long as it takes.
- ``producer_exception``: the send fails at once with ``ProducerBlockedQuotaExceededException``.
- ``consumer_backlog_eviction``: the slowest subscriptions are moved forward (their messages are
  acknowledged, as Pulsar's eviction skips them) by Pulsar 4.x's rules (``evict_partition``), then
  the send goes on.  ``enforce_backlog_quota`` does the same as a job.

Delayed messages count as backlog until they are delivered and acknowledged, so a long delay can
trip the quota (seeds 3.3, "Work with backlog quota policy").  A producer checks before every
commit (``jobs.backlog_guard``), with the policies and the status each cached for at most a second.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from broker_core.broker.broker import Broker
from broker_core.jobs.progress import (
    JobSummary,
    check_flag,
    existing_log,
    now_or,
    resolve_targets,
    run_each,
)
from broker_core.jobs.retention import durable_cursors, first_unacked
from broker_core.jobs.ttl import publish_times_us
from broker_core.log.snapshot import Snapshot
from broker_core.naming import TopicName
from broker_core.subscription.cursor import Cursor
from broker_core.topic.policies import EffectivePolicies
from broker_core.topic.topic_log import TopicLog

EVICTION = "consumer_backlog_eviction"
HOLD = "producer_request_hold"
EXCEPTION = "producer_exception"


@dataclass(frozen=True, slots=True)
class BacklogStatus:
    """The backlog of one internal topic against its quota (sizes in bytes, ages in ms)."""

    topic: str
    backlog_bytes: int
    backlog_messages: int
    oldest_unacked_offset: int | None
    oldest_unacked_age_ms: int | None
    slowest_subscription: str | None
    limit_bytes: int
    limit_seconds: int
    policy: str

    @property
    def size_exceeded(self) -> bool:
        return self.limit_bytes >= 0 and self.backlog_bytes > self.limit_bytes

    @property
    def time_exceeded(self) -> bool:
        age = self.oldest_unacked_age_ms
        return self.limit_seconds >= 0 and age is not None and age > self.limit_seconds * 1000

    @property
    def exceeded(self) -> bool:
        return self.size_exceeded or self.time_exceeded

    @property
    def changed(self) -> bool:
        return False

    def describe(self) -> str:
        state = "OVER QUOTA" if self.exceeded else "within quota"
        return (f"{state}: {self.backlog_bytes} bytes / limit {self.limit_bytes}, oldest unacked age "
                f"{self.oldest_unacked_age_ms} ms / limit {self.limit_seconds} s, slowest "
                f"{self.slowest_subscription!r}, policy {self.policy}")


@dataclass(frozen=True, slots=True)
class BacklogEviction:
    """What eviction did on one internal topic: the position the slow cursors were moved to."""

    topic: str
    before: BacklogStatus
    target_offset: int | None  # the furthest position a cursor was moved to (None: none moved)
    moved: tuple[tuple[str, int, int], ...]  # (subscription, from, to)
    dry_run: bool
    reason: str

    @property
    def changed(self) -> bool:
        return not self.dry_run and bool(self.moved)

    def describe(self) -> str:
        moves = ", ".join(f"{s}: {a} -> {b}" for s, a, b in self.moved) or "no cursor moved"
        return f"{self.reason}; {moves}"


# --- measuring -------------------------------------------------------------------------------------


def bytes_from(snap: Snapshot, offset: int) -> int:
    """Estimated bytes of the live messages at or after ``offset`` (pro rata inside a segment)."""
    total = 0
    for seg in snap.segments[snap.segment_index_for(offset) :]:
        rows = seg.end_offset - max(offset, seg.base_offset)
        total += seg.size_bytes if rows == seg.num_records else seg.size_bytes * rows // seg.num_records
    return total


def _publish_ms(log: TopicLog, snap: Snapshot, offset: int) -> int:
    seg = snap.segments[snap.segment_index_for(offset)]
    return int(publish_times_us(log, seg)[offset - seg.base_offset]) // 1000


def measure(log: TopicLog | None, snap: Snapshot | None, topic: TopicName, cursors: dict[str, Cursor],
            policies: EffectivePolicies, now_ms: int) -> BacklogStatus:
    """The backlog status of an internal topic from already loaded state (no log: no backlog)."""
    floors = {name: first_unacked(c, snap.first_offset) for name, c in cursors.items()} if snap else {}
    live = {name: pos for name, pos in floors.items() if snap and pos < snap.next_offset}
    slowest = min(sorted(live), key=live.__getitem__) if live else None
    offset = live[slowest] if slowest is not None else None
    if log is None or snap is None or offset is None:
        return BacklogStatus(str(topic), 0, 0, None, None, None, policies.backlog_quota_limit_size,
                             policies.backlog_quota_limit_time, policies.backlog_quota_policy)
    return BacklogStatus(
        topic=str(topic),
        backlog_bytes=bytes_from(snap, offset),
        backlog_messages=max(0, snap.next_offset - offset - cursors[str(slowest)].acked.count()),
        oldest_unacked_offset=offset,
        oldest_unacked_age_ms=now_ms - _publish_ms(log, snap, offset),
        slowest_subscription=slowest,
        limit_bytes=policies.backlog_quota_limit_size,
        limit_seconds=policies.backlog_quota_limit_time,
        policy=policies.backlog_quota_policy,
    )


def partition_status(broker: Broker, topic: TopicName, *, now_ms: int,
                     policies: EffectivePolicies | None = None) -> BacklogStatus:
    """The backlog status of one internal topic (reads the latest log, cursors and, unless given,
    policies)."""
    policies = policies or broker.policies.effective(topic, fresh=True)
    log = existing_log(broker, topic)
    snap = log.snapshot() if log is not None else None
    return measure(log, snap, topic, durable_cursors(broker, topic) if log else {}, policies, now_ms)


def backlog_status(broker: Broker, topic: str | TopicName, *,
                   now_ms: int | None = None) -> JobSummary[BacklogStatus]:
    """The backlog of each internal topic of a topic (or namespace) against its quota; changes nothing.

    Raises:
        TopicNotFound, NamespaceNotFound: the target does not exist.
    """
    now = now_or(now_ms)
    target, partitions = resolve_targets(broker, topic)
    return run_each("backlog-status", target, partitions,
                    lambda part: partition_status(broker, part, now_ms=now), dry_run=True)


# --- eviction --------------------------------------------------------------------------------------


SIZE_REDUCTION = 0.9
"""Eviction brings a size backlog down to 90% of its limit, and the precise time check expires
messages older than 90% of the time limit (Pulsar's reduction factor)."""


class _Eviction:
    """Cursor moves worked out on in-memory copies, so a dry run and a real run take the same path."""

    def __init__(self, log: TopicLog, snap: Snapshot, topic: TopicName, cursors: dict[str, Cursor],
                 policies: EffectivePolicies, now_ms: int) -> None:
        self.log, self.snap, self.topic, self.cursors = log, snap, topic, cursors
        self.policies, self.now_ms = policies, now_ms
        self.moved: dict[str, tuple[int, int]] = {}  # subscription -> (mark-delete before, after)

    def status(self) -> BacklogStatus:
        return measure(self.log, self.snap, self.topic, self.cursors, self.policies, self.now_ms)

    def advance(self, name: str, to: int) -> None:
        cursor = self.cursors[name]
        before = self.moved.get(name, (cursor.mark_delete, 0))[0]
        cursor.ack_cumulative(min(to, self.snap.next_offset) - 1)  # eviction acknowledges what it skips
        self.moved[name] = (before, cursor.mark_delete)

    def by_size(self, limit_bytes: int) -> None:
        """Skip ``int((backlog - target) / backlog * entries)`` on the slowest cursor, again and again,
        until the backlog is at most 90% of the limit, a skip would be 0, or the same cursor is slowest
        twice in a row."""
        target = SIZE_REDUCTION * limit_bytes
        previous = None
        while True:
            status = self.status()
            slowest, backlog = status.slowest_subscription, status.backlog_bytes
            if slowest is None or backlog <= target or slowest == previous or status.oldest_unacked_offset is None:
                return
            skip = int((backlog - target) / backlog * status.backlog_messages)
            if skip == 0:
                return
            self.advance(slowest, status.oldest_unacked_offset + skip)
            previous = slowest

    def by_whole_segments(self, limit_seconds: int) -> None:
        """Move the slowest cursor past each whole segment whose newest message is older than the
        limit, as long as the slowest cursor sits in such a segment."""
        while True:
            status = self.status()
            if status.slowest_subscription is None or status.oldest_unacked_offset is None:
                return
            seg = self.snap.segments[self.snap.segment_index_for(status.oldest_unacked_offset)]
            if self.now_ms - seg.max_publish_ms <= limit_seconds * 1000:
                return
            self.advance(status.slowest_subscription, seg.end_offset)

    def by_age(self, limit_seconds: int) -> None:
        """Pulsar's precise check: every subscription expires the messages older than
        ``int(0.9 * limit)`` seconds."""
        cutoff = self.now_ms - int(SIZE_REDUCTION * limit_seconds) * 1000
        for name in sorted(self.cursors):
            start = first_unacked(self.cursors[name], self.snap.first_offset)
            if start < self.snap.next_offset:
                fresh = _time_target(self.log, self.snap, start, cutoff)
                if fresh > start:
                    self.advance(name, fresh)


def _time_target(log: TopicLog, snap: Snapshot, start: int, cutoff_ms: int) -> int:
    """The first offset at or after ``start`` published at or after ``cutoff_ms`` (end if none)."""
    for seg in snap.segments[snap.segment_index_for(start) :]:
        if seg.max_publish_ms < cutoff_ms:
            continue
        lo = max(start, seg.base_offset)
        fresh = np.nonzero(publish_times_us(log, seg)[lo - seg.base_offset :] >= cutoff_ms * 1000)[0]
        if len(fresh):
            return lo + int(fresh[0])
    return snap.next_offset


def evict_partition(broker: Broker, topic: TopicName, *, now_ms: int, dry_run: bool) -> BacklogEviction:
    """Apply ``consumer_backlog_eviction`` to one internal topic (Pulsar 4.x's rules).

    A size quota evicts towards 90% of the limit, slowest cursor first (``_Eviction.by_size``).  A time
    quota, with ``preciseTimeBasedBacklogQuotaCheck``, expires messages older than 90% of the limit on
    every subscription; otherwise it moves the slowest cursor past whole segments older than the limit.
    """
    policies = broker.policies.effective(topic, fresh=True)
    log = existing_log(broker, topic)
    snap = log.snapshot() if log is not None else None
    cursors = durable_cursors(broker, topic) if log is not None else {}
    status = measure(log, snap, topic, cursors, policies, now_ms)
    if log is None or snap is None or policies.backlog_quota_policy != EVICTION or not status.exceeded:
        policy = policies.backlog_quota_policy
        why = "within quota" if not status.exceeded else f"policy is {policy}, not {EVICTION}"
        return BacklogEviction(str(topic), status, None, (), dry_run, why)
    plan = _Eviction(log, snap, topic, cursors, policies, now_ms)
    if status.size_exceeded:
        plan.by_size(status.limit_bytes)
    if plan.status().time_exceeded:
        if broker.config.precise_time_based_backlog_quota_check:
            plan.by_age(status.limit_seconds)
        else:
            plan.by_whole_segments(status.limit_seconds)
    moved: list[tuple[str, int, int]] = []
    for name, (before, after) in sorted(plan.moved.items()):
        if after <= before:
            continue
        if dry_run:
            moved.append((name, before, after))
            continue
        move = _move_cursor(broker, topic, name, after)
        if move is not None:
            moved.append((name, *move))
    furthest = max((after for _, _, after in moved), default=None)
    reason = f"evicted up to offset {furthest}" if furthest is not None else "nothing could be evicted"
    return BacklogEviction(str(topic), status, furthest, tuple(moved), dry_run, reason)


def _move_cursor(broker: Broker, topic: TopicName, subscription: str, target: int) -> tuple[int, int] | None:
    """Acknowledge everything below ``target`` in the latest cursor; (from, to) or None if it was there."""
    before: list[int] = []

    def fn(latest: Cursor | None) -> Cursor | None:
        before[:] = []
        if latest is None or latest.mark_delete >= target:
            return None
        before.append(latest.mark_delete)
        latest.ack_cumulative(target - 1)  # eviction acknowledges what it skips (never moves back)
        return latest

    after = broker.cursor_store(topic, subscription).update(fn)
    return (before[0], after.mark_delete) if before and after is not None else None


def enforce_backlog_quota(broker: Broker, topic: str | TopicName, *, now_ms: int | None = None,
                          dry_run: bool = False) -> JobSummary[BacklogEviction]:
    """Under ``consumer_backlog_eviction``, move every subscription whose backlog breaks the quota
    forward until it fits; under the producer-side policies, only report.

    Raises:
        TopicNotFound, NamespaceNotFound: the target does not exist (nothing created).
        InvalidConfiguration: a bad argument.
    """
    check_flag(dry_run, "dry_run")
    now = now_or(now_ms)
    target, partitions = resolve_targets(broker, topic)
    return run_each("backlog-eviction", target, partitions,
                    lambda part: evict_partition(broker, part, now_ms=now, dry_run=dry_run), dry_run=dry_run)


__all__ = [
    "BacklogEviction",
    "BacklogStatus",
    "backlog_status",
    "bytes_from",
    "enforce_backlog_quota",
    "evict_partition",
    "measure",
    "partition_status",
]
