"""Pulsar's rate, counter and backlog-age fields of topic stats, computed from one look at storage.

Pulsar's broker keeps counters in memory and samples them every stats interval.  Here a stats
reader may be a process that just started (``pubsub topics stats``), so every field must follow from
what storage holds now (``docs/DECISIONS.md`` D160):

- in-rates (``msgRateIn``, ``msgThroughputIn``) from the live segments' publish-time bounds: the
  messages and bytes of the segments last published within the window, divided by the window;
- ``msgInCounter`` is the topic's next offset: offsets are dense from 0 and never reused, so it is
  every message ever published to the internal topic;
- out-rates, redelivery rates and the last ack/consume times from the cursor's ``activity``
  (``subscription.activity``);
- ``backlogSize`` (bytes) from segment sizes, the first segment prorated by the part still unacked;
- the oldest unacked message's publish time, read from its segment (one read, cached by the caller)
  unless the segment's publish-time bounds are one millisecond.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_core.log.snapshot import Snapshot
from broker_core.subscription.activity import RATE_WINDOW_MS
from broker_core.subscription.cursor import Cursor
from broker_core.topic.topic_log import TopicLog


@dataclass(frozen=True, slots=True)
class InRates:
    msg_rate_in: float
    msg_throughput_in: float
    """Bytes per second as stored (compressed Parquet), the nearest thing to Pulsar's entry bytes."""
    last_publish_ms: int


def in_rates(snap: Snapshot, now_ms: int, *, window_ms: int = RATE_WINDOW_MS) -> InRates:
    """Messages and bytes per second published in the ``window_ms`` before ``now_ms``.

    A segment counts whole when its newest message falls in the window; scanning stops at the first
    older segment from the end, so the cost is the window's segments, not the topic's.
    """
    start = now_ms - window_ms
    msgs = size = 0
    for seg in reversed(snap.segments):
        if seg.max_publish_ms <= start:
            break
        if seg.max_publish_ms <= now_ms:
            msgs += seg.num_records
            size += seg.size_bytes
    seconds = window_ms / 1000
    last = snap.segments[-1].max_publish_ms if snap.segments else 0
    return InRates(msgs / seconds, size / seconds, last)


def backlog_messages(snap: Snapshot, cursor: Cursor) -> int:
    """Messages the subscription has not acknowledged yet (Pulsar's ``msgBacklog``)."""
    start = max(cursor.mark_delete, snap.first_offset)
    return max(0, snap.next_offset - start - cursor.acked.count())


def first_unacked(snap: Snapshot, cursor: Cursor) -> int:
    """The lowest offset the subscription has not acknowledged (``snap.next_offset`` when none)."""
    pos = max(cursor.mark_delete, snap.first_offset)
    for start, end in cursor.acked.to_json():
        if start <= pos < end:
            pos = end
        elif start > pos:
            break
    return min(pos, snap.next_offset)


def backlog_bytes(snap: Snapshot, start: int, backlog_msgs: int) -> int:
    """Bytes of the backlog from ``start``: whole segments after it, the one holding it prorated."""
    if backlog_msgs <= 0:
        return 0
    total = 0
    for seg in snap.segments[snap.segment_index_for(start):]:
        if seg.base_offset >= start:
            total += seg.size_bytes
        elif seg.num_records:
            total += seg.size_bytes * (seg.end_offset - start) // seg.num_records
    return total


def publish_time_ms(log: TopicLog, snap: Snapshot, offset: int) -> int | None:
    """The publish time of the message at ``offset`` (or the first live one after it), None if none."""
    index = snap.segment_index_for(offset)
    if offset >= snap.next_offset or index >= len(snap.segments):
        return None
    bounded = bounded_publish_time_ms(snap, offset)
    if bounded is not None:
        return bounded
    first = max(offset, snap.segments[index].base_offset)
    table, _ = log.read(first, first + 1, snapshot=snap)
    if not table.num_rows:
        return None
    value = table.column("publish_time")[0].value  # microseconds since the epoch
    return int(value) // 1000


def bounded_publish_time_ms(snap: Snapshot, offset: int) -> int | None:
    """``publish_time_ms`` without a read, when the add's bounds answer it (None: they do not).

    The bounds are ``publish_time // 1000`` over the segment's messages (``pubsub.minPublishTimeMs``,
    ``pubsub.maxPublishTimeMs``), so when they are equal every message was published in that
    millisecond: the usual case of a segment of one message or one batch (D186).
    """
    index = snap.segment_index_for(offset)
    if offset >= snap.next_offset or index >= len(snap.segments):
        return None
    seg = snap.segments[index]
    return seg.min_publish_ms if seg.min_publish_ms == seg.max_publish_ms else None


__all__ = ["InRates", "backlog_bytes", "backlog_messages", "bounded_publish_time_ms", "first_unacked", "in_rates",
           "publish_time_ms"]
