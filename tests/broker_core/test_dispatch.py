"""Dispatch rules as pure functions: Shared and Key_Shared candidates, delays, chunks, draining."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.subscription.cursor import ConsumerType, Cursor, new_cursor
from broker_core.subscription.dispatch import (
    HASH_SLOTS,
    Window,
    claim_owners,
    draining_hashes,
    due_mask,
    key_shared_candidates,
    shared_candidates,
)

LEASE = 10_000


def window(
    n: int,
    *,
    start: int = 0,
    hashes: list[int] | None = None,
    deliver_at: list[int] | None = None,
    chunks: list[tuple[int, int]] | None = None,
) -> Window:
    """``chunks``: (head row index, number of chunks) for chunked messages laid out consecutively."""
    continuation = np.zeros(n, dtype=bool)
    num_chunks = np.zeros(n, dtype=np.int32)
    for head, count in chunks or []:
        num_chunks[head : head + count] = count
        continuation[head + 1 : head + count] = True
    return Window(
        offsets=np.arange(start, start + n, dtype=np.int64),
        hashes=np.asarray(hashes if hashes is not None else [0] * n, dtype=np.int64),
        deliver_at_ms=np.asarray(deliver_at if deliver_at is not None else [-1] * n, dtype=np.int64),
        continuation=continuation,
        num_chunks=num_chunks,
    )


def cursor_for(
    names: list[str], sub_type: ConsumerType = ConsumerType.Shared, mark_delete: int = 0
) -> Cursor:
    cursor = new_cursor("sub", sub_type, mark_delete)
    for name in names:
        cursor.add_consumer(name, sub_type, now_ms=0, lease_ms=LEASE)
    return cursor


def shared(cursor: Cursor, win: Window, *, now: int = 0, delayed: bool = True, limit: int = 100) -> list[int]:
    return shared_candidates(cursor, win, now_ms=now, delayed_enabled=delayed, limit=limit).tolist()


def key_shared(
    cursor: Cursor,
    win: Window,
    consumer: str,
    owner_of_hash: dict[int, str],
    *,
    now: int = 0,
    delayed: bool = True,
    out_of_order: bool = False,
    limit: int = 100,
) -> list[int]:
    names = sorted(set(owner_of_hash.values()) | {consumer})
    owners = np.array(
        [names.index(owner_of_hash[h]) if h in owner_of_hash else -1 for h in win.hashes.tolist()],
        dtype=np.int64,
    )
    return key_shared_candidates(
        cursor, win, consumer=consumer, hash_owner=owners, owner_names=names, now_ms=now,
        delayed_enabled=delayed, allow_out_of_order=out_of_order, limit=limit,
    ).tolist()


# -- Shared ------------------------------------------------------------------------------------------


def test_shared_skips_acked_and_claimed_offsets_oldest_first() -> None:
    cursor = cursor_for(["a", "b"])
    cursor.ack([1, 4])
    cursor.claim("b", [2, 5])
    win = window(8)
    assert shared(cursor, win) == [0, 3, 6, 7]
    assert shared(cursor, win, limit=2) == [0, 3]
    assert shared(cursor, win, limit=0) == []


def test_shared_window_starting_above_zero() -> None:
    cursor = cursor_for(["a"], mark_delete=100)
    cursor.ack([101])
    assert shared(cursor, window(4, start=100)) == [100, 102, 103]


def test_delayed_messages_are_never_early_and_due_exactly_at_deliver_at() -> None:
    cursor = cursor_for(["a"])
    win = window(4, deliver_at=[-1, 1000, 999, 2000])
    assert shared(cursor, win, now=998) == [0]
    assert shared(cursor, win, now=999) == [0, 2]
    assert shared(cursor, win, now=1000) == [0, 1, 2]
    assert shared(cursor, win, now=2000) == [0, 1, 2, 3]
    # with delayed delivery disabled everything is delivered at once
    assert shared(cursor, win, now=0, delayed=False) == [0, 1, 2, 3]
    assert due_mask(win, 0, delayed_enabled=False).all()


def test_non_strict_delivery_looks_one_tick_ahead() -> None:
    """Pulsar's cutoff: deliverAt <= now + tick (non-strict mode); tick 1000 here."""
    cursor = cursor_for(["a"])
    win = window(4, deliver_at=[-1, 1000, 999, 2000])

    def ahead(now: int) -> list[int]:
        return shared_candidates(cursor, win, now_ms=now, delayed_enabled=True, limit=100,
                                 deliver_ahead_ms=1000).tolist()

    assert ahead(-2) == [0]  # 999 <= -2 + 1000 is false
    assert ahead(-1) == [0, 2]
    assert ahead(0) == [0, 1, 2]
    assert ahead(999) == [0, 1, 2]
    assert ahead(1000) == [0, 1, 2, 3]
    assert due_mask(win, 500, delayed_enabled=True, deliver_ahead_ms=1000).tolist() == [True, True, True, False]


def test_chunk_continuations_are_claimed_only_with_their_head() -> None:
    cursor = cursor_for(["a"])
    # rows: 0 plain, 1-3 one chunked message, 4 plain, 5-6 another chunked message
    win = window(7, chunks=[(1, 3), (5, 2)])
    assert shared(cursor, win) == [0, 1, 2, 3, 4, 5, 6]
    # the limit counts messages (heads), and a head brings its continuations
    assert shared(cursor, win, limit=2) == [0, 1, 2, 3]
    # a claimed head keeps its continuation rows away from other consumers
    cursor.claim("a", [1, 2, 3])
    cursor.add_consumer("b", ConsumerType.Shared, now_ms=0, lease_ms=LEASE)
    assert shared(cursor, win) == [0, 4, 5, 6]


def test_chunked_message_cut_off_by_the_window_end_waits_for_a_wider_window() -> None:
    cursor = cursor_for(["a"], ConsumerType.KeyShared)
    # rows 2-4 are one message in three chunks, but the window ends after row 3
    cut = Window(
        offsets=np.arange(4, dtype=np.int64),
        hashes=np.zeros(4, dtype=np.int64),
        deliver_at_ms=np.full(4, -1, dtype=np.int64),
        continuation=np.array([False, False, False, True]),
        num_chunks=np.array([0, 0, 3, 3], dtype=np.int32),
    )
    assert shared(cursor, cut) == [0, 1]
    assert key_shared(cursor, cut, "a", {0: "a"}) == [0, 1]
    whole = window(5, chunks=[(2, 3)])
    assert shared(cursor, whole) == [0, 1, 2, 3, 4]


def test_delayed_chunked_message_waits_as_a_whole() -> None:
    cursor = cursor_for(["a"])
    win = window(3, chunks=[(0, 3)], deliver_at=[500, 500, 500])
    assert shared(cursor, win, now=499) == []
    assert shared(cursor, win, now=500) == [0, 1, 2]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(st.just(-1), st.integers(min_value=0, max_value=100)), min_size=1, max_size=30),
    st.integers(min_value=0, max_value=100),
    st.sets(st.integers(min_value=0, max_value=29)),
    st.sets(st.integers(min_value=0, max_value=29)),
    st.integers(min_value=1, max_value=40),
)
def test_shared_candidates_properties(
    deliver_at: list[int], now: int, acked: set[int], claimed: set[int], limit: int
) -> None:
    n = len(deliver_at)
    cursor = cursor_for(["a", "b"])
    cursor.ack(sorted(o for o in acked if o < n))
    cursor.claim("b", sorted(o for o in claimed - acked if o < n))
    got = shared(cursor, window(n, deliver_at=deliver_at), now=now, limit=limit)
    expected = [o for o in range(n) if o not in acked and o not in claimed
                and (deliver_at[o] < 0 or deliver_at[o] <= now)][:limit]
    assert got == expected


# -- Key_Shared ----------------------------------------------------------------------------------------


def test_key_shared_takes_only_its_own_hashes() -> None:
    cursor = cursor_for(["a", "b"], ConsumerType.KeyShared)
    win = window(6, hashes=[1, 2, 1, 2, 3, 1])
    owners = {1: "a", 2: "b", 3: "a"}
    assert key_shared(cursor, win, "a", owners) == [0, 2, 4, 5]
    assert key_shared(cursor, win, "b", owners) == [1, 3]
    # an unowned hash (a gap between sticky ranges) goes to nobody
    assert key_shared(cursor, win, "a", {1: "a", 2: "b"}) == [0, 2, 5]


def test_draining_hash_blocks_the_new_owner_until_the_old_one_acks() -> None:
    cursor = cursor_for(["a", "b"], ConsumerType.KeyShared)
    win = window(6, hashes=[7, 8, 7, 8, 7, 8])
    # a held hash 7 and 8 while it owned them; now hash 7 moved to b
    cursor.claim("a", [0, 1])
    owners = {7: "b", 8: "a"}
    assert key_shared(cursor, win, "b", owners) == []  # 2 and 4 wait behind a's unacked 0
    assert key_shared(cursor, win, "a", owners) == [3, 5]
    assert draining_hashes(cursor, win, np.array([1, 0, 1, 0, 1, 0]), ["a", "b"]) == {"a": [7 % HASH_SLOTS]}
    # out-of-order delivery does not wait
    assert key_shared(cursor, win, "b", owners, out_of_order=True) == [2, 4]
    # once a acknowledges, b takes the hash in order
    cursor.ack([0])
    assert key_shared(cursor, win, "b", owners) == [2, 4]
    assert draining_hashes(cursor, win, np.array([1, 0, 1, 0, 1, 0]), ["a", "b"]) == {}


def test_released_draining_message_goes_to_the_new_owner_first() -> None:
    cursor = cursor_for(["a", "b"], ConsumerType.KeyShared)
    win = window(3, hashes=[5, 5, 5])
    cursor.claim("a", [0])
    owners = {5: "b"}
    assert key_shared(cursor, win, "b", owners) == []
    cursor.release("a", [0])  # a nacked it: now it is b's, and b gets it before the later ones
    assert key_shared(cursor, win, "b", owners) == [0, 1, 2]


def test_own_earlier_claim_does_not_block() -> None:
    cursor = cursor_for(["a"], ConsumerType.KeyShared)
    win = window(3, hashes=[4, 4, 4])
    cursor.claim("a", [0])
    assert key_shared(cursor, win, "a", {4: "a"}) == [1, 2]


def test_key_shared_delayed_message_not_early_and_does_not_block_its_key() -> None:
    cursor = cursor_for(["a", "b"], ConsumerType.KeyShared)
    win = window(3, hashes=[9, 9, 9], deliver_at=[1000, -1, -1])
    assert key_shared(cursor, win, "a", {9: "a"}, now=10) == [1, 2]
    assert key_shared(cursor, win, "a", {9: "a"}, now=1000) == [0, 1, 2]
    assert key_shared(cursor, win, "a", {9: "a"}, now=10, delayed=False) == [0, 1, 2]


def test_key_shared_chunks_follow_their_head() -> None:
    cursor = cursor_for(["a", "b"], ConsumerType.KeyShared)
    win = window(5, hashes=[3, 3, 3, 4, 4], chunks=[(0, 3)])
    assert key_shared(cursor, win, "a", {3: "a", 4: "b"}) == [0, 1, 2]
    assert key_shared(cursor, win, "b", {3: "a", 4: "b"}) == [3, 4]
    assert key_shared(cursor, win, "a", {3: "a", 4: "b"}, limit=1) == [0, 1, 2]


def test_claim_owners_maps_offsets_to_consumers() -> None:
    cursor = cursor_for(["a", "b"])
    cursor.claim("a", [1, 2])
    cursor.claim("b", [4])
    owners, names = claim_owners(cursor, np.arange(6, dtype=np.int64))
    assert [names[o] if o >= 0 else None for o in owners.tolist()] == [None, "a", "a", None, "b", None]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=25),  # hash per row
    st.dictionaries(st.integers(min_value=0, max_value=4), st.sampled_from(["a", "b", "c"])),
    st.lists(st.sampled_from(["a", "b", "c", None, "acked"]), max_size=25),  # row state
    st.sampled_from(["a", "b", "c"]),
    st.booleans(),
)
def test_key_shared_never_breaks_key_order_or_single_owner(
    hashes: list[int], owner_of_hash: dict[int, str], states: list[str | None], me: str, out_of_order: bool
) -> None:
    n = len(hashes)
    states = (states + [None] * n)[:n]
    cursor = cursor_for(["a", "b", "c"], ConsumerType.KeyShared)
    for name in ("a", "b", "c"):
        cursor.claim(name, [i for i, s in enumerate(states) if s == name])
    cursor.ack([i for i, s in enumerate(states) if s == "acked"])
    win = window(n, hashes=hashes)
    got = key_shared(cursor, win, me, owner_of_hash, out_of_order=out_of_order)
    acked = cursor.is_acked(win.offsets)
    for row in got:
        assert owner_of_hash.get(hashes[row]) == me
        assert states[row] is None  # unclaimed and unacked
        if not out_of_order:
            # no earlier unacked message of the key is held by someone else
            for earlier in range(row):
                if hashes[earlier] == hashes[row] and not acked[earlier]:
                    assert states[earlier] in (me, None)
    if out_of_order:
        assert got == [i for i in range(n) if states[i] is None and owner_of_hash.get(hashes[i]) == me]
