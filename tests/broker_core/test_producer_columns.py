"""The producer's queue as columns (``QueuedBatch``, D103): plain sends hold no object of their own, and
batches mixing plain sends with sends that have a ``PendingMessage`` (a key, a callback, a waiter, a
delivery time, an explicit sequence id deduplicated) keep their order, their entries and their ids."""

from __future__ import annotations

import gc
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from broker_core import BatchingType, BrokerConfig, Client, MessageId, Result
from broker_core.client.builder import PendingMessage, QueuedBatch, plan_entries


class Ids:
    """A ``send_async`` callback per payload that records the ``MessageId`` it was given."""

    def __init__(self) -> None:
        self.by_payload: dict[bytes, MessageId] = {}
        self.results: list[Result] = []
        self._lock = threading.Lock()

    def __call__(self, payload: bytes) -> Any:
        def callback(result: Result, msg_id: MessageId | None) -> None:
            with self._lock:
                self.results.append(result)
                assert msg_id is not None
                self.by_payload[payload] = msg_id

        return callback


def read_ids(client: Client, topic: str) -> dict[bytes, MessageId]:
    reader = client.create_reader(topic, MessageId.earliest)
    try:
        out = {}
        while reader.has_message_available():
            msg = reader.read_next(timeout_millis=5000)
            out[msg.data()] = msg.message_id()
        return out
    finally:
        reader.close()


@pytest.fixture
def client(tmp_path: Path) -> Any:
    made = Client(str(tmp_path))
    yield made
    made.close()


def test_queued_plain_sends_are_not_objects_the_garbage_collector_tracks(client: Client) -> None:
    """The regression D103 fixed: a ``PendingMessage`` per queued message, promoted to the oldest
    generation and scanned by every full collection."""
    producer = client.create_producer("t", batching_enabled=True, batching_max_messages=100_000,
                                      batching_max_publish_delay_ms=600_000, max_pending_messages=100_000)
    payloads = [b"m%d" % i for i in range(5000)]
    gc.collect()
    before = len(gc.get_objects())
    for payload in payloads:
        producer.send_async(payload, None)
    queued = len(gc.get_objects()) - before
    assert queued < 500, f"{queued} more tracked objects for {len(payloads)} queued plain sends"
    batch = producer._queues[0].batches[0]
    assert len(batch) == len(payloads) and not batch.extras
    producer.flush()
    assert list(read_ids(client, "t")) == payloads


def test_key_based_batches_mixing_plain_and_keyed_sends_hand_out_the_ids_read_back(client: Client) -> None:
    """Key-based batching reorders a batch; the callbacks' ids must still be their own messages'."""
    producer = client.create_producer("t", batching_enabled=True, batching_type=BatchingType.KeyBased,
                                      batching_max_publish_delay_ms=60_000)
    ids = Ids()
    expected = []
    for i in range(12):
        payload = b"m%d" % i
        if i % 3 == 0:
            producer.send_async(payload, None)  # plain: no key, nobody to hand an id to
        else:
            producer.send_async(payload, ids(payload), partition_key="ab"[i % 2])
            expected.append(payload)
    waited = producer.send(b"last", partition_key="a")  # a waiter in the same batch
    producer.flush()
    read = read_ids(client, "t")
    assert set(ids.by_payload) == set(expected)
    assert all(ids.by_payload[p] == read[p] for p in expected)
    assert waited == read[b"last"]
    # one entry per key, the keyless (plain) sends in one of their own
    assert len({(i.ledger_id(), i.entry_id()) for i in read.values()}) == 3


def test_a_delayed_send_between_plain_ones_is_an_entry_of_its_own_with_its_id(client: Client) -> None:
    producer = client.create_producer("t", batching_enabled=True, batching_max_publish_delay_ms=60_000)
    ids = Ids()
    producer.send_async(b"a", None)
    producer.send_async(b"delayed", ids(b"delayed"), deliver_after=timedelta(minutes=1))
    producer.send_async(b"b", None)
    producer.send_async(b"c", ids(b"c"))
    producer.flush()
    read = read_ids(client, "t")
    assert list(read) == [b"a", b"delayed", b"b", b"c"]
    assert ids.by_payload == {b"delayed": read[b"delayed"], b"c": read[b"c"]}
    assert read[b"delayed"].batch_index() == -1
    assert read[b"a"].entry_id() != read[b"b"].entry_id()


def test_dedup_in_a_batch_mixing_plain_sends_gives_a_dropped_waiter_the_minus_one_id(tmp_path: Path) -> None:
    client = Client(str(tmp_path), broker_config=BrokerConfig(broker_deduplication_enabled=True))
    try:
        producer = client.create_producer("t", producer_name="w", batching_enabled=True,
                                          batching_max_publish_delay_ms=60_000)
        ids = Ids()
        producer.send_async(b"s5", None, sequence_id=5)  # plain, with its own sequence id
        producer.send_async(b"s6", ids(b"s6"), sequence_id=6)
        producer.send_async(b"s6 again", None, sequence_id=6)  # plain, dropped
        producer.send_async(b"s4", ids(b"s4"), sequence_id=4)  # dropped
        producer.send_async(b"s7", ids(b"s7"), sequence_id=7)
        producer.flush()
        read = read_ids(client, "t")
        assert list(read) == [b"s5", b"s6", b"s7"]
        assert ids.results == [Result.Ok] * 3
        assert ids.by_payload[b"s6"] == read[b"s6"] and ids.by_payload[b"s7"] == read[b"s7"]
        assert (ids.by_payload[b"s4"].ledger_id(), ids.by_payload[b"s4"].entry_id()) == (-1, -1)
        assert producer.last_sequence_id() == 7
    finally:
        client.close()


def test_a_plain_batch_is_one_entry_in_send_order_and_a_keyed_one_is_reordered() -> None:
    plain = QueuedBatch(0.0)
    for i in range(3):
        plain.append(b"v", 1, i, 0)
    assert plan_entries(plain, batching=True, key_based=True) == (None, [3])
    assert plan_entries(plain, batching=False, key_based=False) == (None, [-3])
    keyed = QueuedBatch(0.0)
    for i, key in enumerate(["a", None, "a", "b"]):
        keyed.append(b"v", 1, i, 0, None if key is None else PendingMessage(key, None, None, None, None))
    assert plan_entries(keyed, batching=True, key_based=True) == ([0, 2, 1, 3], [2, 1, 1])
    assert plan_entries(keyed, batching=True, key_based=False) == (None, [4])
