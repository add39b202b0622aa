"""A stateful model test of subscriptions at the cursor + dispatch level.

Hypothesis drives random sequences of produce / join / receive / ack / nack / flush / crash /
advance-time / leave against one durable subscription on one internal topic, and checks every step
against an in-memory model of what Pulsar promises.  No threads and no storage are involved, so
thousands of steps run in seconds and every failure replays exactly:

- the log is a list of (key, sticky hash) served through the two methods dispatch reads
  (``snapshot`` and ``read``);
- the cursor lives in a ``MemoryCursorStore`` (every update is a JSON round trip, as on storage);
- each consumer is a real ``SubscriptionPart`` (join, renew with expiry, leave, Shared/Key_Shared
  claims through ``broker_core.subscription.dispatch`` and ``key_shared.selector_for``, the Failover election)
  plus the consumer's bookkeeping, modelled here on the cursor API exactly as the client documents
  it: acks are grouped and committed at a flush (``Cursor.ack``), negative acks are committed at a
  flush (``Cursor.release`` for claims, ``Cursor.count_redelivery`` plus a rewind for Exclusive, a
  rewind alone for Failover), Exclusive/Failover read in order from markDelete skipping what they
  hold locally, the active Failover consumer records what it reads (``claim_in_order``, which counts
  a message read again), and the DLQ decision is the client's own ``DeadLetters.over_limit`` /
  ``should_dead_letter``;
- time is an integer the test moves; a *crash* is a consumer that stops renewing: what it had not
  committed dies with it, and its claims come back (redelivery count + 1) once its lease has run out
  and someone commits.

Checked on every step (``invariant``) and at delivery time:

- the cursor's acked set equals the acks the model committed; markDelete never moves backwards;
  redelivery counts equal the model's;
- Shared / Key_Shared: claims are disjoint, unacked, held only by registered consumers and equal to
  what each consumer holds; a message is never handed to a consumer while another registered one
  (live, or crashed with a lease that has not run out) holds it;
- Key_Shared: when a consumer receives a message, every earlier unacknowledged message of the same
  key is held by that same consumer, so it never gets a later message of a key while an earlier one
  is unacked by someone else (AUTO_SPLIT ranges, consistent hashing and STICKY);
- Exclusive / Failover: only the elected consumer reads; it reads in offset order with no gaps,
  rewinding only when it becomes active or commits a negative ack;
- Failover: a switch hands the old active consumer's unacknowledged messages to the new one, and
  every delivery after a message's first is counted exactly once, whoever handed it out before
  (a negative ack from a consumer that is no longer active counts nothing);
- the application never sees a redelivery count above ``max_redeliver_count``; a message is
  dead-lettered exactly when its count reached the maximum and it is due for one more redelivery;
- no message is delivered after its acknowledgment was committed, and none is acknowledged twice
  (except that a Failover switch may hand the old active consumer's unacked messages to the new one);
- at the end every consumer drains: every produced message is acknowledged, nothing is lost.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import hypothesis.strategies as st
import mmh3
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import event as hypothesis_event
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from broker_core.client.dead_letters import DeadLetters
from broker_core.client.policies import ConsumerDeadLetterPolicy
from broker_core.client.subscription_part import _SCAN_ROWS, MemoryCursorStore, SubscriptionPart
from broker_core.errors import ConsumerBusy
from broker_core.hashing import sticky_key_hash
from broker_core.message import BytesSchema
from broker_core.naming import TopicName
from broker_core.subscription.cursor import ConsumerType, Cursor, new_cursor
from broker_core.subscription.dispatch import cursor_selector, key_shared_candidates, shared_candidates

LEASE_MS = 1000
MAX_MESSAGES = 30  # per example: enough to interleave keys, small enough to check exhaustively
NAMES = ("c0", "c1", "c2", "c3")
KEYS = ("k0", "k1", "k2", "k3", "k4", "k5")
HASHES = tuple(sticky_key_hash(None, k) for k in KEYS)
# STICKY: each consumer name declares a fixed quarter of the 65536 slots; together they cover all.
STICKY_RANGES = {name: [[i * 16384, i * 16384 + 16383]] for i, name in enumerate(NAMES)}
CLAIMING = (ConsumerType.Shared, ConsumerType.KeyShared)


class MemoryLog:
    """What dispatch reads from a topic log (``snapshot`` and ``read``), in memory."""

    def __init__(self) -> None:
        self.hashes: list[int] = []

    def snapshot(self) -> SimpleNamespace:
        n = len(self.hashes)
        return SimpleNamespace(first_offset=0, next_offset=n, version=n)

    def read(self, start: int, end: int, **_: Any) -> tuple[pa.Table, np.ndarray]:
        n = max(0, end - start)
        table = pa.table({
            "sticky_key_hash": pa.array(self.hashes[start:end], pa.int32()),
            "deliver_at": pa.nulls(n, pa.timestamp("us", tz="UTC")),
            "chunk_id": pa.nulls(n, pa.int32()),
            "num_chunks": pa.nulls(n, pa.int32()),
        })
        return table, np.arange(start, start + n, dtype=np.int64)

    def read_until(self, start: int, end: int, **kwargs: Any) -> tuple[pa.Table, np.ndarray, int]:
        """``TopicLog.read_until``: no segment of this fake is ever damaged, so it reads to ``end``."""
        table, offsets = self.read(start, end, **kwargs)
        return table, offsets, end


@dataclass
class ModelConsumer:
    """One consumer: its ``SubscriptionPart`` and what its application and ack tracker hold."""

    name: str
    join_order: int
    part: SubscriptionPart
    lease_until: int
    crashed: bool = False
    held: dict[int, int] = field(default_factory=dict)  # received, unsettled: offset -> redelivery count
    pending_acks: list[int] = field(default_factory=list)  # acked (or dead-lettered), not flushed yet
    pending_releases: list[int] = field(default_factory=list)  # nacked, not committed yet
    lost: set[int] = field(default_factory=set)  # a crashed consumer's uncommitted acks / nacks
    last_read: int = -1  # Exclusive/Failover: the last offset read since the last rewind
    claimed: set[int] = field(default_factory=set)  # Failover: what the cursor records it was handed

    def holdings(self) -> set[int]:
        """Everything this consumer still has claimed, from the cursor's point of view."""
        return set(self.held) | set(self.pending_acks) | set(self.pending_releases) | self.lost


def event(text: str) -> None:
    """Count an event in Hypothesis' statistics (a no-op in the scripted scenarios below)."""
    with contextlib.suppress(InvalidArgument):
        hypothesis_event(text)


def _msg(count: int) -> Any:
    return SimpleNamespace(redelivery_count=lambda: count)


class SubscriptionModel(RuleBasedStateMachine):
    """One subscription on one internal topic; the subscription type is set by the subclass."""

    sub_type: ConsumerType = ConsumerType.Shared

    def __init__(self) -> None:
        super().__init__()
        self.log = MemoryLog()
        self.keys: list[int] = []
        self.store = MemoryCursorStore()
        self.now = 1_700_000_000_000
        self.consumers: dict[str, ModelConsumer] = {}
        self.next_join = 0
        self.acked: set[int] = set()  # committed acknowledgments
        self.expected_count: dict[int, int] = defaultdict(int)
        self.deliveries: dict[int, list[tuple[str, int]]] = defaultdict(list)  # to the application
        self.dead_lettered: dict[int, list[int]] = defaultdict(list)  # offset -> counts when sent
        self.last_mark_delete = 0
        self.partition = -1
        self.key_shared: dict[str, Any] | None = None
        self.max_redeliver = 1
        self.dlq = DeadLetters(None, ConsumerDeadLetterPolicy(1), "sub", retry_enabled=False)  # type: ignore[arg-type]

    @initialize(
        partition=st.sampled_from([-1, 0, 1, 2]),
        ks_mode=st.sampled_from(["AutoSplit", "ConsistentHashing", "Sticky"]),
        max_redeliver=st.integers(1, 2),
    )
    def setup(self, partition: int, ks_mode: str, max_redeliver: int) -> None:
        self.max_redeliver = max_redeliver
        # the client's DLQ rules: ``over_limit`` at delivery, ``should_dead_letter`` at a redelivery
        self.dlq = DeadLetters(None, ConsumerDeadLetterPolicy(max_redeliver), "sub",  # type: ignore[arg-type]
                               retry_enabled=False)
        self.partition = partition if self.sub_type == ConsumerType.Failover else -1
        if self.sub_type == ConsumerType.KeyShared:
            self.key_shared = {
                "mode": "Sticky" if ks_mode == "Sticky" else "AutoSplit",
                "allowOutOfOrder": False,
                "consistentHashing": ks_mode == "ConsistentHashing",
            }
        # The subscription exists at the earliest position before anyone joins (as after
        # ``create_subscription``), so messages produced before the first join are not skipped.
        self.store.update(lambda _: new_cursor("sub", ConsumerType.Exclusive, 0))

    # -- helpers --------------------------------------------------------------------------------

    def cursor(self) -> Cursor:
        _, cursor = self.store.load()
        assert cursor is not None
        return cursor

    def live(self) -> list[str]:
        return sorted(n for n, c in self.consumers.items() if not c.crashed)

    def holding(self) -> list[str]:
        return [n for n in self.live() if self.consumers[n].holdings()]

    def update(self, fn: Any) -> None:
        """Commit ``fn(cursor)`` (a cursor method call) as the consumer thread does."""

        def apply(cursor: Cursor | None) -> Cursor | None:
            if cursor is None:
                return None
            fn(cursor)
            return cursor

        self.store.update(apply)

    def make_part(self, name: str) -> SubscriptionPart:
        key_shared = None
        if self.key_shared is not None:
            key_shared = dict(self.key_shared)
            if key_shared["mode"] == "Sticky":
                key_shared["stickyRanges"] = STICKY_RANGES[name]
        return SubscriptionPart(
            name=TopicName.parse("model"), display_topic="model", partition=self.partition,
            log=self.log, store=self.store, subscription="sub",  # type: ignore[arg-type]
            consumer_name=name, sub_type=self.sub_type, priority_level=0, key_shared=key_shared,
            schema=BytesSchema(),
        )

    def add_consumer(self, name: str) -> None:
        """Join (``subscribe``); the model expects exactly the cursor's admission rules."""
        alive = [c for c in self.consumers.values() if c.lease_until > self.now]
        part = self.make_part(name)
        if self.sub_type == ConsumerType.Exclusive and alive:
            with pytest.raises(ConsumerBusy):
                part.join(now_ms=self.now, lease_ms=LEASE_MS, initial_offset=lambda: 0, auto_create=True)
            return
        part.join(now_ms=self.now, lease_ms=LEASE_MS, initial_offset=lambda: 0, auto_create=True)
        self.sync_expired()  # joining dropped the consumers whose lease had run out
        entry = self.cursor().consumers[name]
        assert entry.join_order == self.next_join
        self.next_join += 1
        self.consumers[name] = ModelConsumer(name=name, join_order=entry.join_order, part=part,
                                             lease_until=self.now + LEASE_MS)

    def sync_expired(self) -> None:
        """Consumers the cursor dropped must be crashed ones whose lease ran out; their claims return."""
        registered = set(self.cursor().consumers)
        for name in list(self.consumers):
            if name in registered:
                continue
            consumer = self.consumers.pop(name)
            assert consumer.crashed, f"live consumer {name} was dropped from the cursor"
            assert consumer.lease_until <= self.now, f"{name} was dropped before its lease ran out"
            event("a crashed consumer expired" + (" holding claims" if consumer.holdings() else ""))
            for off in self.claims_of(consumer):
                self.expected_count[off] += 1

    def claims_of(self, consumer: ModelConsumer) -> set[int]:
        """What the cursor should hold claimed for ``consumer`` (counted as redelivered if it leaves)."""
        if self.sub_type in CLAIMING:
            return consumer.holdings() - self.acked
        if self.sub_type == ConsumerType.Failover:
            return consumer.claimed - self.acked
        return set()

    def expire_now(self) -> None:
        """Any commit (every renew, claim and join does this) drops the consumers whose lease ran out."""
        self.update(lambda cursor: cursor.expire_consumers(self.now))
        self.sync_expired()

    def active(self) -> str | None:
        """Exclusive/Failover: who reads now (among consumers whose lease has not run out)."""
        alive = [c for c in self.consumers.values() if c.lease_until > self.now]
        if not alive:
            return None
        if self.partition < 0:  # non-partitioned: Pulsar 4.x's ring of name points vs the topic's hash
            def murmur(text: str) -> int:
                return mmh3.hash(text.encode(), 0, signed=False) & 0x7FFFFFFF

            ring = {murmur(f"{name}{j}"): name for name in sorted(c.name for c in alive) for j in range(100)}
            above = [p for p in sorted(ring) if p >= murmur("persistent://public/default/model")]
            return ring[above[0] if above else min(ring)]
        ordered = sorted(c.name for c in alive)  # partition i: candidates by name, i mod count
        return ordered[self.partition % len(ordered)]

    def renew_live(self) -> None:
        for name in self.live():
            consumer = self.consumers[name]
            assert consumer.part.renew(now_ms=self.now, lease_ms=LEASE_MS), f"{name} lost its lease"
            consumer.lease_until = self.now + LEASE_MS
        self.sync_expired()

    # -- the consumer's bookkeeping ---------------------------------------------------------------

    def fetch(self, consumer: ModelConsumer, limit: int) -> None:
        """Fill the consumer: claim (Shared, Key_Shared) or read in order (Exclusive, Failover)."""
        if self.sub_type in CLAIMING:
            offsets, cursor = consumer.part.claim(now_ms=self.now, limit=limit, delayed_enabled=False)
            self.sync_expired()
            if offsets:
                assert cursor is not None
                self.deliver(consumer, offsets, cursor)
            return
        cursor = self.cursor()
        part = consumer.part
        if not part.is_active(cursor, self.now):
            assert self.active() != consumer.name, f"{consumer.name} should be the active consumer"
            part.active, part.read_pos = False, -1
            return
        assert self.active() == consumer.name, f"{consumer.name} is active but {self.active()} should be"
        if not part.active or part.read_pos < 0:  # becoming active: start at the mark-delete position
            part.active, part.read_pos = True, cursor.mark_delete
            consumer.last_read = -1
        end = min(len(self.keys), part.read_pos + limit)
        candidates = np.arange(part.read_pos, max(end, part.read_pos), dtype=np.int64)
        part.read_pos = max(end, part.read_pos)
        fresh = ~cursor.is_acked(candidates)
        mine = consumer.holdings()
        offsets = [int(o) for o in candidates[fresh] if int(o) not in mine]
        if not offsets:
            return
        assert offsets[0] > consumer.last_read, f"{consumer.name} read {offsets} after {consumer.last_read}"
        gaps = [o for o in range(cursor.mark_delete, offsets[-1]) if o not in self.acked and o not in mine
                and o not in offsets]
        assert not gaps, f"{consumer.name} read {offsets} skipping unacked {gaps}"
        consumer.last_read = offsets[-1]
        if self.sub_type == ConsumerType.Failover:
            for off in offsets:  # read again while someone (maybe itself) has it claimed: a redelivery
                for other in self.consumers.values():
                    if off in other.claimed:
                        other.claimed.discard(off)
                        self.expected_count[off] += 1
            taken, claimed = part.claim_in_order(offsets, now_ms=self.now)
            assert claimed is not None and taken == offsets, f"{consumer.name} could not take {offsets}"
            consumer.claimed.update(offsets)
            cursor = claimed
            self.sync_expired()  # the commit dropped the consumers whose lease had run out
        self.deliver(consumer, offsets, cursor)

    def deliver(self, consumer: ModelConsumer, offsets: list[int], cursor: Cursor) -> None:
        """Hand offsets to the application, checking every delivery rule."""
        assert offsets == sorted(set(offsets)), f"offsets not ascending: {offsets}"
        others = [c for c in self.consumers.values() if c.name != consumer.name]
        for off in offsets:
            assert off not in self.acked, f"offset {off} delivered to {consumer.name} after its ack committed"
            count = cursor.redelivery.get(off, 0)
            assert count == self.expected_count[off], (
                f"offset {off}: redelivery count {count}, model says {self.expected_count[off]}"
            )
            if self.sub_type in CLAIMING:
                for other in others:
                    assert off not in other.holdings(), f"{off} to {consumer.name}, {other.name} holds it"
            if self.sub_type == ConsumerType.KeyShared:
                mine = consumer.holdings() | set(offsets)
                for earlier in range(off):
                    if self.keys[earlier] == self.keys[off] and earlier not in self.acked:
                        assert earlier in mine, (
                            f"{consumer.name} got offset {off} of key {KEYS[self.keys[off]]} while the "
                            f"earlier offset {earlier} is unacked and not held by it"
                        )
            if self.dlq.over_limit(_msg(count)):
                # redelivered past the limit (its consumer died holding it): straight to the DLQ
                assert count > self.max_redeliver
                event("dead-lettered at delivery")
                self.dead_lettered[off].append(count)
                consumer.pending_acks.append(off)
                continue
            assert count <= self.max_redeliver
            if self.sub_type != ConsumerType.Exclusive:  # every redelivery of a claim was counted
                assert len(self.deliveries[off]) == count, f"offset {off}: {self.deliveries[off]}, {count}"
            self.deliveries[off].append((consumer.name, count))
            consumer.held[off] = count

    def flush(self, consumer: ModelConsumer, *, acks: bool = True, releases: bool = True) -> None:
        """The consumer thread's tick: commit the grouped acks, then the redeliveries."""
        if acks and consumer.pending_acks:
            pending = sorted(set(consumer.pending_acks))
            for off in pending:
                # twice only when a Failover switch handed a held message to the new active consumer
                twice_ok = self.sub_type == ConsumerType.Failover
                assert off not in self.acked or twice_ok, f"offset {off} acked twice"
            self.update(lambda cursor: cursor.ack(pending))
            consumer.pending_acks.clear()
            self.acked.update(pending)
            for other in self.consumers.values():  # an ack settles a claim whoever holds it
                other.claimed.difference_update(pending)
        if releases and consumer.pending_releases:
            offsets = sorted(set(consumer.pending_releases))
            consumer.pending_releases.clear()
            if self.sub_type != ConsumerType.Failover:  # Failover counts when it reads them again
                for off in offsets:
                    if off not in self.acked:
                        self.expected_count[off] += 1
            if self.sub_type in CLAIMING:
                self.update(lambda cursor: cursor.release(consumer.name, offsets))
            else:
                if self.sub_type == ConsumerType.Exclusive:
                    self.update(lambda cursor: cursor.count_redelivery(offsets))
                if consumer.part.read_pos >= 0:  # rewind: read the negatively acked messages again
                    consumer.part.read_pos = min(consumer.part.read_pos, offsets[0])
                    consumer.last_read = -1
        self.sync_expired()

    # -- rules ----------------------------------------------------------------------------------

    @precondition(lambda self: len(self.keys) < MAX_MESSAGES)
    @rule(key=st.integers(0, len(KEYS) - 1), count=st.integers(1, 4))
    def produce(self, key: int, count: int) -> None:
        for _ in range(count):
            self.keys.append(key)
            self.log.hashes.append(HASHES[key])

    @precondition(lambda self: len(self.consumers) < len(NAMES))
    @rule(data=st.data())
    def join(self, data: st.DataObject) -> None:
        free = [n for n in NAMES if n not in self.consumers]
        self.add_consumer(data.draw(st.sampled_from(free), label="name"))

    @precondition(lambda self: bool(self.live()))
    @rule(data=st.data(), limit=st.integers(1, 4))
    def receive(self, data: st.DataObject, limit: int) -> None:
        self.fetch(self.consumers[data.draw(st.sampled_from(self.live()), label="consumer")], limit)

    @precondition(lambda self: any(self.consumers[n].held for n in self.live()))
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        holding = [n for n in self.live() if self.consumers[n].held]
        consumer = self.consumers[data.draw(st.sampled_from(holding), label="consumer")]
        off = data.draw(st.sampled_from(sorted(consumer.held)), label="offset")
        del consumer.held[off]
        consumer.pending_acks.append(off)

    @precondition(lambda self: any(self.consumers[n].held for n in self.live()))
    @rule(data=st.data(), everything=st.booleans())
    def nack(self, data: st.DataObject, everything: bool) -> None:
        """``negative_acknowledge`` one message, or ``redeliver_unacknowledged_messages`` (all held)."""
        holding = [n for n in self.live() if self.consumers[n].held]
        consumer = self.consumers[data.draw(st.sampled_from(holding), label="consumer")]
        if everything:
            offsets = sorted(consumer.held)
        else:
            offsets = [data.draw(st.sampled_from(sorted(consumer.held)), label="offset")]
        for off in offsets:
            count = consumer.held.pop(off)
            if self.dlq.should_dead_letter(_msg(count)):  # its redeliveries are used up
                assert count == self.max_redeliver, f"offset {off} dead-lettered at redelivery count {count}"
                event("dead-lettered at a negative ack")
                self.dead_lettered[off].append(count)
                consumer.pending_acks.append(off)
            else:
                assert count < self.max_redeliver
                consumer.pending_releases.append(off)

    @precondition(lambda self: bool(self.live()))
    @rule(data=st.data(), acks=st.booleans(), releases=st.booleans())
    def tick(self, data: st.DataObject, acks: bool, releases: bool) -> None:
        self.flush(self.consumers[data.draw(st.sampled_from(self.live()), label="consumer")],
                   acks=acks, releases=releases)

    @precondition(lambda self: bool(self.holding()))
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        """A consumer holding messages stops dead: no close, no more renewals, no more commits."""
        consumer = self.consumers[data.draw(st.sampled_from(self.holding()), label="consumer")]
        consumer.crashed = True
        consumer.lost = set(consumer.pending_acks) | set(consumer.pending_releases)
        consumer.pending_acks.clear()
        consumer.pending_releases.clear()

    @precondition(lambda self: bool(self.consumers))
    @rule(dt=st.integers(1, LEASE_MS // 3))
    def advance(self, dt: int) -> None:
        """Time passes; live consumers renew their leases (as they do every third of a lease)."""
        self.now += dt
        self.renew_live()

    @precondition(lambda self: any(c.crashed for c in self.consumers.values()))
    @rule()
    def wait_out_crashes(self) -> None:
        """Time passes, live consumers renewing, until every crashed consumer's lease has run out."""
        until = max(c.lease_until for c in self.consumers.values() if c.crashed)
        while self.now < until:
            self.now = min(until, self.now + LEASE_MS // 3)
            self.renew_live()

    @precondition(lambda self: bool(self.holding()))
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        """``close()`` while holding messages: flush acks, unregister; unacked claims return (+1)."""
        consumer = self.consumers[data.draw(st.sampled_from(self.holding()), label="consumer")]
        self.flush(consumer, acks=True, releases=False)
        holdings = self.claims_of(consumer)
        consumer.part.leave()
        del self.consumers[consumer.name]
        for off in holdings:
            self.expected_count[off] += 1
        self.sync_expired()

    # -- invariants -----------------------------------------------------------------------------

    @invariant()
    def cursor_matches_model(self) -> None:
        _, cursor = self.store.load()
        if cursor is None:
            return
        assert cursor.mark_delete >= self.last_mark_delete, "markDelete moved backwards"
        self.last_mark_delete = cursor.mark_delete
        n = len(self.keys)
        acked = cursor.is_acked(np.arange(n, dtype=np.int64))
        assert set(np.nonzero(acked)[0].tolist()) == self.acked, "cursor acks differ from committed ones"
        for off in range(cursor.mark_delete, n):
            if off not in self.acked:
                assert cursor.redelivery.get(off, 0) == self.expected_count[off], f"offset {off}: count"
        assert all(off < n and off not in self.acked for off in cursor.redelivery)
        assert set(self.consumers) == set(cursor.consumers)
        if self.sub_type == ConsumerType.Exclusive:
            assert len(cursor.consumers) <= 1
        if self.sub_type == ConsumerType.Exclusive:
            assert not any(cursor.claims.values()), "Exclusive cursors hold no claims"
            return
        owner: dict[int, str] = {}
        for name, ranges in cursor.claims.items():
            assert name in cursor.consumers, f"claims of unregistered consumer {name}"
            for off in ranges.offsets():
                assert off not in owner, f"offset {off} claimed by both {owner[off]} and {name}"
                assert off not in self.acked and off >= cursor.mark_delete
                owner[off] = name
        for name, consumer in self.consumers.items():
            claimed = set(cursor.claims[name].offsets()) if name in cursor.claims else set()
            assert claimed == self.claims_of(consumer), (
                f"{name}: cursor claims {sorted(claimed)}, model says {sorted(self.claims_of(consumer))}"
            )

    # -- the end: every consumer drains ---------------------------------------------------------

    def teardown(self) -> None:
        if self.cursor().consumers or self.keys:
            self.drain()

    def drain(self) -> None:
        for name in self.live():
            self.flush(self.consumers[name])
        if any(c.crashed for c in self.consumers.values()):
            self.wait_out_crashes()
        self.expire_now()
        if self.key_shared is not None and self.key_shared["mode"] == "Sticky":
            missing = [n for n in NAMES if n not in self.consumers]  # together they cover every slot
        else:
            missing = [] if self.live() else [NAMES[0]]
        for name in missing:
            self.now += 1
            self.renew_live()
            self.add_consumer(name)
        n = len(self.keys)
        for _ in range(2 * n + 4):
            if self.cursor().mark_delete >= n:
                break
            for name in self.live():
                consumer = self.consumers[name]
                consumer.pending_acks.extend(sorted(consumer.held))
                consumer.held.clear()
                self.flush(consumer)
                self.fetch(consumer, 1000)
            self.now += 1
            self.renew_live()
            self.cursor_matches_model()
        cursor = self.cursor()
        assert cursor.mark_delete == n, f"drained to {cursor.mark_delete} of {n} messages: some were lost"
        assert not cursor.acked and not any(cursor.claims.values()) and not cursor.redelivery
        assert self.acked == set(range(n))
        for off in range(n):
            seen = [count for _, count in self.deliveries[off]]
            if off in self.dead_lettered:
                # dead-lettered after exactly max_redeliver redeliveries
                assert min(self.dead_lettered[off]) >= self.max_redeliver
                if self.sub_type != ConsumerType.Exclusive:
                    # Failover too: a switch may hand one message to two consumers, but only the
                    # deliveries count, not the requests of a consumer that is no longer active
                    assert seen == list(range(self.max_redeliver + 1)), f"offset {off}: deliveries {seen}"
                else:
                    assert seen and max(seen) == self.max_redeliver, f"offset {off} dead-lettered: {seen}"
            else:
                assert seen, f"offset {off} was acknowledged without ever being delivered"
                assert max(seen) <= self.max_redeliver


SETTINGS = settings(
    max_examples=250,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class SharedModel(SubscriptionModel):
    sub_type = ConsumerType.Shared


class KeySharedModel(SubscriptionModel):
    sub_type = ConsumerType.KeyShared


class ExclusiveModel(SubscriptionModel):
    sub_type = ConsumerType.Exclusive


class FailoverModel(SubscriptionModel):
    sub_type = ConsumerType.Failover


TestShared = SharedModel.TestCase
TestKeyShared = KeySharedModel.TestCase
TestExclusive = ExclusiveModel.TestCase
TestFailover = FailoverModel.TestCase
TestShared.settings = TestKeyShared.settings = TestExclusive.settings = TestFailover.settings = SETTINGS


# -- scripted scenarios: the same model, driven by hand through the cases that matter most ----------


class Script:
    """Feeds a rule's ``data.draw`` calls from a list, so a scenario reads like a rule trace."""

    def __init__(self, *values: Any) -> None:
        self.values = list(values)

    def draw(self, strategy: Any, label: str | None = None) -> Any:
        return self.values.pop(0)


def machine(kind: type[SubscriptionModel], *, partition: int = -1, ks_mode: str = "AutoSplit",
            max_redeliver: int = 1) -> SubscriptionModel:
    m = kind()
    m.setup(partition=partition, ks_mode=ks_mode, max_redeliver=max_redeliver)
    return m


def test_shared_crash_redelivers_claims_once_the_lease_runs_out() -> None:
    m = machine(SharedModel)
    m.produce(key=0, count=4)
    m.join(Script("c0"))
    m.join(Script("c1"))
    m.receive(Script("c0"), limit=2)
    assert set(m.consumers["c0"].held) == {0, 1}
    m.crash(Script("c0"))
    m.receive(Script("c1"), limit=4)
    assert set(m.consumers["c1"].held) == {2, 3}, "a crashed consumer keeps its claims until its lease ends"
    m.advance(LEASE_MS // 3)
    m.receive(Script("c1"), limit=4)
    assert set(m.consumers["c1"].held) == {2, 3}
    m.wait_out_crashes()
    assert "c0" not in m.consumers
    m.receive(Script("c1"), limit=4)
    assert m.consumers["c1"].held == {0: 1, 1: 1, 2: 0, 3: 0}
    m.cursor_matches_model()
    m.teardown()


def test_key_shared_crash_hands_the_key_over_in_order() -> None:
    m = machine(KeySharedModel)
    m.produce(key=0, count=3)
    m.join(Script("c0"))
    m.receive(Script("c0"), limit=3)
    m.ack(Script("c0", 0))
    m.tick(Script("c0"), acks=True, releases=True)
    m.join(Script("c1"))
    m.produce(key=0, count=2)
    m.receive(Script("c1"), limit=4)  # whoever owns k0 now, 1 and 2 are still held by c0
    assert not m.consumers["c1"].held
    m.crash(Script("c0"))
    m.wait_out_crashes()
    m.receive(Script("c1"), limit=4)
    assert m.consumers["c1"].held == {1: 1, 2: 1, 3: 0, 4: 0}
    m.teardown()


def test_exclusive_negative_ack_dead_letters_after_max_redeliveries() -> None:
    m = machine(ExclusiveModel, max_redeliver=2)
    m.produce(key=0, count=2)
    m.join(Script("c0"))
    for count in range(2):
        m.receive(Script("c0"), limit=1)
        assert m.consumers["c0"].held == {0: count}
        m.nack(Script("c0", 0), everything=False)
        m.tick(Script("c0"), acks=True, releases=True)  # commits the redelivery and rewinds
    m.receive(Script("c0"), limit=1)
    assert m.consumers["c0"].held == {0: 2}
    m.nack(Script("c0", 0), everything=False)
    assert m.dead_lettered == {0: [2]}, "dead-lettered at the redelivery after the second one"
    m.teardown()
    assert [count for _, count in m.deliveries[0]] == [0, 1, 2]


def test_failover_switch_rewinds_the_new_active_consumer_to_mark_delete() -> None:
    m = machine(FailoverModel, partition=0)
    m.produce(key=0, count=4)
    m.join(Script("c1"))
    m.receive(Script("c1"), limit=3)
    m.ack(Script("c1", 0))
    m.tick(Script("c1"), acks=True, releases=True)
    m.join(Script("c0"))  # partition 0 goes to the first name in order: c0 takes over
    m.receive(Script("c1"), limit=4)
    assert set(m.consumers["c1"].held) == {1, 2}, "the old active consumer reads nothing more"
    m.receive(Script("c0"), limit=4)
    assert set(m.consumers["c0"].held) == {1, 2, 3}, "the new one starts at the mark-delete position"
    m.teardown()


# -- a claim over a long backlog reads a narrow window: it must choose exactly what a full scan does --


@settings(max_examples=100, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 9000),
    sub_type=st.sampled_from([ConsumerType.Shared, ConsumerType.KeyShared]),
    acked_share=st.sampled_from([0.0, 0.3, 0.9]),
    claimed_share=st.sampled_from([0.0, 0.2, 0.6]),
    held_run=st.sampled_from([0, 100, 3000, 6000]),
    limit=st.sampled_from([1, 10, 500, 1000, 5000]),
)
def test_claim_over_a_long_backlog_matches_a_full_scan(
    seed: int, n: int, sub_type: ConsumerType, acked_share: float, claimed_share: float, held_run: int,
    limit: int,
) -> None:
    rng = np.random.default_rng(seed)
    log = MemoryLog()
    log.hashes = [HASHES[k] for k in rng.integers(0, len(KEYS), n).tolist()]
    store = MemoryCursorStore()
    now = 1_700_000_000_000
    cursor = new_cursor("sub", sub_type, 0)
    key_shared = {"mode": "AutoSplit", "allowOutOfOrder": False, "consistentHashing": False}
    for name in NAMES[:3]:
        cursor.add_consumer(name, sub_type, now_ms=now, lease_ms=LEASE_MS,
                            key_shared=key_shared if sub_type == ConsumerType.KeyShared else None)
    # a prefix acknowledged in order, then a run of rows all acked or claimed (the usual shape: the
    # consumers' prefetch ahead of markDelete), then holes, claims of everyone, and free rows
    head = int(rng.integers(0, n // 4 + 1))
    cursor.ack(list(range(head)))
    rest = np.arange(head, n)
    u = rng.random(len(rest))
    owner = rng.integers(0, 3, len(rest))
    kind = np.where(u < acked_share, 1, np.where(u < acked_share + claimed_share, 2 + owner, 0))  # 0 free
    run = min(held_run, len(rest))
    mine_share = 1.0 if rng.random() < 0.5 else 0.8  # the claiming consumer, c1, holds all or most
    run_owner = np.where(rng.random(run) < mine_share, 1, owner[:run])
    kind[:run] = np.where(rng.random(run) < 0.3, 1, 2 + run_owner)
    cursor.ack(rest[kind == 1].tolist())
    for i, name in enumerate(NAMES[:3]):
        cursor.claim(name, rest[kind == 2 + i].tolist())
    store.update(lambda _: cursor)

    part = SubscriptionPart(
        name=TopicName.parse("model"), display_topic="model", partition=-1, log=log,  # type: ignore[arg-type]
        store=store, subscription="sub", consumer_name="c1", sub_type=sub_type, priority_level=0,
        key_shared=key_shared if sub_type == ConsumerType.KeyShared else None, schema=BytesSchema(),
    )
    before = store.load()[1]
    assert before is not None
    start = before.mark_delete
    full = part.window(start, min(n, start + _SCAN_ROWS))[0] if start < n else None
    if full is None:
        expected: list[int] = []
    elif sub_type == ConsumerType.Shared:
        expected = shared_candidates(before, full, now_ms=now, delayed_enabled=False, limit=limit).tolist()
    else:
        selector, names = cursor_selector(before, now)
        expected = key_shared_candidates(
            before, full, consumer="c1", hash_owner=selector.owner_of_hashes(full.hashes), owner_names=names,
            now_ms=now, delayed_enabled=False, allow_out_of_order=False, limit=limit,
        ).tolist()
    offsets, _ = part.claim(now_ms=now, limit=limit, delayed_enabled=False)
    assert offsets == expected
    if offsets:  # and the messages come from the rows the claim read
        assert part._claimed_rows is not None
