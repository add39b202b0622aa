"""What a consumer tailing an object store pays per poll, and how late a message after a long idle is.

On an object store every request is billed and takes tens of milliseconds, and there are no
notifications: a consumer learns of a commit by reading the next log version (a GET that answers 404
while nothing is new).  These tests pin the request budget of an idle poll and the latency bound
after ten idle minutes (a fake clock, no sleeping), on an in-process ``memory://`` store, whose
requests are counted exactly like S3's.

The consumer's dispatcher thread is parked by holding its ``_tick_lock``: the test then runs the
dispatch rounds (``_tick``) itself, so it decides how many there are and when they happen.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pytest

from broker_core import Client, ConsumerType, InitialPosition
from broker_core.broker.tenancy import topic_dir
from broker_core.client import consumer_acks, consumer_dispatch
from broker_core.client.consumer_acks import CURSOR_POLL_MIN_S
from broker_core.errors import SegmentCorrupted
from broker_core.log import state_store, transaction_log
from broker_core.log.gaps import REMOTE_VERIFY_PERIOD_S
from broker_core.naming import TopicName
from broker_core.producer.bulk import to_segment_rows
from broker_core.subscription import cursor_store
from broker_core.topic import watch
from broker_core.topic.topic_log import TopicLog


def memory_root() -> str:
    return f"memory://tail{uuid.uuid4().hex[:12]}/root"


def foreign_append(client: Client, topic: str, value: bytes) -> None:
    """Commit one message as another process would: through a handle of its own, so nothing in this
    process is woken except by what the consumer reads from storage."""
    log = TopicLog(client._broker.io, topic_dir(TopicName.parse(topic)))
    rows, _ = to_segment_rows(pa.table({"value": [value]}), publish_time_ms=int(time.time() * 1000),
                              max_message_size=1 << 20, default_producer="elsewhere")
    log.append(rows, layout=[1])


def requests(client: Client) -> dict[str, int]:
    return dict(client._broker.io.request_counts)


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}


@contextmanager
def parked(consumer: Any) -> Iterator[None]:
    """The dispatcher thread waits (after its current round) until the block ends."""
    with consumer._tick_lock:
        yield


@pytest.mark.parametrize("consumer_type", [ConsumerType.Exclusive, ConsumerType.Shared])
def test_an_idle_poll_is_one_get_of_the_next_log_version(consumer_type: ConsumerType) -> None:
    client = Client(memory_root())
    try:
        consumer = client.subscribe("t", "s", consumer_type=consumer_type, initial_position=InitialPosition.Earliest)
        with parked(consumer):
            consumer._tick()  # settle: the first round after subscribing
            before = requests(client)
            for _ in range(20):
                consumer._tick()
            assert delta(requests(client), before) == {"GET": 20}  # no HEAD, LIST or PUT: one 404 per poll

            # the cursor is re-read from storage once it is CURSOR_POLL_MIN_S old (a second GET, once)
            part = consumer._parts[0]
            when, version, doc = part.store._known
            part.store._known = (when - CURSOR_POLL_MIN_S - 1, version, doc)
            before = requests(client)
            consumer._tick()
            consumer._tick()
            assert delta(requests(client), before) == {"GET": 3}

            # the tip's checks (cleaned up? a gap?) are two HEADs once per REMOTE_VERIFY_PERIOD_S
            part.log.log._verified_s -= REMOTE_VERIFY_PERIOD_S + 1
            before = requests(client)
            consumer._tick()
            consumer._tick()
            assert delta(requests(client), before) == {"GET": 2, "HEAD": 2}
    finally:
        client.close()


class FakeTime:
    """``time`` for the modules of the consumer's dispatch path: monotonic time only moves when the
    test says so; everything else is the real module."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.offset_s

    def time(self) -> float:
        return time.time() + self.offset_s

    def sleep(self, seconds: float) -> None:
        self.offset_s += seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def test_the_first_message_after_ten_idle_minutes_arrives_within_the_default_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ten minutes of idle polling on a fake clock (each round, then the clock jumps by the wait the
    dispatcher asks for), then a commit: the consumer's next poll is at most the default
    ``newEntriesCheckMaxDelayMillis`` (1 s) away and that one round delivers it.  The idle minutes
    cost about one GET a second."""
    fake = FakeTime()
    for module in (consumer_dispatch, consumer_acks, transaction_log, state_store, cursor_store, watch):
        monkeypatch.setattr(module, "time", fake)
    client = Client(memory_root())
    try:
        consumer = client.subscribe("t", "s", consumer_type=ConsumerType.Exclusive,
                                    initial_position=InitialPosition.Earliest)
        cap_s = client._broker.config.new_entries_check_max_delay_millis / 1000
        assert cap_s == 1.0  # the documented default
        with parked(consumer):
            consumer._tick()
            before = requests(client)
            rounds = 0
            waits: list[float] = []
            start = fake.monotonic()
            while fake.monotonic() - start < 600:
                wait_s = consumer._next_wait_s()
                waits.append(wait_s)
                fake.sleep(wait_s)
                consumer._tick()
                rounds += 1
            idle = delta(requests(client), before)
            assert max(waits) <= cap_s
            # the grace at the base interval after the subscription's first round, a few rounds to
            # back off to the cap, then one round per cap
            schedule = consumer._schedule
            assert rounds <= schedule.grace_s / schedule.base_s + 20 + 600 / cap_s
            # per second: one GET of the next log version; every 5 s a GET of the cursor; every 10 s
            # the tip's two HEADs and the lease renewal (a cursor commit: GETs, a HEAD of the topic's
            # anchor, a PUT).  Before: a GET and HEAD of the cursor and a GET of its floor every poll.
            assert idle.get("GET", 0) <= 1.6 * 600 and idle.get("HEAD", 0) <= 0.32 * 600, idle
            assert idle.get("PUT", 0) <= 61 and idle.get("LIST", 0) <= 2, idle  # (old cursor versions' cleanup)

            foreign_append(client, "t", b"after ten idle minutes")  # just after a poll: the worst case
            wait_s = consumer._next_wait_s()
            assert wait_s <= cap_s
            fake.sleep(wait_s)
            consumer._tick()
            assert consumer.receive(timeout_millis=0).data() == b"after ten idle minutes"
    finally:
        client.close()


def test_an_ack_flush_in_flight_never_holds_back_an_in_order_read() -> None:
    """On an object store an acknowledgment flush takes round trips (hundreds of ms); the Exclusive
    dispatcher used to wait for it on every round.  Now it reads on while the flush is in flight, and
    an acknowledgment being flushed still counts as acknowledged: a rewind never delivers it again."""
    client = Client(memory_root())
    try:
        consumer = client.subscribe("t", "s", consumer_type=ConsumerType.Exclusive,
                                    initial_position=InitialPosition.Earliest)
        producer = client.create_producer("t")
        producer.send(b"m1")
        producer.send(b"m2")
        m1, m2 = consumer.receive(10_000), consumer.receive(10_000)
        entered, release = threading.Event(), threading.Event()
        commit = consumer._commit_acks

        def slow_commit(acks: Any, cumulative: Any) -> None:
            entered.set()
            assert release.wait(30)
            commit(acks, cumulative)

        consumer._commit_acks = slow_commit  # type: ignore[method-assign]
        consumer.acknowledge(m2)
        assert entered.wait(10)  # the flush of m2's ack is in flight, and stays so
        consumer.redeliver_unacknowledged_messages()  # rewinds to m1: m2 must be skipped (being flushed)
        producer.send(b"m3")
        again = consumer.receive(10_000)
        after = consumer.receive(10_000)  # the old code waited here until the flush ended: a Timeout
        assert (again.data(), after.data()) == (b"m1", b"m3")
        assert again.message_id() == m1.message_id()
        release.set()
        consumer.acknowledge(again)
        consumer.acknowledge(after)
        consumer.close()
        cursor = client._broker.cursor_store(TopicName.parse("t"), "s").load()[1]
        assert cursor is not None and cursor.mark_delete == 3
    finally:
        client.close()


def test_a_polled_commit_segment_is_fetched_while_the_poll_reads_on() -> None:
    """A tailing consumer's poll starts the GET of the segment a new commit adds as soon as the commit
    is parsed; the read that follows takes it (no second request).  Nobody waiting: no prefetch.  A
    prefetched read that failed fails the read that takes it, as a direct read would."""
    client = Client(memory_root())
    try:
        io = client._broker.io
        path = topic_dir(TopicName.parse("t"))
        TopicLog(io, path).create(name="persistent://public/default/t")
        foreign_append(client, "t", b"first")
        tail = TopicLog(io, path)
        tail.snapshot()
        assert tail._prefetcher is not None

        foreign_append(client, "t", b"nobody waits")
        snap = tail.snapshot()
        assert not tail._prefetcher._pending  # a producer or a job polling its log reads nothing ahead

        waiting = threading.Event()
        tail.add_waiter(waiting)
        foreign_append(client, "t", b"tailed")
        snap = tail.snapshot()
        seg = snap.segments[-1]
        pending = tail._prefetcher._pending[seg.path]
        pending.result(timeout=10)  # (the test waits for the background read to finish)
        before = requests(client)
        rows = tail.segment_table(seg)
        assert rows.column("value").to_pylist() == [b"tailed"]
        assert delta(requests(client), before) == {}  # the read was already done

        foreign_append(client, "t", b"lost")
        last = TopicLog(io, path).snapshot().segments[-1]
        io.delete(f"{path}/{last.path}")  # the file goes missing before the poll fetches it
        snap = tail.snapshot()
        with pytest.raises(SegmentCorrupted):
            tail.segment_table(snap.segments[-1])
        tail.remove_waiter(waiting)
    finally:
        client.close()


@pytest.mark.parametrize(("consumer_type", "expected"), [
    # the commit, the 404 of the next version, the segment (fetched while the 404 is read)
    (ConsumerType.Exclusive, {"GET": 3}),
    # ... and the claim's cursor commit: its next version (404), the version it builds on, the PUT, the
    # deletion tombstone's HEAD after it and the cleanup floor (state_store.py, D65)
    (ConsumerType.Shared, {"GET": 6, "HEAD": 1, "PUT": 1}),
])
def test_a_round_that_finds_a_commit_makes_no_request_twice(consumer_type: ConsumerType,
                                                            expected: dict[str, int]) -> None:
    """Each request of a round is a round trip on an object store: the log is polled once per round
    (the claim and the in-order read use that poll) and a segment is read without a HEAD first."""
    client = Client(memory_root())
    try:
        consumer = client.subscribe("t", "s", consumer_type=consumer_type, initial_position=InitialPosition.Earliest)
        with parked(consumer):
            consumer._tick()
            foreign_append(client, "t", b"x")
            before = requests(client)
            consumer._tick()
            assert delta(requests(client), before) == expected
            assert consumer.receive(timeout_millis=0).data() == b"x"
    finally:
        client.close()
