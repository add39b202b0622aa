"""Retention: retire whole segments from the front of an internal topic.

Pulsar deletes a topic's front ledgers once every durable subscription has acknowledged them and the
retention policy no longer keeps them (seeds: 3.3 "Message retention and expiry"; "a ledger is deleted
... Pulsar will delete the front ledgers of a topic but will not delete ledgers from the middle").
Here a segment plays the ledger, and "deleting" is a Delta ``remove`` committed to the log: the file
stays until ``vacuum`` deletes it after a minimum age, so readers holding an older snapshot finish.

The rules, for the front-most segment first, stopping at the first segment that must stay:

1. **Acknowledged by every durable subscription.** A segment goes only if each durable cursor has
   acknowledged every message in it: the cursor's first unacknowledged live offset (its mark-delete
   position, moved past individually acknowledged ranges that start there) is at or after the
   segment's end.  Individually acknowledged messages further on do not count, because only the
   front may go.  Delayed messages not yet delivered are unacknowledged, so a long delay holds
   everything after it (seeds 3.3, "Work with retention policy").  Readers are not registered and
   never hold data back (seeds 3.3, "Reader's subscription mode ... does not prevent data in a topic
   from being deleted").
2. **No durable subscription at all:** every message counts as acknowledged and the retention policy
   alone decides (seeds 3.3: "messages of a topic without any durable subscriptions are marked as
   deleted").  With the default policy (0 minutes, 0 MB) that empties the topic, as in Pulsar; keep
   data for readers with a retention policy or a durable subscription.
3. **Retention policy** (``retentionTimeInMinutes``, ``retentionSizeInMB``; -1 = unlimited, 0 = keep
   nothing): an acknowledged segment goes when it is older than the time limit **or** when the topic
   without it would still hold at least the size limit, exactly Pulsar's managed-ledger trimming
   (retention is "based on both a size limit and a time limit"; a message is not retained once
   either limit is reached).  A segment's age is ``now - pubsub.maxPublishTimeMs`` (the publish time
   of its newest message: the moment its "ledger" was full); the size is the total size of the
   topic's live segments (acknowledged or not), as Pulsar counts it.  ``0`` beside a positive value
   is refused, as ``pulsar-admin`` refuses it: set the other limit to -1 or both to 0.

Precedence: broker config < namespace policies < topic policies < the explicit keyword arguments.

Every removal is one put-if-absent commit built against the latest log state, re-reading the cursors
on every attempt, so a lost race re-validates and a kill leaves either nothing or the whole commit.
The commit records the new first offset (``commitInfo.operationParameters.firstOffset``) and
re-states the offset counters, so offsets and entry ids are never reused even when every segment is
removed.  A subscription created or reset (seek) in the instant between reading the cursors and the
commit behaves as if it had happened just after the commit: it starts at the new first offset.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from broker_core.broker.broker import Broker
from broker_core.broker.tenancy import topic_dir
from broker_core.errors import InvalidConfiguration
from broker_core.jobs.progress import (
    JobSummary,
    check_flag,
    existing_log,
    now_or,
    resolve_targets,
    run_each,
)
from broker_core.log.actions import Action, Remove, Txn
from broker_core.log.segment_ref import SegmentRef
from broker_core.log.snapshot import TXN_NEXT_ENTRY_ID, TXN_NEXT_OFFSET, Snapshot
from broker_core.log.transaction_log import NothingToCommit
from broker_core.naming import TopicName
from broker_core.subscription.cursor import Cursor
from broker_core.subscription.cursor_store import list_subscriptions

MB = 1024 * 1024
OPERATION = "RETENTION"


@dataclass(frozen=True, slots=True)
class RetentionLimits:
    """The retention policy in force: minutes and megabytes of acknowledged data kept (-1: no limit)."""

    time_in_minutes: int
    size_in_mb: int

    def __post_init__(self) -> None:
        for name, value in (
            ("retentionTimeInMinutes", self.time_in_minutes),
            ("retentionSizeInMB", self.size_in_mb),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < -1:
                raise InvalidConfiguration(
                    f"{name} must be an int >= -1 (-1: no limit), got {value!r}", key=name
                )
        if (self.time_in_minutes == 0) != (self.size_in_mb == 0):
            raise InvalidConfiguration(
                f"retention policy retentionTimeInMinutes={self.time_in_minutes}, "
                f"retentionSizeInMB={self.size_in_mb} is invalid: a limit of 0 beside a non-zero one is "
                "contradictory (Pulsar refuses it); set both to 0 (keep nothing), or the other one to -1 "
                "(no limit), at the same policy level",
                key="retentionTimeInMinutes" if self.time_in_minutes == 0 else "retentionSizeInMB",
            )

    def keeps(self, *, age_ms: int, size_after_bytes: int) -> bool:
        """Whether an acknowledged segment stays: neither older than the time limit nor needed to
        keep the topic at the size limit."""
        expired = self.time_in_minutes >= 0 and age_ms > self.time_in_minutes * 60_000
        over_size = self.size_in_mb >= 0 and size_after_bytes >= self.size_in_mb * MB
        return not (expired or over_size)


@dataclass(frozen=True, slots=True)
class RetentionResult:
    """What retention did (or, in a dry run, would do) to one internal topic.

    Attributes:
        topic: the internal topic.
        removed_paths: segments retired, front first.
        removed_messages, removed_bytes: their messages and file bytes.
        first_offset_before, first_offset: the first live offset before and after.
        reason: why retention stopped where it did.
        version: the log version of the ``remove`` commit (None when nothing was committed).
    """

    topic: str
    removed_paths: tuple[str, ...]
    removed_messages: int
    removed_bytes: int
    first_offset_before: int
    first_offset: int
    reason: str
    version: int | None = None

    @property
    def changed(self) -> bool:
        return self.version is not None

    def describe(self) -> str:
        verb = "removed" if self.changed else "would remove" if self.removed_paths else "removed"
        return (
            f"{verb} {len(self.removed_paths)} segment(s), {self.removed_messages} message(s), "
            f"{self.removed_bytes} bytes; first offset {self.first_offset_before} -> {self.first_offset}; "
            f"{self.reason}"
        )


# --- the decision ----------------------------------------------------------------------------------


def first_unacked(cursor: Cursor, first_offset: int) -> int:
    """The lowest live offset ``cursor`` has not acknowledged (its mark-delete position moved past the
    individually acknowledged range that starts there, if any)."""
    pos = max(cursor.mark_delete, first_offset)
    for start, end in cursor.acked.to_json():
        if start > pos:
            break
        pos = max(pos, end)
    return pos


def durable_cursors(broker: Broker, topic: TopicName) -> dict[str, Cursor]:
    """Every durable subscription's cursor on an internal topic (deleted ones excluded)."""
    out: dict[str, Cursor] = {}
    for name in list_subscriptions(broker.io, topic_dir(topic)):
        _, cursor = broker.cursor_store(topic, name).load()
        if cursor is not None:
            out[name] = cursor
    return out


def ack_floor(cursors: dict[str, Cursor], first_offset: int) -> tuple[int | None, str | None]:
    """The offset below which every durable subscription acknowledged everything, and the slowest
    subscription; (None, None) without durable subscriptions."""
    floors = {name: first_unacked(c, first_offset) for name, c in cursors.items()}
    if not floors:
        return None, None
    slowest = min(sorted(floors), key=floors.__getitem__)
    return floors[slowest], slowest


def plan_removal(
    segments: Sequence[SegmentRef],
    *,
    acked_below: int | None,
    slowest: str | None,
    limits: RetentionLimits,
    now_ms: int,
) -> tuple[int, str]:
    """How many front segments go, and why the next one stays (a pure function, see the module doc)."""
    total = sum(seg.size_bytes for seg in segments)
    removed = 0
    for index, seg in enumerate(segments):
        if acked_below is not None and seg.end_offset > acked_below:
            return index, (
                f"offset {max(acked_below, seg.base_offset)} is not acknowledged by subscription {slowest!r}"
            )
        removed += seg.size_bytes
        if limits.keeps(age_ms=now_ms - seg.max_publish_ms, size_after_bytes=total - removed):
            return index, (
                f"the retention policy ({limits.time_in_minutes} min, {limits.size_in_mb} MB) keeps "
                f"offsets from {seg.base_offset}"
            )
    return len(segments), "every segment is acknowledged and outside the retention policy"


def effective_limits(
    broker: Broker, topic: TopicName, *, time_in_minutes: int | None, size_in_mb: int | None
) -> RetentionLimits:
    """Broker config < namespace < topic policies < explicit arguments."""
    policies = broker.policies.effective(topic, fresh=True)
    return RetentionLimits(
        time_in_minutes=policies.retention_time_in_minutes if time_in_minutes is None else time_in_minutes,
        size_in_mb=policies.retention_size_in_mb if size_in_mb is None else size_in_mb,
    )


# --- the job ---------------------------------------------------------------------------------------


def run_retention(
    broker: Broker,
    topic: str | TopicName,
    *,
    dry_run: bool = False,
    now_ms: int | None = None,
    retention_time_in_minutes: int | None = None,
    retention_size_in_mb: int | None = None,
) -> JobSummary[RetentionResult]:
    """Retire the front segments of each internal topic that every durable subscription acknowledged
    and the retention policy no longer keeps (see the module docstring for the rules).

    Args:
        broker: the storage root's broker.
        topic: a topic (all its partitions) or a namespace ``tenant/namespace`` (all its persistent topics).
        dry_run: plan only; commit nothing.
        now_ms: "now" for the time limit (defaults to the wall clock).
        retention_time_in_minutes, retention_size_in_mb: override the policies (-1: no limit).

    Returns:
        One ``RetentionResult`` per internal topic.

    Raises:
        TopicNotFound, NamespaceNotFound: the target does not exist (nothing is created).
        InvalidConfiguration: a bad argument or a contradictory retention policy (nothing changed).
    """
    check_flag(dry_run, "dry_run")
    now = now_or(now_ms)
    target, partitions = resolve_targets(broker, topic)
    limits = {
        p: effective_limits(
            broker, p, time_in_minutes=retention_time_in_minutes, size_in_mb=retention_size_in_mb
        )
        for p in partitions
    }  # validate all first
    return run_each(
        "retention",
        target,
        partitions,
        lambda part: _retain(broker, part, limits[part], now_ms=now, dry_run=dry_run),
        dry_run=dry_run,
    )


def _retain(
    broker: Broker, topic: TopicName, limits: RetentionLimits, *, now_ms: int, dry_run: bool
) -> RetentionResult:
    log = existing_log(broker, topic)
    if log is None:
        return RetentionResult(
            topic=str(topic),
            removed_paths=(),
            removed_messages=0,
            removed_bytes=0,
            first_offset_before=0,
            first_offset=0,
            reason="the partition has no log yet",
        )
    planned: dict[str, Any] = {}

    def plan(snap: Snapshot) -> list[SegmentRef]:
        acked_below, slowest = ack_floor(durable_cursors(broker, topic), snap.first_offset)
        count, reason = plan_removal(
            snap.segments, acked_below=acked_below, slowest=slowest, limits=limits, now_ms=now_ms
        )
        planned.update(snap=snap, reason=reason, segments=snap.segments[:count])
        return list(snap.segments[:count])

    if dry_run:
        plan(log.snapshot())
        return _result(topic, planned, version=None)
    parameters: dict[str, object] = {}

    def build(snap: Snapshot) -> list[Action]:
        doomed = plan(snap)
        if not doomed:
            raise NothingToCommit(planned["reason"])
        deleted_ms = time.time_ns() // 1_000_000  # real time: vacuum's minimum age counts from it
        actions: list[Action] = [
            Remove(
                path=seg.path,
                data_change=True,
                deletion_timestamp=deleted_ms,
                extended_file_metadata=True,
                partition_values={},
                size=seg.size_bytes,
            )
            for seg in doomed
        ]
        # re-state the counters: with every segment gone they alone keep offsets from being reused
        actions.append(Txn(app_id=TXN_NEXT_OFFSET, version=snap.next_offset, last_updated=deleted_ms))
        actions.append(Txn(app_id=TXN_NEXT_ENTRY_ID, version=snap.next_entry_id, last_updated=deleted_ms))
        new_first = (
            snap.segments[len(doomed)].base_offset if len(doomed) < len(snap.segments) else snap.next_offset
        )
        # commit() renders commitInfo from this dict after build returns, so it describes this attempt
        parameters.clear()
        parameters.update(
            firstOffset=new_first,
            removedSegments=len(doomed),
            removedMessages=sum(s.num_records for s in doomed),
            nowMs=now_ms,
        )
        return actions

    try:
        result = log.log.commit(build, operation=OPERATION, parameters=parameters)
    except NothingToCommit:
        return _result(topic, planned, version=None)  # the latest plan removes nothing
    log.notify()
    return _result(topic, planned, version=result.version)


def _result(topic: TopicName, planned: dict[str, Any], *, version: int | None) -> RetentionResult:
    snap: Snapshot = planned["snap"]
    doomed: tuple[SegmentRef, ...] = planned["segments"]
    remaining = snap.segments[len(doomed) :]
    return RetentionResult(
        topic=str(topic),
        removed_paths=tuple(s.path for s in doomed),
        removed_messages=sum(s.num_records for s in doomed),
        removed_bytes=sum(s.size_bytes for s in doomed),
        first_offset_before=snap.first_offset,
        first_offset=remaining[0].base_offset if remaining else snap.next_offset,
        reason=planned["reason"],
        version=version,
    )


__all__ = [
    "RetentionLimits",
    "RetentionResult",
    "ack_floor",
    "durable_cursors",
    "effective_limits",
    "first_unacked",
    "plan_removal",
    "run_retention",
]
