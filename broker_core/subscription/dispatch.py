"""Which messages a consumer may take next: the subscription types' dispatch rules, as pure functions.

A ``Window`` holds, for a run of consecutive offsets from the cursor's mark-delete position, the
facts dispatch needs (sticky key hash, deliver-at time, chunk position).  Given the latest cursor,
``shared_candidates`` and ``key_shared_candidates`` return the offsets a consumer may claim; the
caller commits the claim, re-running the function against the winner's cursor if it lost a race.

Key_Shared keeps each key on one consumer at a time and in order: a consumer may take a message
only if its key hash is assigned to it *and* no earlier unacknowledged message of that hash is held
by (or due to go to) another consumer.  Hashes that moved to a new consumer therefore "drain": the
new owner waits until the old owner's outstanding messages of that hash are acknowledged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from broker_core.subscription.cursor import Cursor
from broker_core.subscription.key_shared import (
    DEFAULT_POINTS_PER_CONSUMER,
    AutoSplitHashRangeSelector,
    KeySharedConsumer,
    KeySharedMode,
    selector_for,
)

HASH_SLOTS = 65536


@dataclass(frozen=True, slots=True)
class Window:
    """Dispatch facts for consecutive live offsets ``offsets[0] ..``."""

    offsets: np.ndarray  # int64, ascending
    hashes: np.ndarray  # int64 sticky key hash (31-bit)
    deliver_at_ms: np.ndarray  # int64, -1 when not delayed
    continuation: np.ndarray  # bool: a chunk other than the first of its message
    num_chunks: np.ndarray  # int32, 0 when not chunked

    @property
    def end(self) -> int:
        return int(self.offsets[-1]) + 1 if len(self.offsets) else 0


def cursor_selector(cursor: Cursor, now_ms: int) -> tuple[Any, list[str]]:
    """The Key_Shared selector of a cursor's live consumers, and their names in selector order.

    AUTO_SPLIT hash ranges come from the layout the cursor keeps (it depends on join/leave history);
    consistent hashing and STICKY are computed from the consumers themselves.
    """
    live = sorted(cursor.live_consumers(now_ms).values(), key=lambda c: c.join_order)
    consumers = [
        KeySharedConsumer(
            name=c.name, join_order=c.join_order, sticky_ranges=tuple((int(r[0]), int(r[1])) for r in c.sticky_ranges)
        )
        for c in live
    ]
    mode = KeySharedMode[cursor.key_shared.get("mode", "AutoSplit")]
    consistent = bool(cursor.key_shared.get("consistentHashing", False))
    selector: Any
    range_size = cursor.auto_split_range_size()
    if mode == KeySharedMode.AutoSplit and not consistent and cursor.has_auto_split_layout():
        selector = AutoSplitHashRangeSelector.from_end_keys(
            consumers, cursor.auto_split_end_keys(), range_size=range_size
        )
    else:
        points = int(cursor.key_shared.get("replicaPoints", DEFAULT_POINTS_PER_CONSUMER))
        selector = selector_for(mode, consistent, consumers, points_per_consumer=points, range_size=range_size)
    return selector, [c.name for c in consumers]


def claim_owners(cursor: Cursor, offsets: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Index (into the returned names) of the consumer holding each offset's claim, -1 if none."""
    starts, ends, owner_index, names = cursor.claimed_by()
    owners = np.full(len(offsets), -1, dtype=np.int64)
    if len(starts):
        i = np.searchsorted(starts, offsets, side="right") - 1
        ok = i >= 0
        inside = np.zeros(len(offsets), dtype=bool)
        inside[ok] = offsets[ok] < ends[i[ok]]
        owners[inside] = owner_index[i[inside]]
    return owners, names


def due_mask(window: Window, now_ms: int, *, delayed_enabled: bool, deliver_ahead_ms: int = 0) -> np.ndarray:
    """Messages that may be delivered now: ``deliverAt <= now + deliver_ahead_ms`` (Pulsar's cutoff:
    the tick in non-strict mode, 0 in strict mode); a message already due on arrival is never held."""
    if not delayed_enabled:
        return np.ones(len(window.offsets), dtype=bool)
    return (window.deliver_at_ms < 0) | (window.deliver_at_ms <= now_ms + deliver_ahead_ms)


def _whole(window: Window) -> np.ndarray:
    """Rows that are not chunk heads cut off by the window's end (their chunks are claimed with them,
    so such a head waits until the window covers all of its chunks)."""
    rows = np.arange(len(window.offsets))
    return (window.num_chunks <= 1) | (rows + window.num_chunks <= len(window.offsets))


def _with_chunks(window: Window, chosen: np.ndarray) -> np.ndarray:
    """Add every later chunk of each chosen chunked message (chunks are claimed together)."""
    out = chosen.copy()
    for idx in np.nonzero(chosen & (window.num_chunks > 1))[0].tolist():
        out[idx : idx + int(window.num_chunks[idx])] = True
    return out


def shared_candidates(
    cursor: Cursor, window: Window, *, now_ms: int, delayed_enabled: bool, limit: int, deliver_ahead_ms: int = 0
) -> np.ndarray:
    """Offsets a Shared consumer may claim: unacked, unclaimed, due; oldest first."""
    owners, _ = claim_owners(cursor, window.offsets)
    free = ~cursor.is_acked(window.offsets) & (owners < 0) & ~window.continuation & _whole(window)
    chosen = free & due_mask(window, now_ms, delayed_enabled=delayed_enabled, deliver_ahead_ms=deliver_ahead_ms)
    chosen = _limit(chosen, limit)
    return window.offsets[_with_chunks(window, chosen)]


def key_shared_candidates(
    cursor: Cursor,
    window: Window,
    *,
    consumer: str,
    hash_owner: np.ndarray,
    owner_names: list[str],
    now_ms: int,
    delayed_enabled: bool,
    allow_out_of_order: bool,
    limit: int,
    deliver_ahead_ms: int = 0,
) -> np.ndarray:
    """Offsets a Key_Shared consumer may claim.

    Args:
        hash_owner: per window row, the index into ``owner_names`` of the consumer the selector assigns
            that row's hash to (-1: nobody, e.g. a gap between sticky ranges).
    """
    me = owner_names.index(consumer) if consumer in owner_names else -2
    claim_owner, claim_names = claim_owners(cursor, window.offsets)
    my_claim = claim_names.index(consumer) if consumer in claim_names else -2
    acked = cursor.is_acked(window.offsets)
    due = due_mask(window, now_ms, delayed_enabled=delayed_enabled, deliver_ahead_ms=deliver_ahead_ms)
    claimed = claim_owner >= 0
    mine = hash_owner == me
    heads = ~window.continuation
    chosen = ~acked & ~claimed & mine & due & heads & _whole(window)
    if not allow_out_of_order:
        held_by_other = claimed & (claim_owner != my_claim)
        waiting_for_other = ~claimed & ~mine & due
        blocker = ~acked & heads & (held_by_other | waiting_for_other)
        if blocker.any():
            block_hashes, first = np.unique(window.hashes[blocker], return_index=True)
            first_block_offset = window.offsets[blocker][first]
            pos = np.searchsorted(block_hashes, window.hashes)
            pos_ok = pos < len(block_hashes)
            hit = np.zeros(len(window.offsets), dtype=bool)
            hit[pos_ok] = block_hashes[pos[pos_ok]] == window.hashes[pos_ok]
            blocked = np.zeros(len(window.offsets), dtype=bool)
            blocked[hit] = first_block_offset[pos[hit]] < window.offsets[hit]
            chosen &= ~blocked
    chosen = _limit(chosen, limit)
    return window.offsets[_with_chunks(window, chosen)]


def draining_hashes(
    cursor: Cursor, window: Window, hash_owner: np.ndarray, owner_names: list[str]
) -> dict[str, list[int]]:
    """Per consumer, the hash slots it still holds claims on although they now belong to another."""
    claim_owner, claim_names = claim_owners(cursor, window.offsets)
    out: dict[str, list[int]] = {}
    for index, name in enumerate(claim_names):
        rows = claim_owner == index
        if not rows.any():
            continue
        me = owner_names.index(name) if name in owner_names else -2
        moved = rows & (hash_owner != me)
        if moved.any():
            out[name] = sorted(set((window.hashes[moved] % HASH_SLOTS).tolist()))
    return out


def _limit(chosen: np.ndarray, limit: int) -> np.ndarray:
    if limit <= 0:
        return np.zeros_like(chosen)
    idx = np.nonzero(chosen)[0]
    if len(idx) > limit:
        chosen = chosen.copy()
        chosen[idx[limit:]] = False
    return chosen


__all__ = [
    "HASH_SLOTS",
    "Window",
    "claim_owners",
    "cursor_selector",
    "draining_hashes",
    "due_mask",
    "key_shared_candidates",
    "shared_candidates",
]
