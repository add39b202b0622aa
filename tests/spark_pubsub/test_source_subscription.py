"""Streaming queries as consumers of a subscription: the four subscription types, where a query
starts, when it acknowledges, and delayed delivery."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows
from source_job import (
    Collector,
    batch_sizes,
    create_partitioned,
    make_root,
    names,
    produce,
    run_available_now,
    source,
    start_continuous,
)

from broker_core import Client, ConsumerType, InitialPosition
from broker_core.broker.admin import Admin
from broker_core.broker.broker import Broker
from broker_core.subscription.cursor import Cursor
from spark_pubsub.options import SourceOptions, parse_options
from spark_pubsub.stream_reader import PubSubStreamReader

LONG_LEASE = 300_000  # ms: the tests' queries stop and start again; their claims must outlive the pauses
SHORT_LEASE = 10_000  # ms: for queries whose stop another query waits for


@pytest.fixture
def root(tmp_path: Path) -> str:
    return make_root(tmp_path / "root")


def subscription(
    spark: Any, root: str, topic: str, sub: str, kind: str, consumer: str, **options: Any
) -> Any:
    options.setdefault("subscriptionInitialPosition", "Earliest")
    options.setdefault("leaseRenewMs", LONG_LEASE)
    return source(
        spark, root, topic=topic, subscription=sub, subscriptionType=kind, consumerName=consumer, **options
    )


def cursors(root: str, topic: str, sub: str) -> dict[str, Cursor]:
    broker = Broker.for_url(root)
    out = {}
    for part in broker.partitions(topic):
        _, cursor = broker.cursor_store(part, sub).load()
        assert cursor is not None
        out[str(part)] = cursor
    return out


def next_offsets(root: str, topic: str) -> dict[str, int]:
    broker = Broker.for_url(root)
    return {str(p): broker.topic_log(p).snapshot().next_offset for p in broker.partitions(topic)}


def wait_for_consumers(root: str, topic: str, sub: str, expected: set[str], timeout_s: float = 30) -> None:
    """Poll the cursors until exactly ``expected`` are registered (a stopped query's Python process
    leaves as it exits, a moment after ``query.stop()`` returns)."""
    deadline = time.monotonic() + timeout_s
    while True:
        now_ms = int(time.time() * 1000)
        found = [set(c.live_consumers(now_ms)) for c in cursors(root, topic, sub).values()]
        if all(f == expected for f in found):
            return
        assert time.monotonic() < deadline, f"consumers {found}, expected {expected}"
        time.sleep(0.05)


def assert_all_acknowledged(root: str, topic: str, sub: str) -> None:
    ends = next_offsets(root, topic)
    for name, cursor in cursors(root, topic, sub).items():
        assert cursor.mark_delete == ends[name], name
        assert not any(cursor.claims.values()) and not cursor.acked


# -- Shared ----------------------------------------------------------------------------------------------


def test_shared_queries_run_in_turn_split_the_messages(spark: Any, root: str, tmp_path: Path) -> None:
    create_partitioned(root, "sh", 2)
    a, b = Collector(), Collector()

    def run(collector: Collector, name: str) -> None:
        run_available_now(
            subscription(spark, root, "sh", "s", "Shared", name), tmp_path / f"ck-{name}", collector
        )

    produce(root, "sh", names("r1", 40))
    run(a, "a")
    produce(root, "sh", names("r2", 40))
    run(b, "b")  # only what came after a's run: a acknowledged its batches when it finished
    produce(root, "sh", names("r3", 30))
    run(a, "a")
    assert set(a.values).isdisjoint(b.values)
    assert len(a.values) == len(set(a.values)) and len(b.values) == len(set(b.values))
    assert sorted(a.values + b.values) == sorted(names("r1", 40) + names("r2", 40) + names("r3", 30))
    assert sorted(b.values) == sorted(names("r2", 40))
    # an AvailableNow run plans once more after its last batch, so it leaves nothing unacknowledged
    assert_all_acknowledged(root, "sh", "s")


def test_shared_queries_running_together_split_the_messages(spark: Any, root: str, tmp_path: Path) -> None:
    Admin.open(root).create_topic("shc")  # a read never creates its topic
    a, b = Collector(), Collector()
    qa = start_continuous(
        subscription(spark, root, "shc", "s", "Shared", "a", maxMessagesPerTrigger=10), tmp_path / "ck-a", a
    )
    qb = start_continuous(
        subscription(spark, root, "shc", "s", "Shared", "b", maxMessagesPerTrigger=10), tmp_path / "ck-b", b
    )
    try:
        qa.processAllAvailable()
        qb.processAllAvailable()
        produce(root, "shc", names("m", 200))
        qa.processAllAvailable()
        qb.processAllAvailable()
        qa.processAllAvailable()
    finally:
        qa.stop()
        qb.stop()
    assert set(a.values).isdisjoint(b.values)
    assert sorted(a.values + b.values) == sorted(names("m", 200))
    assert a.values and b.values, (len(a.values), len(b.values))
    assert max(batch_sizes(qa) + batch_sizes(qb)) <= 10


# -- Key_Shared ------------------------------------------------------------------------------------------


def test_key_shared_gives_each_key_to_one_query(spark: Any, root: str, tmp_path: Path) -> None:
    create_partitioned(root, "ks", 2)
    a, b = (
        Collector(("key", "value", "offset", "partition")),
        Collector(("key", "value", "offset", "partition")),
    )

    # both run together, so the hash range is split between them (a run that ends leaves the
    # subscription: scheduled AvailableNow runs each drain it, tests/spark_pubsub/test_available_now_runs.py)
    qa = start_continuous(subscription(spark, root, "ks", "s", "Key_Shared", "a"), tmp_path / "ck-a", a)
    qb = start_continuous(subscription(spark, root, "ks", "s", "Key_Shared", "b"), tmp_path / "ck-b", b)
    try:
        qa.processAllAvailable()
        qb.processAllAvailable()
        produce(root, "ks", names("m", 120), keys=lambda i: f"key-{i % 24}")
        qa.processAllAvailable()
        qb.processAllAvailable()
        qa.processAllAvailable()
    finally:
        qa.stop()
        qb.stop()
    keys_a, keys_b = {r[0] for r in a.rows}, {r[0] for r in b.rows}
    assert keys_a and keys_b and keys_a.isdisjoint(keys_b)
    values = [r[1].decode() for r in a.rows + b.rows]
    assert sorted(values) == sorted(names("m", 120))
    for collector in (a, b):  # each key's messages in publish order
        per_key = defaultdict(list)
        for key, _, offset, partition in collector.rows:
            per_key[(key, partition)].append(offset)
        assert all(offsets == sorted(offsets) for offsets in per_key.values())


# -- Failover --------------------------------------------------------------------------------------------


def test_failover_has_one_active_query_per_partition(spark: Any, root: str, tmp_path: Path) -> None:
    create_partitioned(root, "fo", 2)
    a, b = Collector(("value", "partition")), Collector(("value", "partition"))
    # a stopped query leaves at once; the short lease only bounds the test if that ever fails
    qa = start_continuous(
        subscription(spark, root, "fo", "s", "Failover", "fa", leaseRenewMs=SHORT_LEASE), tmp_path / "ck-a", a
    )
    qb = start_continuous(
        subscription(spark, root, "fo", "s", "Failover", "fb", leaseRenewMs=SHORT_LEASE), tmp_path / "ck-b", b
    )
    try:
        qa.processAllAvailable()
        qb.processAllAvailable()
        # partitions go to the consumers sorted by name: 0 -> fa, 1 -> fb
        produce(root, "fo", [f"p{i % 2}-{i}" for i in range(40)], partition=[i % 2 for i in range(40)])
        qa.processAllAvailable()
        qb.processAllAvailable()
        assert sorted(a.values) == sorted(f"p0-{i}" for i in range(0, 40, 2))
        assert sorted(b.values) == sorted(f"p1-{i}" for i in range(1, 40, 2))
        # fb goes away: fa takes partition 1 over from where the cursor is
        qb.stop()
        wait_for_consumers(root, "fo", "s", {"fa"})
        produce(
            root, "fo", [f"p{i % 2}-{i}" for i in range(40, 60)], partition=[i % 2 for i in range(40, 60)]
        )
        qa.processAllAvailable()
    finally:
        qa.stop()
        qb.stop()
    taken_over = [v.decode() for v, p in a.rows if p == 1]
    assert sorted(taken_over) == sorted(f"p1-{i}" for i in range(41, 60, 2))  # b had acknowledged its batches
    assert sorted(set(a.values) | set(b.values)) == sorted(f"p{i % 2}-{i}" for i in range(60))


# -- Exclusive -------------------------------------------------------------------------------------------


def test_exclusive_refuses_a_second_query(spark: Any, root: str, tmp_path: Path) -> None:
    produce(root, "ex", names("m", 10))
    first = Collector()
    query = start_continuous(
        subscription(spark, root, "ex", "s", "Exclusive", "one", leaseRenewMs=SHORT_LEASE),
        tmp_path / "ck-1",
        first,
    )
    try:
        query.processAllAvailable()
        assert first.values == names("m", 10)
        second = start_continuous(
            subscription(spark, root, "ex", "s", "Exclusive", "two"), tmp_path / "ck-2", Collector()
        )
        with pytest.raises(Exception, match="exclusive subscription 's' already has consumer 'one'"):
            second.awaitTermination()
    finally:
        query.stop()
    # once the first one is gone (a stopped query leaves), another may consume, from where the cursor is
    wait_for_consumers(root, "ex", "s", set())
    produce(root, "ex", names("n", 5))
    third = Collector()
    run_available_now(subscription(spark, root, "ex", "s", "Exclusive", "three"), tmp_path / "ck-3", third)
    assert third.values == names("n", 5)


# -- where a query starts, and when it acknowledges -------------------------------------------------------


def test_query_without_checkpoint_starts_from_the_cursor(spark: Any, root: str, tmp_path: Path) -> None:
    produce(root, "cur", names("m", 50))
    client = Client(root)
    consumer = client.subscribe(
        "cur", "s", consumer_type=ConsumerType.Exclusive, initial_position=InitialPosition.Earliest
    )
    for _ in range(30):
        msg = consumer.receive(5000)
    consumer.acknowledge_cumulative(msg)
    consumer.close()
    client.close()

    got = Collector()
    run_available_now(subscription(spark, root, "cur", "s", "Exclusive", "q1"), tmp_path / "ck-1", got)
    assert got.values == names("m", 20, start=30)  # not the 30 the client acknowledged

    # a new subscription starts at its initial position: Latest by default
    late = Collector()
    df = source(spark, root, topic="cur", subscription="late", subscriptionType="Shared", consumerName="q2")
    run_available_now(df, tmp_path / "ck-2", late)
    produce(root, "cur", names("n", 5))
    run_available_now(df, tmp_path / "ck-2", late)
    assert late.values == names("n", 5)


@pytest.mark.parametrize("kind", ["Exclusive", "Shared"])
def test_acknowledgment_follows_the_batches(spark: Any, root: str, tmp_path: Path, kind: str) -> None:
    produce(root, "ack", names("m", 50))

    def run() -> Any:
        df = subscription(spark, root, "ack", "s", kind, "q", maxMessagesPerTrigger=10)
        return run_available_now(df, tmp_path / "ck", got)

    got = Collector()
    query = run()
    assert batch_sizes(query) == [10] * 5
    # Spark commits a batch only when it plans the next one, so the last batch's commit never comes in
    # this run; but the run plans once more to find it is done, and that acknowledges the last batch
    assert_all_acknowledged(root, "ack", "s")
    produce(root, "ack", names("n", 5))
    query = run()  # from the checkpoint: only the new messages
    assert batch_sizes(query) == [5]
    assert_all_acknowledged(root, "ack", "s")
    assert got.values == names("m", 50) + names("n", 5)


def test_redelivered_messages_carry_their_redelivery_count(spark: Any, root: str, tmp_path: Path) -> None:
    produce(root, "rd", names("m", 30))
    client = Client(root)
    consumer = client.subscribe(
        "rd",
        "s",
        consumer_type=ConsumerType.Shared,
        receiver_queue_size=5,
        initial_position=InitialPosition.Earliest,
    )
    unacked = [consumer.receive(5000).data().decode() for _ in range(3)]
    consumer.close()  # leaves: what it held goes back to the subscription, counted as redelivered
    client.close()
    got = Collector(("value", "redeliveryCount"))
    run_available_now(subscription(spark, root, "rd", "s", "Shared", "q"), tmp_path / "ck", got)
    counts = {v.decode(): c for v, c in got.rows}
    assert sorted(counts) == sorted(names("m", 30))
    assert all(counts[v] == 1 for v in unacked)  # delivered once before
    assert set(counts.values()) == {0, 1}  # the rest: prefetched ones 1 too, never delivered ones 0


# -- delayed delivery ------------------------------------------------------------------------------------


def test_delayed_messages_are_held_back_for_shared_and_key_shared_only(
    spark: Any, root: str, tmp_path: Path
) -> None:
    now = int(time.time() * 1000)
    values = names("now", 10) + names("due", 3) + names("later", 5)
    deliver = [None] * 10 + [now - 1000] * 3 + [now + 3_600_000] * 5
    produce(root, "dly", values, keys=lambda i: f"k{i % 4}", deliver_at=deliver)
    results = {}
    for kind in ("Shared", "Key_Shared", "Exclusive"):
        got = Collector()
        run_available_now(subscription(spark, root, "dly", f"sub-{kind}", kind, "q"), tmp_path / kind, got)
        results[kind] = sorted(got.values)
    ready = sorted(names("now", 10) + names("due", 3))
    assert results["Shared"] == ready and results["Key_Shared"] == ready
    assert results["Exclusive"] == sorted(values)


# -- the driver side in this process (no Spark): restarts and fairness --------------------------------------


def stream_reader(root: str, **options: str) -> PubSubStreamReader:
    values = {k.lower(): v for k, v in options.items()}
    values["path"] = root
    return PubSubStreamReader(parse_options(SourceOptions, values))


def claimed_values(reader: PubSubStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[str]:
    return [
        v.decode()
        for p in reader.partitions(start, end)
        for b in reader.read(p)
        for v in b.column("value").to_pylist()
    ]


def test_a_restarted_query_takes_back_what_its_dead_run_had_claimed(root: str) -> None:
    produce(root, "orph", names("m", 30))
    options = {
        "topic": "orph",
        "subscription": "s",
        "subscriptionType": "Shared",
        "consumerName": "c",
        "subscriptionInitialPosition": "Earliest",
        "leaseRenewMs": str(LONG_LEASE),
    }
    dead = stream_reader(root, **options)
    start = dead.initialOffset()
    first = dead.latestOffset(start, ReadMaxRows(20))
    assert len(claimed_values(dead, start, first)) == 20
    # the run dies here, after claiming but before Spark wrote the batch to its offset log; the restart
    # (same checkpoint, same consumerName) plans that batch again from the same start
    restarted = stream_reader(root, **options)
    again = restarted.latestOffset(start, ReadMaxRows(20))
    assert sorted(claimed_values(restarted, start, again)) == sorted(names("m", 20))
    assert set(again["redelivery"]["persistent://public/default/orph"].values()) == {1}
    # and a batch that completed is acknowledged as soon as the next one is planned
    rest = restarted.latestOffset(again, ReadMaxRows(20))
    assert sorted(claimed_values(restarted, again, rest)) == sorted(names("m", 10, start=20))
    restarted.latestOffset(rest, ReadMaxRows(20))
    assert_all_acknowledged(root, "orph", "s")
    restarted.stop()


def test_a_claim_shares_the_trigger_budget_between_partitions(root: str) -> None:
    create_partitioned(root, "fair", 3)
    produce(root, "fair", names("big", 500), partition=[0] * 500)
    produce(root, "fair", names("small", 20), partition=[1] * 20)
    reader = stream_reader(
        root,
        topic="fair",
        subscription="s",
        subscriptionType="Shared",
        consumerName="c",
        subscriptionInitialPosition="Earliest",
        leaseRenewMs=str(LONG_LEASE),
    )
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(100))
    taken = Counter(v.split("-")[0] for v in claimed_values(reader, start, end))
    assert taken == {"big": 80, "small": 20}  # not 100 from the first partition with a backlog
    reader.stop()
