"""Cursor: acknowledgment, claims, redelivery counts, consumer registration and leases."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.errors import ConsumerAssignException, ConsumerBusy, NotAllowedError
from broker_core.subscription.cursor import ConsumerEntry, ConsumerType, Cursor, new_cursor
from broker_core.subscription.ranges import RangeSet

LEASE = 1000


def cursor_with(*names: str, sub_type: ConsumerType = ConsumerType.Shared, now: int = 0) -> Cursor:
    cursor = new_cursor("sub", sub_type, 0)
    for name in names:
        cursor.add_consumer(name, sub_type, now_ms=now, lease_ms=LEASE)
    return cursor


def acked_set(cursor: Cursor, upto: int) -> set[int]:
    probe = np.arange(upto, dtype=np.int64)
    return set(probe[cursor.is_acked(probe)].tolist())


# -- acknowledgment ----------------------------------------------------------------------------------


def test_individual_acks_advance_mark_delete_over_contiguous_prefix() -> None:
    cursor = new_cursor("sub", ConsumerType.Exclusive, 0)
    cursor.ack([1, 2, 5])
    assert cursor.mark_delete == 0
    assert cursor.acked.to_json() == [[1, 3], [5, 6]]
    cursor.ack([0])
    assert cursor.mark_delete == 3
    assert cursor.acked.to_json() == [[5, 6]]
    cursor.ack([4, 3])
    assert cursor.mark_delete == 6
    assert not cursor.acked
    cursor.ack([2, 5])  # below markDelete: ignored
    assert cursor.mark_delete == 6


def test_cumulative_ack_moves_forward_only_and_absorbs_acked_ranges() -> None:
    cursor = new_cursor("sub", ConsumerType.Exclusive, 0)
    cursor.ack([6, 7, 10])
    cursor.ack_cumulative(4)
    assert cursor.mark_delete == 5
    cursor.ack_cumulative(5)
    assert cursor.mark_delete == 8  # 6 and 7 were acked already
    assert cursor.acked.to_json() == [[10, 11]]
    cursor.ack_cumulative(2)  # behind: no-op
    assert cursor.mark_delete == 8
    assert acked_set(cursor, 12) == set(range(8)) | {10}


def test_ack_removes_claims_and_redelivery_counts() -> None:
    cursor = cursor_with("a", "b")
    cursor.claim("a", [0, 1, 2])
    cursor.claim("b", [3, 4])
    cursor.release("a", [2])
    assert cursor.redelivery == {2: 1}
    cursor.claim("b", [2])
    cursor.ack([2, 3])
    assert cursor.claims["a"].to_json() == [[0, 2]]
    assert cursor.claims["b"].to_json() == [[4, 5]]
    assert cursor.redelivery == {}


def test_release_counts_redelivery_only_for_unacked_offsets() -> None:
    cursor = cursor_with("a")
    cursor.claim("a", [0, 1, 2, 3])
    cursor.ack([1])
    cursor.release("a", [0, 1, 3])
    assert cursor.redelivery == {0: 1, 3: 1}
    assert cursor.claims["a"].to_json() == [[2, 3]]
    cursor.release("a", [2], count_redelivery=False)
    assert 2 not in cursor.redelivery
    assert not cursor.claims["a"]
    cursor.count_redelivery([0, 1, 9])  # Exclusive/Failover path: no claims involved, acked 1 ignored
    assert cursor.redelivery == {0: 2, 3: 1, 9: 1}


def test_release_ignores_offsets_the_consumer_does_not_hold() -> None:
    cursor = cursor_with("a", "b")
    cursor.claim("a", [0, 1])
    cursor.claim("b", [2])
    cursor.release("a", [0, 0, 2, 5])  # 2 is b's, 5 nobody's, 0 given twice
    assert cursor.redelivery == {0: 1}
    assert cursor.claims["b"].to_json() == [[2, 3]]
    cursor.expire_consumers(LEASE)  # both expire: their claims are released and counted
    assert cursor.redelivery == {0: 1, 1: 1, 2: 1}
    cursor.release("a", [1])  # a late nack of an expired consumer counts nothing more
    assert cursor.redelivery == {0: 1, 1: 1, 2: 1}


def test_claim_requires_a_registered_consumer() -> None:
    cursor = cursor_with("a")
    with pytest.raises(NotAllowedError):
        cursor.claim("ghost", [0])


def test_claimed_by_lists_every_consumer_sorted() -> None:
    cursor = cursor_with("a", "b")
    cursor.claim("a", [5, 6, 9])
    cursor.claim("b", [0, 7])
    starts, ends, owners, names = cursor.claimed_by()
    assert starts.tolist() == [0, 5, 7, 9]
    assert ends.tolist() == [1, 7, 8, 10]
    assert [names[i] for i in owners.tolist()] == ["b", "a", "b", "a"]
    empty = cursor_with("c").claimed_by()
    assert len(empty[0]) == 0 and empty[3] == []


def test_seek_is_the_only_way_back_and_resets_everything() -> None:
    cursor = cursor_with("a")
    cursor.claim("a", [10, 11])
    cursor.ack(list(range(8)))
    cursor.ack([9])
    cursor.release("a", [11])
    cursor.seek(3)
    assert cursor.mark_delete == 3
    assert not cursor.acked
    assert cursor.claims == {}
    assert cursor.redelivery == {}
    assert "a" in cursor.consumers  # consumers stay registered
    cursor.seek(50)
    assert cursor.mark_delete == 50


# -- consumers and leases ----------------------------------------------------------------------------


def test_exclusive_refuses_a_second_live_consumer_but_takes_over_after_expiry() -> None:
    cursor = cursor_with("a", sub_type=ConsumerType.Exclusive, now=0)
    with pytest.raises(ConsumerBusy):
        cursor.add_consumer("b", ConsumerType.Exclusive, now_ms=LEASE - 1, lease_ms=LEASE)
    entry = cursor.add_consumer("b", ConsumerType.Exclusive, now_ms=LEASE, lease_ms=LEASE)
    assert set(cursor.consumers) == {"b"}
    assert entry.lease_expires_ms == 2 * LEASE


def test_type_mismatch_with_live_consumers_is_refused() -> None:
    cursor = cursor_with("a", sub_type=ConsumerType.Shared)
    for other in (ConsumerType.Exclusive, ConsumerType.Failover, ConsumerType.KeyShared):
        with pytest.raises(ConsumerBusy):
            cursor.add_consumer("b", other, now_ms=0, lease_ms=LEASE)
    cursor.remove_consumer("a")
    cursor.add_consumer("b", ConsumerType.Failover, now_ms=0, lease_ms=LEASE)
    assert cursor.sub_type == ConsumerType.Failover  # the type changes once everybody left


def test_duplicate_consumer_name_is_refused() -> None:
    cursor = cursor_with("a", sub_type=ConsumerType.Shared)
    with pytest.raises(ConsumerBusy):
        cursor.add_consumer("a", ConsumerType.Shared, now_ms=1, lease_ms=LEASE)
    cursor2 = cursor_with("a", sub_type=ConsumerType.Failover)
    with pytest.raises(ConsumerBusy):
        cursor2.add_consumer("a", ConsumerType.Failover, now_ms=1, lease_ms=LEASE)


def test_key_shared_mode_mismatch_is_refused() -> None:
    cursor = new_cursor("sub", ConsumerType.KeyShared, 0)
    auto = {"mode": "AutoSplit"}
    cursor.add_consumer("a", ConsumerType.KeyShared, now_ms=0, lease_ms=LEASE, key_shared=auto)
    with pytest.raises(ConsumerBusy):
        cursor.add_consumer("b", ConsumerType.KeyShared, now_ms=0, lease_ms=LEASE,
                            key_shared={"mode": "Sticky"}, sticky_ranges=[[0, 10]])
    cursor.add_consumer("b", ConsumerType.KeyShared, now_ms=0, lease_ms=LEASE, key_shared=auto)
    assert cursor.key_shared["mode"] == "AutoSplit"


def test_auto_split_layout_follows_the_join_and_leave_history() -> None:
    cursor = new_cursor("sub", ConsumerType.KeyShared, 0)
    policy = {"mode": "AutoSplit"}
    for name in ("a", "b", "c"):
        cursor.add_consumer(name, ConsumerType.KeyShared, now_ms=0, lease_ms=LEASE, key_shared=policy)
    # a: end key 65536; b splits it at 65536 - (65536 >> 1); c splits the lower of two equal ranges
    assert cursor.key_shared["autoSplitEndKeys"] == [[16384, "c"], [32768, "b"], [65536, "a"]]
    cursor.remove_consumer("b")  # not the top range: its slots join a's range above
    assert cursor.key_shared["autoSplitEndKeys"] == [[16384, "c"], [65536, "a"]]
    cursor.remove_consumer("a")  # the top range: c, below it, takes over end key 65536
    assert cursor.key_shared["autoSplitEndKeys"] == [[65536, "c"]]
    again = Cursor.from_json(json.loads(json.dumps(cursor.to_json())))
    assert again.key_shared["autoSplitEndKeys"] == cursor.key_shared["autoSplitEndKeys"]
    # consistent hashing and STICKY keep no layout
    ring = new_cursor("sub", ConsumerType.KeyShared, 0)
    ring.add_consumer("a", ConsumerType.KeyShared, now_ms=0, lease_ms=LEASE,
                      key_shared={"mode": "AutoSplit", "consistentHashing": True})
    assert "autoSplitEndKeys" not in ring.key_shared and "regions" not in ring.key_shared


def test_auto_split_range_size_is_kept_with_the_subscription() -> None:
    cursor = new_cursor("sub", ConsumerType.KeyShared, 0)
    policy = {"mode": "AutoSplit", "consistentHashing": False, "rangeSize": 4}
    for name in ("a", "b", "c", "d"):
        cursor.add_consumer(name, ConsumerType.KeyShared, now_ms=0, lease_ms=LEASE, key_shared=policy)
    # 4 slots: a 4; b 4 - 2 = 2; c splits (0, 2] at 2 - 1 = 1; d splits (2, 4] at 4 - 1 = 3
    assert cursor.key_shared["autoSplitEndKeys"] == [[1, "c"], [2, "b"], [3, "d"], [4, "a"]]
    before = cursor.to_json()
    with pytest.raises(ConsumerAssignException, match="'e' cannot join"):  # every range is one slot
        cursor.add_consumer("e", ConsumerType.KeyShared, now_ms=0, lease_ms=LEASE, key_shared=policy)
    assert cursor.to_json() == before  # refused before anything changed


def test_legacy_regions_layout_is_read_and_rewritten_as_end_keys() -> None:
    """A cursor written before the 4.x selectors stores inclusive ``regions``; [s, e] is end key e + 1."""
    doc = {
        "subscription": "sub", "type": "KeyShared", "markDelete": 0,
        "consumers": {n: {"joinOrder": i, "leaseExpiresMs": 10**12} for i, n in enumerate("abc")},
        "nextJoinOrder": 3,
        "keyShared": {"mode": "AutoSplit", "consistentHashing": False,
                      "regions": [[0, 16383, "c"], [16384, 32767, "b"], [32768, 65535, "a"]]},
    }
    cursor = Cursor.from_json(doc)
    assert cursor.auto_split_range_size() == 65536
    assert cursor.auto_split_end_keys() == [(16384, "c"), (32768, "b"), (65536, "a")]
    cursor.remove_consumer("b")
    assert "regions" not in cursor.key_shared
    assert cursor.key_shared["autoSplitEndKeys"] == [[16384, "c"], [65536, "a"]]


def test_join_order_and_priority_are_recorded() -> None:
    cursor = new_cursor("sub", ConsumerType.Failover, 0)
    cursor.add_consumer("x", ConsumerType.Failover, now_ms=0, lease_ms=LEASE, priority_level=2)
    cursor.add_consumer("y", ConsumerType.Failover, now_ms=0, lease_ms=LEASE)
    cursor.remove_consumer("x")
    cursor.add_consumer("x", ConsumerType.Failover, now_ms=0, lease_ms=LEASE)
    assert cursor.consumers["y"].join_order == 1
    assert cursor.consumers["x"].join_order == 2  # a re-join is a new join
    assert cursor.consumers["x"].priority_level == 0


def test_expired_consumers_release_their_claims_with_redelivery_counted() -> None:
    cursor = cursor_with("a", "b", now=0)
    cursor.claim("a", [0, 1, 2])
    cursor.claim("b", [3])
    cursor.ack([1])
    cursor.redelivery[2] = 4
    assert cursor.renew("b", now_ms=500, lease_ms=LEASE)
    assert cursor.expire_consumers(LEASE - 1) == []
    assert cursor.expire_consumers(LEASE) == ["a"]
    assert set(cursor.consumers) == {"b"}
    assert "a" not in cursor.claims
    assert cursor.redelivery == {0: 1, 2: 5}
    assert set(cursor.live_consumers(LEASE)) == {"b"}
    assert cursor.live_consumers(LEASE + 500) == {}
    assert not cursor.renew("a", now_ms=LEASE, lease_ms=LEASE)


def test_add_consumer_expires_dead_ones_first() -> None:
    cursor = cursor_with("a", now=0)
    cursor.claim("a", [7])
    cursor.add_consumer("b", ConsumerType.Shared, now_ms=LEASE + 1, lease_ms=LEASE)
    assert set(cursor.consumers) == {"b"}
    assert cursor.redelivery == {7: 1}


def test_remove_consumer_counts_its_claims_as_redelivered() -> None:
    cursor = cursor_with("a", "b")
    cursor.claim("a", [4, 5])
    cursor.remove_consumer("a")
    cursor.remove_consumer("missing")  # no-op
    assert cursor.redelivery == {4: 1, 5: 1}
    assert set(cursor.consumers) == {"b"}


# -- serialisation -----------------------------------------------------------------------------------


def test_json_round_trip() -> None:
    cursor = new_cursor("sub", ConsumerType.KeyShared, 3)
    cursor.add_consumer("a", ConsumerType.KeyShared, now_ms=5, lease_ms=LEASE, priority_level=1,
                        sticky_ranges=[[0, 99]], key_shared={"mode": "Sticky", "allowOutOfOrder": False})
    cursor.add_consumer("b", ConsumerType.KeyShared, now_ms=5, lease_ms=LEASE, sticky_ranges=[[100, 200]],
                        key_shared={"mode": "Sticky"})
    cursor.claim("a", [5, 6, 9])
    cursor.ack([7, 8, 20])
    cursor.release("a", [9])
    doc = json.loads(json.dumps(cursor.to_json()))
    again = Cursor.from_json(doc)
    assert again.to_json() == cursor.to_json()
    assert again.claims["a"] == RangeSet([[5, 7]])
    assert again.redelivery == {9: 1}
    assert again.consumers["a"] == ConsumerEntry("a", 0, 5 + LEASE, 1, [[0, 99]])
    assert again.next_join_order == 2
    assert again.sub_type == ConsumerType.KeyShared
    assert not again.deleted
    doc["deleted"] = True
    assert Cursor.from_json(doc).deleted


def test_empty_claims_are_not_serialised() -> None:
    cursor = cursor_with("a")
    cursor.claim("a", [1])
    cursor.ack([1])
    assert cursor.to_json()["claims"] == {}


# -- a model of random operation sequences -------------------------------------------------------------

NAMES = ["a", "b", "c"]
OFF = st.integers(min_value=0, max_value=40)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("ack"), st.lists(OFF, max_size=6)),
        st.tuples(st.just("cumulative"), OFF),
        st.tuples(st.just("claim"), st.sampled_from(NAMES), st.lists(OFF, max_size=6)),
        st.tuples(st.just("release"), st.sampled_from(NAMES), st.lists(OFF, max_size=6)),
        st.tuples(st.just("join"), st.sampled_from(NAMES)),
        st.tuples(st.just("leave"), st.sampled_from(NAMES)),
        st.tuples(st.just("tick"), st.integers(min_value=0, max_value=700)),
        st.tuples(st.just("seek"), OFF),
        st.tuples(st.just("roundtrip")),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_cursor_matches_model_and_mark_delete_only_moves_back_on_seek(ops: list[tuple]) -> None:
    cursor = new_cursor("sub", ConsumerType.Shared, 0)
    now = 0
    floor = 0  # model: everything below is acked
    acked: set[int] = set()
    claims: dict[str, set[int]] = {}
    redelivery: dict[int, int] = {}
    alive: dict[str, int] = {}  # name -> lease expiry

    def is_acked(o: int) -> bool:
        return o < floor or o in acked

    def md() -> int:
        o = floor
        while o in acked:
            o += 1
        return o

    def drop(name: str) -> None:
        alive.pop(name, None)
        for o in claims.pop(name, set()):
            if o >= md():
                redelivery[o] = redelivery.get(o, 0) + 1

    def expire() -> None:
        for name in [n for n, exp in alive.items() if exp <= now]:
            drop(name)

    for op in ops:
        before = cursor.mark_delete
        kind = op[0]
        if kind == "ack":
            cursor.ack(op[1])
            for o in op[1]:
                if o >= md():
                    acked.add(o)
                    redelivery.pop(o, None)
                    for s in claims.values():
                        s.discard(o)
        elif kind == "cumulative":
            cursor.ack_cumulative(op[1])
            floor = max(floor, op[1] + 1)
        elif kind == "claim":
            name, offs = op[1], op[2]
            offs = [o for o in offs if not is_acked(o)]  # dispatch never claims acked offsets
            if name in alive:
                cursor.claim(name, offs)
                claims.setdefault(name, set()).update(offs)
            else:
                with pytest.raises(NotAllowedError):
                    cursor.claim(name, offs)
        elif kind == "release":
            name, offs = op[1], op[2]
            cursor.release(name, offs)
            for o in set(offs):
                if o in claims.get(name, set()) and not is_acked(o):
                    claims[name].discard(o)
                    redelivery[o] = redelivery.get(o, 0) + 1
        elif kind == "join":
            name = op[1]
            expire()
            if name in alive:
                with pytest.raises(ConsumerBusy):
                    cursor.add_consumer(name, ConsumerType.Shared, now_ms=now, lease_ms=LEASE)
            else:
                cursor.add_consumer(name, ConsumerType.Shared, now_ms=now, lease_ms=LEASE)
                alive[name] = now + LEASE
        elif kind == "leave":
            cursor.remove_consumer(op[1])
            drop(op[1])
        elif kind == "tick":
            now += op[1]
            cursor.expire_consumers(now)
            expire()
        elif kind == "seek":
            cursor.seek(op[1])
            floor, acked, redelivery = op[1], set(), {}
            claims = {}
        else:
            cursor = Cursor.from_json(json.loads(json.dumps(cursor.to_json())))

        # markDelete never moves backwards except through seek
        if kind != "seek":
            assert cursor.mark_delete >= before
        # compare with the model (offsets below markDelete are forgotten by both)
        mark = md()
        acked = {o for o in acked if o >= mark}
        floor = mark
        assert cursor.mark_delete == mark
        assert acked_set(cursor, 50) == {o for o in range(50) if is_acked(o)}
        assert set(cursor.acked.offsets()) == acked
        live_claims = {n: {o for o in s if not is_acked(o)} for n, s in claims.items()}
        got_claims = {n: set(rs.offsets()) for n, rs in cursor.claims.items() if rs}
        assert got_claims == {n: s for n, s in live_claims.items() if s}
        redelivery = {o: c for o, c in redelivery.items() if not is_acked(o)}
        assert cursor.redelivery == redelivery
        assert set(cursor.consumers) == set(alive)
        # no acked offset is ever claimed or counted
        for rs in cursor.claims.values():
            for o in rs.offsets():
                assert not is_acked(o)
