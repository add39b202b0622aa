"""A subscription's recent activity, kept in its cursor document so one read can tell rates.

Pulsar's broker counts dispatched and acknowledged messages in memory and divides by its stats
interval.  There is no broker here, and a stats reader (``pubsub topics stats``, the metrics
exporter) may be a fresh process that has seen nothing before, so the cursor itself carries what a
rate needs: every cursor commit stamps an ``activity`` object beside the cursor fields
(``docs/PROTOCOL.md``, ``docs/DECISIONS.md`` D161)::

    "activity": {"lastAckedMs": t, "lastConsumedMs": t, "base": [acked, redelivered],
                 "points": [[t_ms, acked, redelivered], ...]}

``acked`` and ``redelivered`` are running totals (messages acknowledged, redeliveries counted);
``points`` are the totals after the changes of each ``BUCKET_MS`` bucket, kept for ``KEEP_MS``; a
change inside the newest point's bucket overwrites that point, so a cursor acked a thousand times a
second still carries a handful of points.  ``base`` is the totals before the oldest kept point.  A
rate over a window is then (totals now - totals at the window's start) / window, exact to one bucket.

Readers that do not know the key ignore it (the cursor decoder reads named fields only), and a
writer that does not know it drops it: the totals then start again from zero, which only shows as a
lower rate for one window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker_core.subscription.cursor import Cursor

ACTIVITY_KEY = "activity"
BUCKET_MS = 5_000
RATE_WINDOW_MS = 60_000
"""The window rates are computed over (Pulsar's default stats update interval is 60 s too)."""
KEEP_MS = RATE_WINDOW_MS + 2 * BUCKET_MS


Counts = tuple[int, int, int]
"""(messages acknowledged, offsets claimed, redeliveries counted) at one cursor state."""


def counts(cursor: Cursor | None) -> Counts | None:
    """Take these before a commit function runs: it may change the cursor in place."""
    return None if cursor is None else _counts(cursor)


def _counts(cursor: Cursor) -> Counts:
    return (cursor.mark_delete + cursor.acked.count(), sum(rs.count() for rs in cursor.claims.values()),
            sum(cursor.redelivery.values()))


def stamp(previous_doc: dict[str, Any] | None, before: Counts | None, after: Cursor, now_ms: int) -> dict[str, Any]:
    """The ``activity`` object of the cursor version ``after``, which follows a state of ``before`` counts."""
    prior = (previous_doc or {}).get(ACTIVITY_KEY) or {}
    base = list(prior.get("base", [0, 0]))
    points: list[list[int]] = [list(p) for p in prior.get("points", [])]
    acked, redelivered = (points[-1][1], points[-1][2]) if points else (base[0], base[1])
    now = _counts(after)
    was = before if before is not None else (now[0], 0, 0)  # a new cursor starts where it starts
    acked_delta = max(0, now[0] - was[0])
    redelivered_delta = max(0, now[2] - was[2])
    out = {k: prior[k] for k in ("lastAckedMs", "lastConsumedMs") if k in prior}
    if acked_delta:
        out["lastAckedMs"] = now_ms
        out["lastConsumedMs"] = max(int(out.get("lastConsumedMs", 0)), now_ms)  # acked, so it was consumed
    if now[1] > was[1] or redelivered_delta:
        out["lastConsumedMs"] = now_ms
    if acked_delta or redelivered_delta:
        totals = [acked + acked_delta, redelivered + redelivered_delta]
        if points and now_ms - points[-1][0] < BUCKET_MS:
            points[-1] = [points[-1][0], *totals]
        else:
            points.append([now_ms, *totals])
    while points and points[0][0] < now_ms - KEEP_MS:
        base = points.pop(0)[1:]
    out["base"] = base
    out["points"] = points
    return out


@dataclass(frozen=True, slots=True)
class Activity:
    """What a stats reader takes from the ``activity`` object (``read``)."""

    msg_rate_out: float
    msg_rate_redeliver: float
    last_acked_ms: int
    last_consumed_ms: int


def read(doc: dict[str, Any] | None, now_ms: int, *, window_ms: int = RATE_WINDOW_MS) -> Activity:
    """Rates over the ``window_ms`` before ``now_ms`` (messages per second) and the last timestamps
    (0 when never, as Pulsar reports them)."""
    prior = (doc or {}).get(ACTIVITY_KEY) or {}
    base = prior.get("base", [0, 0])
    points = prior.get("points", [])
    start = now_ms - window_ms
    at_start = list(base)
    for point in points:
        if point[0] <= start:
            at_start = point[1:]
    now = points[-1][1:] if points else base
    seconds = window_ms / 1000
    return Activity(
        msg_rate_out=max(0, now[0] - at_start[0]) / seconds,
        msg_rate_redeliver=max(0, now[1] - at_start[1]) / seconds,
        last_acked_ms=int(prior.get("lastAckedMs", 0)),
        last_consumed_ms=int(prior.get("lastConsumedMs", 0)),
    )


__all__ = ["ACTIVITY_KEY", "BUCKET_MS", "RATE_WINDOW_MS", "Activity", "Counts", "counts", "read", "stamp"]
