"""The producer: sends, argument checks, message fields, batching, compression, chunking, routing,
queue limits, deduplication and access modes, all observed through a reader or the files."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from async_facade import BOTH_CLIENTS, any_client

from broker_core import (
    AlreadyClosed,
    BatchingType,
    BrokerConfig,
    Client,
    CompressionType,
    HashingScheme,
    InvalidConfiguration,
    Message,
    MessageId,
    MessageTooBig,
    PartitionsRoutingMode,
    ProducerAccessMode,
    ProducerBusy,
    ProducerFenced,
    ProducerQueueIsFull,
    Result,
    StringSchema,
)
from broker_core.broker.broker import Broker
from broker_core.clock import ManualClock
from broker_core.hashing import java_string_hash, murmur3_32_hash

EPOCH_MS = 1_700_000_000_000


class Callbacks:
    """A ``send_async`` callback that records ``(result, message_id)`` in call order."""

    def __init__(self, expected: int) -> None:
        self.calls: list[tuple[Result, MessageId | None]] = []
        self._expected = expected
        self._lock = threading.Lock()
        self.all_done = threading.Event()

    def __call__(self, result: Any, msg_id: MessageId | None) -> None:
        with self._lock:
            self.calls.append((result, msg_id))
            if len(self.calls) >= self._expected:
                self.all_done.set()

    def wait(self) -> list[tuple[Result, MessageId | None]]:
        assert self.all_done.wait(10), f"only {len(self.calls)} of {self._expected} callbacks ran"
        return list(self.calls)

    def ids(self) -> list[MessageId]:
        out = []
        for result, msg_id in self.wait():
            assert result == Result.Ok
            assert msg_id is not None
            out.append(msg_id)
        return out


def read_all(client: Client, topic: str) -> list[Message]:
    reader = client.create_reader(topic, MessageId.earliest)
    try:
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(timeout_millis=5000))
        return out
    finally:
        reader.close()


def topic_dir(root: Path, local: str) -> Path:
    return root / "public" / "default" / "persistent" / local


@pytest.fixture
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """The sync client; tests marked ``BOTH_CLIENTS`` also run on the asyncio client."""
    with any_client(request, Client, str(tmp_path)) as c:
        yield c


def make_partitioned(root: Path, topic: str, partitions: int) -> None:
    Broker.for_url(str(root)).admin.create_partitioned_topic(topic, partitions)


# -- send / send_async --------------------------------------------------------------------------------


@BOTH_CLIENTS
def test_send_returns_the_message_id_the_reader_sees(client: Client) -> None:
    producer = client.create_producer("t")
    ids = [producer.send(b"m%d" % i) for i in range(3)]
    msgs = read_all(client, "t")
    assert [m.data() for m in msgs] == [b"m0", b"m1", b"m2"]
    assert [m.message_id() for m in msgs] == ids
    assert [i.entry_id() for i in ids] == [0, 1, 2]
    assert {i.ledger_id() for i in ids} == {ids[0].ledger_id()}
    assert ids[0].ledger_id() >= 0
    assert all(i.partition() == -1 for i in ids)
    assert producer.topic() == "persistent://public/default/t"


@BOTH_CLIENTS
def test_send_async_callback_gets_ok_and_the_message_id(client: Client) -> None:
    producer = client.create_producer("t")
    callbacks = Callbacks(expected=5)
    for i in range(5):
        assert producer.send_async(b"m%d" % i, callbacks) is None  # as the official client
    ids = callbacks.ids()
    assert ids == sorted(ids)
    assert len(set(ids)) == 5
    msgs = read_all(client, "t")
    assert [m.message_id() for m in msgs] == ids
    assert [m.data() for m in msgs] == [b"m%d" % i for i in range(5)]


@BOTH_CLIENTS
def test_send_async_without_a_callback_is_written_by_flush(client: Client) -> None:
    producer = client.create_producer("t", batching_enabled=True, batching_max_publish_delay_ms=60_000)
    producer.send_async(b"a", None)
    producer.send_async(b"b", None)
    producer.flush()
    assert [m.data() for m in read_all(client, "t")] == [b"a", b"b"]


def test_send_async_callback_must_be_callable(client: Client) -> None:
    producer = client.create_producer("t")
    with pytest.raises(ValueError, match="callback"):
        producer.send_async(b"x", "not callable")  # type: ignore[arg-type]
    assert read_all(client, "t") == []


@BOTH_CLIENTS
def test_producer_name_is_generated_or_given(client: Client) -> None:
    assert client.create_producer("t").producer_name() != client.create_producer("t").producer_name()
    named = client.create_producer("t", producer_name="orders-writer")
    assert named.producer_name() == "orders-writer"
    named.send(b"x")
    assert read_all(client, "t")[0].producer_name() == "orders-writer"


@BOTH_CLIENTS
def test_send_after_close_raises_already_closed(client: Client) -> None:
    producer = client.create_producer("t")
    producer.close()
    assert not producer.is_connected()
    with pytest.raises(AlreadyClosed):
        producer.send(b"x")
    with pytest.raises(AlreadyClosed):
        producer.send_async(b"x", None)
    producer.close()  # idempotent


# -- argument checks ----------------------------------------------------------------------------------


BAD_SEND_KWARGS = [
    ("properties", "a=1"),
    ("properties", {"a": 1}),
    ("properties", {1: "a"}),
    ("partition_key", 1),
    ("partition_key", b"k"),
    ("ordering_key", b"k"),
    ("sequence_id", "1"),
    ("sequence_id", 1.0),
    ("sequence_id", True),
    ("replication_clusters", "us-west"),
    ("disable_replication", 1),
    ("disable_replication", None),
    ("event_timestamp", 1.5),
    ("event_timestamp", "now"),
    ("deliver_at", 1.5),
    ("deliver_after", 5),
    ("deliver_after", 5.0),
]


@pytest.mark.parametrize(("kwarg", "value"), BAD_SEND_KWARGS)
@pytest.mark.parametrize("method", ["send", "send_async"])
def test_wrongly_typed_send_kwargs_raise_value_error(
    client: Client, method: str, kwarg: str, value: Any
) -> None:
    producer = client.create_producer("t")
    with pytest.raises(InvalidConfiguration, match=kwarg) as info:
        if method == "send":
            producer.send(b"x", **{kwarg: value})
        else:
            producer.send_async(b"x", None, **{kwarg: value})
    assert isinstance(info.value, ValueError)
    producer.flush()
    assert read_all(client, "t") == []


@pytest.mark.parametrize("payload", ["text", 1, 1.5, bytearray(b"x"), memoryview(b"x"), [b"x"]])
def test_non_bytes_payload_is_a_type_error(client: Client, payload: Any) -> None:
    producer = client.create_producer("t")
    with pytest.raises(TypeError):
        producer.send(payload)
    with pytest.raises(TypeError):
        producer.send_async(payload, None)
    producer.flush()
    assert read_all(client, "t") == []


def test_negative_sequence_id_is_refused(client: Client) -> None:
    producer = client.create_producer("t")
    with pytest.raises(ValueError, match="sequence_id"):
        producer.send(b"x", sequence_id=-1)


@BOTH_CLIENTS
def test_string_schema_encodes_text(client: Client) -> None:
    producer = client.create_producer("t", schema=StringSchema())
    producer.send("héllo")
    with pytest.raises(TypeError):
        producer.send(b"bytes")
    assert read_all(client, "t")[0].data() == "héllo".encode()


BAD_PRODUCER_KWARGS = [
    ("producer_name", 5),
    ("schema", "bytes"),
    ("initial_sequence_id", "0"),
    ("send_timeout_millis", "30000"),
    ("compression_type", "LZ4"),
    ("compression_type", 1),
    ("max_pending_messages", "1000"),
    ("max_pending_messages", 0),
    ("max_pending_messages_across_partitions", 1.0),
    ("block_if_queue_full", 1),
    ("batching_enabled", "true"),
    ("batching_max_messages", None),
    ("batching_max_allowed_size_in_bytes", "1"),
    ("batching_max_publish_delay_ms", -1),
    ("chunking_enabled", 0),
    ("message_routing_mode", "RoundRobinDistribution"),
    ("lazy_start_partitioned_producers", None),
    ("properties", {"a": 1}),
    ("batching_type", "KeyBased"),
    ("batching_type", 7),
    ("access_mode", "Exclusive"),
    ("message_router", "not callable"),
    ("hashing_scheme", "Murmur3_32Hash"),
]


@pytest.mark.parametrize(("kwarg", "value"), BAD_PRODUCER_KWARGS)
def test_wrongly_typed_producer_kwargs_raise_value_error(tmp_path: Path, kwarg: str, value: Any) -> None:
    client = Client(str(tmp_path))
    try:
        with pytest.raises(ValueError, match=kwarg):
            client.create_producer("t", **{kwarg: value})
    finally:
        client.close()
    assert not topic_dir(tmp_path, "t").exists()


def test_batching_and_chunking_together_are_refused(tmp_path: Path, client: Client) -> None:
    with pytest.raises(ValueError, match="chunking"):
        client.create_producer("t", batching_enabled=True, chunking_enabled=True)
    assert not topic_dir(tmp_path, "t").exists()


# -- message fields -----------------------------------------------------------------------------------


def test_message_fields_are_recorded_and_read_back(tmp_path: Path) -> None:
    clock = ManualClock(EPOCH_MS)
    client = Client(str(tmp_path), clock=clock)
    try:
        producer = client.create_producer("t", producer_name="writer")
        producer.send(
            b"payload",
            properties={"a": "1", "b": "two"},
            partition_key="pk",
            ordering_key="ok",
            sequence_id=42,
            event_timestamp=EPOCH_MS - 5,
        )
        producer.send(b"plain")
        msg, plain = read_all(client, "t")
        assert msg.data() == b"payload"
        assert msg.value() == b"payload"
        assert msg.properties() == {"a": "1", "b": "two"}
        assert msg.partition_key() == "pk"
        assert msg.ordering_key() == "ok"
        assert msg.sequence_id() == 42
        assert msg.event_timestamp() == EPOCH_MS - 5
        assert msg.publish_timestamp() == EPOCH_MS
        assert msg.producer_name() == "writer"
        assert msg.redelivery_count() == 0
        assert msg.deliver_at_timestamp() is None
        assert plain.properties() == {}
        assert plain.partition_key() == ""
        assert plain.ordering_key() == ""
        assert plain.event_timestamp() == 0
        assert plain.sequence_id() == 0  # an explicit sequence id does not advance the generator
    finally:
        client.close()


@BOTH_CLIENTS
def test_sequence_ids_count_from_zero_or_from_initial_sequence_id(client: Client) -> None:
    first = client.create_producer("t")
    for _ in range(3):
        first.send(b"x")
    assert first.last_sequence_id() == 2
    second = client.create_producer("t", initial_sequence_id=100)
    assert second.last_sequence_id() == 100
    second.send(b"y")
    assert second.last_sequence_id() == 101
    assert [m.sequence_id() for m in read_all(client, "t")] == [0, 1, 2, 101]


def test_deliver_at_and_deliver_after_are_recorded(tmp_path: Path) -> None:
    clock = ManualClock(EPOCH_MS)
    client = Client(str(tmp_path), clock=clock)
    try:
        producer = client.create_producer("t")
        producer.send(b"at", deliver_at=EPOCH_MS + 60_000)
        producer.send(b"after", deliver_after=timedelta(seconds=5))
        at, after = read_all(client, "t")  # a reader is not held back by delayed delivery
        assert at.deliver_at_timestamp() == EPOCH_MS + 60_000
        assert after.deliver_at_timestamp() == EPOCH_MS + 5_000
    finally:
        client.close()


@BOTH_CLIENTS
def test_null_value_is_a_tombstone_distinct_from_empty(client: Client) -> None:
    producer = client.create_producer("t")
    producer.send(None, partition_key="k")
    producer.send(b"", partition_key="k")
    tombstone, empty = read_all(client, "t")
    assert tombstone.has_null_value()
    assert tombstone.data() == b""
    assert tombstone.value() is None
    assert not empty.has_null_value()
    assert empty.data() == b""
    assert empty.value() == b""


def test_publish_time_is_taken_when_send_is_called(tmp_path: Path) -> None:
    clock = ManualClock(EPOCH_MS)
    client = Client(str(tmp_path), clock=clock)
    try:
        producer = client.create_producer("t", batching_enabled=True, batching_max_publish_delay_ms=60_000)
        producer.send_async(b"first", None)
        clock.advance(5_000)
        producer.send_async(b"second", None)
        clock.advance(5_000)
        producer.flush()
        clock.advance(5_000)
        producer.send(b"third")
        assert [m.publish_timestamp() for m in read_all(client, "t")] == [
            EPOCH_MS,
            EPOCH_MS + 5_000,
            EPOCH_MS + 15_000,
        ]
    finally:
        client.close()


# -- batching -----------------------------------------------------------------------------------------


@BOTH_CLIENTS
def test_messages_of_one_flush_share_an_entry_with_batch_indexes(client: Client) -> None:
    producer = client.create_producer("t", batching_enabled=True, batching_max_publish_delay_ms=60_000)
    callbacks = Callbacks(expected=5)
    for i in range(5):
        producer.send_async(b"m%d" % i, callbacks)
    assert callbacks.calls == []
    producer.flush()
    ids = callbacks.ids()
    assert {i.entry_id() for i in ids} == {0}
    assert [i.batch_index() for i in ids] == [0, 1, 2, 3, 4]
    msgs = read_all(client, "t")
    assert [m.message_id() for m in msgs] == ids


@BOTH_CLIENTS
def test_batching_max_messages_cuts_batches(client: Client) -> None:
    producer = client.create_producer(
        "t", batching_enabled=True, batching_max_messages=3, batching_max_publish_delay_ms=60_000
    )
    first_six = Callbacks(expected=6)
    for i in range(6):
        producer.send_async(b"m%d" % i, first_six)
    ids = first_six.ids()  # two full batches go without a flush
    assert [(i.entry_id(), i.batch_index()) for i in ids] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    last = Callbacks(expected=1)
    producer.send_async(b"m6", last)
    assert not last.all_done.is_set()  # a partial batch waits for its publish delay
    producer.flush()
    assert [(i.entry_id(), i.batch_index()) for i in last.ids()] == [(2, 0)]


@BOTH_CLIENTS
def test_batching_max_allowed_size_cuts_batches(client: Client) -> None:
    producer = client.create_producer(
        "t",
        batching_enabled=True,
        batching_max_allowed_size_in_bytes=100,
        batching_max_publish_delay_ms=60_000,
    )
    callbacks = Callbacks(expected=2)
    producer.send_async(b"x" * 60, callbacks)
    producer.send_async(b"y" * 60, callbacks)
    ids = callbacks.ids()  # 120 bytes reached the size limit: flushed without flush()
    assert {i.entry_id() for i in ids} == {0}


def test_sync_send_flushes_the_pending_batch(client: Client) -> None:
    producer = client.create_producer("t", batching_enabled=True, batching_max_publish_delay_ms=60_000)
    callbacks = Callbacks(expected=3)
    for i in range(3):
        producer.send_async(b"m%d" % i, callbacks)
    last = producer.send(b"sync")
    ids = [*callbacks.ids(), last]
    assert {i.entry_id() for i in ids} == {0}
    assert [i.batch_index() for i in ids] == [0, 1, 2, 3]


@BOTH_CLIENTS
def test_publish_delay_flushes_a_batch_without_flush(client: Client) -> None:
    producer = client.create_producer("t", batching_enabled=True, batching_max_publish_delay_ms=5)
    callbacks = Callbacks(expected=3)
    for i in range(3):
        producer.send_async(b"m%d" % i, callbacks)
    ids = callbacks.ids()
    assert all(i.batch_index() >= 0 for i in ids)
    assert ids == sorted(ids)
    assert [m.data() for m in read_all(client, "t")] == [b"m0", b"m1", b"m2"]


@BOTH_CLIENTS
def test_unbatched_sends_are_entries_of_their_own(client: Client) -> None:
    producer = client.create_producer("t")
    callbacks = Callbacks(expected=4)
    for i in range(4):
        producer.send_async(b"m%d" % i, callbacks)
    ids = callbacks.ids()
    assert [i.batch_index() for i in ids] == [-1] * 4
    assert [i.entry_id() for i in ids] == [0, 1, 2, 3]


@BOTH_CLIENTS
def test_key_based_batching_groups_messages_per_key(client: Client) -> None:
    producer = client.create_producer(
        "t", batching_enabled=True, batching_type=BatchingType.KeyBased, batching_max_publish_delay_ms=60_000
    )
    keys = ["a", "b", "a", "c", "b", "a"]
    callbacks = Callbacks(expected=len(keys))
    sent: dict[bytes, str] = {}
    for i, key in enumerate(keys):
        payload = b"%s%d" % (key.encode(), i)
        sent[payload] = key
        producer.send_async(payload, callbacks, partition_key=key)
    producer.flush()
    callbacks.wait()
    msgs = read_all(client, "t")
    entries: dict[str, set[int]] = {}
    for m in msgs:
        entries.setdefault(m.partition_key(), set()).add(m.message_id().entry_id())
    assert all(len(e) == 1 for e in entries.values()), entries
    assert len({next(iter(e)) for e in entries.values()}) == 3  # one entry per key
    # per-key order is kept, and batch indexes restart at 0 in each entry
    for key in "abc":
        mine = [m for m in msgs if m.partition_key() == key]
        assert [m.data() for m in mine] == [p for p, k in sent.items() if k == key]
        assert [m.message_id().batch_index() for m in mine] == list(range(len(mine)))


def test_key_based_batching_prefers_the_ordering_key(client: Client) -> None:
    producer = client.create_producer(
        "t", batching_enabled=True, batching_type=BatchingType.KeyBased, batching_max_publish_delay_ms=60_000
    )
    producer.send_async(b"1", None, partition_key="p1", ordering_key="o")
    producer.send_async(b"2", None, partition_key="p2", ordering_key="o")
    producer.send_async(b"3", None, partition_key="p1")
    producer.flush()
    msgs = {m.data(): m.message_id() for m in read_all(client, "t")}
    assert msgs[b"1"].entry_id() == msgs[b"2"].entry_id()
    assert msgs[b"3"].entry_id() != msgs[b"1"].entry_id()


def test_delayed_messages_are_entries_of_their_own_even_with_batching(client: Client) -> None:
    producer = client.create_producer("t", batching_enabled=True, batching_max_publish_delay_ms=60_000)
    callbacks = Callbacks(expected=4)
    producer.send_async(b"a", callbacks)
    producer.send_async(b"b", callbacks)
    producer.send_async(b"delayed", callbacks, deliver_after=timedelta(minutes=1))
    producer.send_async(b"c", callbacks)
    producer.flush()
    by_value = dict(zip([b"a", b"b", b"delayed", b"c"], callbacks.ids(), strict=True))
    assert by_value[b"delayed"].batch_index() == -1
    entries = {v: i.entry_id() for v, i in by_value.items()}
    assert entries[b"a"] == entries[b"b"]
    assert entries[b"delayed"] not in (entries[b"a"], entries[b"c"])
    assert len(set(entries.values())) == 3
    assert [m.data() for m in read_all(client, "t")] == [b"a", b"b", b"delayed", b"c"]


# -- compression --------------------------------------------------------------------------------------

CODECS = {
    CompressionType.NONE: {"UNCOMPRESSED"},
    CompressionType.LZ4: {"LZ4", "LZ4_RAW"},
    CompressionType.ZLib: {"GZIP"},
    CompressionType.ZSTD: {"ZSTD"},
    CompressionType.SNAPPY: {"SNAPPY"},
}


@pytest.mark.parametrize("compression", list(CODECS))
def test_compression_round_trips_and_is_the_parquet_codec(
    tmp_path: Path, compression: CompressionType
) -> None:
    client = Client(str(tmp_path))
    try:
        producer = client.create_producer("t", compression_type=compression, batching_enabled=True)
        payloads = [(b"compressible %d " % i) * 50 for i in range(20)]
        for p in payloads:
            producer.send_async(p, None, properties={"i": "x"})
        producer.flush()
        assert [m.data() for m in read_all(client, "t")] == payloads
    finally:
        client.close()
    files = sorted(topic_dir(tmp_path, "t").glob("*.parquet"))
    assert files
    for f in files:
        meta = pq.ParquetFile(f).metadata
        codecs = {
            meta.row_group(g).column(c).compression
            for g in range(meta.num_row_groups)
            for c in range(meta.num_columns)
        }
        assert codecs <= CODECS[compression], (f.name, codecs)
        assert codecs


# -- chunking -----------------------------------------------------------------------------------------


def test_chunked_message_is_split_and_reassembled(tmp_path: Path) -> None:
    client = Client(str(tmp_path), broker_config=BrokerConfig(max_message_size=1000))
    try:
        producer = client.create_producer("t", chunking_enabled=True)
        big = bytes(range(256)) * 14  # 3584 bytes: 4 chunks
        producer.send(b"before")
        msg_id = producer.send(big, properties={"k": "v"}, partition_key="key")
        producer.send(b"after")
        msgs = read_all(client, "t")
        assert [m.data() for m in msgs] == [b"before", big, b"after"]
        assert msgs[1].message_id() == msg_id
        assert msgs[1].properties() == {"k": "v"}
        assert msgs[1].partition_key() == "key"
        reader = client.create_reader("t", MessageId.earliest)
        rows = reader.read_batch()
        assert rows.num_rows == 6  # the chunks are stored as rows of their own
        chunk_rows = rows.filter(rows.column("num_chunks").is_valid())
        assert chunk_rows.column("chunk_id").to_pylist() == [0, 1, 2, 3]
        assert set(chunk_rows.column("num_chunks").to_pylist()) == {4}
        assert set(chunk_rows.column("chunk_total_size_bytes").to_pylist()) == {len(big)}
        assert all(len(v) <= 1000 for v in chunk_rows.column("value").to_pylist())
    finally:
        client.close()


def test_message_at_the_size_limit_needs_no_chunking(tmp_path: Path) -> None:
    client = Client(str(tmp_path), broker_config=BrokerConfig(max_message_size=1000))
    try:
        producer = client.create_producer("t")
        producer.send(b"x" * 1000)
        assert [len(m.data()) for m in read_all(client, "t")] == [1000]
    finally:
        client.close()


def test_too_big_message_without_chunking_is_refused_and_not_written(tmp_path: Path) -> None:
    client = Client(str(tmp_path), broker_config=BrokerConfig(max_message_size=1000))
    try:
        producer = client.create_producer("t")
        with pytest.raises(MessageTooBig, match="maxMessageSize"):
            producer.send(b"x" * 1001)
        with pytest.raises(MessageTooBig):
            producer.send_async(b"x" * 1001, None)
        batching = client.create_producer("t", batching_enabled=True)
        with pytest.raises(MessageTooBig):
            batching.send(b"x" * 5000)
        producer.flush()
        batching.flush()
        assert read_all(client, "t") == []
        assert list(topic_dir(tmp_path, "t").glob("*.parquet")) == []
        producer.send(b"ok")  # the producer is still usable
        assert [m.data() for m in read_all(client, "t")] == [b"ok"]
    finally:
        client.close()


# -- routing ------------------------------------------------------------------------------------------


def test_keyed_messages_go_to_java_string_hash_mod_n(tmp_path: Path, client: Client) -> None:
    make_partitioned(tmp_path, "p", 5)
    producer = client.create_producer("p")
    for i in range(30):
        key = f"key-{i}"
        assert producer.send(b"x", partition_key=key).partition() == java_string_hash(key) % 5


def test_keyed_messages_with_murmur3_hashing(tmp_path: Path, client: Client) -> None:
    make_partitioned(tmp_path, "p", 5)
    producer = client.create_producer("p", hashing_scheme=HashingScheme.Murmur3_32Hash)
    routed = {f"key-{i}": producer.send(b"x", partition_key=f"key-{i}").partition() for i in range(30)}
    assert routed == {k: murmur3_32_hash(k) % 5 for k in routed}
    assert routed != {k: java_string_hash(k) % 5 for k in routed}  # the scheme really matters


@BOTH_CLIENTS
def test_keyed_messages_reach_the_partition_readers(tmp_path: Path, client: Client) -> None:
    make_partitioned(tmp_path, "p", 3)
    producer = client.create_producer("p")
    sent = {f"k{i}": producer.send(b"%d" % i, partition_key=f"k{i}") for i in range(12)}
    for index, partition in enumerate(client.get_topic_partitions("p")):
        for m in read_all(client, partition):
            assert java_string_hash(m.partition_key()) % 3 == index
            assert sent[m.partition_key()].partition() == index
            # Read through the partition's own name, ids carry no partition index (as in Pulsar,
            # where a consumer of "<topic>-partition-<i>" is a non-partitioned consumer).
            assert m.message_id() == MessageId(
                -1, sent[m.partition_key()].ledger_id(), sent[m.partition_key()].entry_id(), -1
            )
            assert m.topic_name() == partition
    # Through the partitioned topic's name, ids are exactly those send() returned.
    assert {m.partition_key(): m.message_id() for m in read_all(client, "p")} == sent


@BOTH_CLIENTS
def test_round_robin_without_batching_cycles_partitions(tmp_path: Path, client: Client) -> None:
    make_partitioned(tmp_path, "p", 4)
    producer = client.create_producer("p", message_routing_mode=PartitionsRoutingMode.RoundRobinDistribution)
    partitions = [producer.send(b"x").partition() for _ in range(12)]
    first = partitions[0]
    assert partitions == [(first + i) % 4 for i in range(12)]


def test_use_single_partition_sticks_to_one(tmp_path: Path, client: Client) -> None:
    make_partitioned(tmp_path, "p", 4)
    producer = client.create_producer("p", message_routing_mode=PartitionsRoutingMode.UseSinglePartition)
    partitions = {producer.send(b"x").partition() for _ in range(12)}
    assert len(partitions) == 1
    assert partitions <= {0, 1, 2, 3}
    # a keyed message is still routed by its key
    assert producer.send(b"k", partition_key="abc").partition() == java_string_hash("abc") % 4


def test_custom_router_is_honoured_and_gets_the_message(tmp_path: Path, client: Client) -> None:
    make_partitioned(tmp_path, "p", 4)
    seen: list[tuple[Any, int]] = []

    def router(msg: Any, num_partitions: int) -> int:
        seen.append((msg, num_partitions))
        return int(msg.properties()["target"])

    producer = client.create_producer(
        "p", message_routing_mode=PartitionsRoutingMode.CustomPartition, message_router=router
    )
    for target in (3, 0, 2, 2):
        msg_id = producer.send(b"to %d" % target, properties={"target": str(target)}, partition_key="kk")
        assert msg_id.partition() == target
    assert [n for _, n in seen] == [4] * 4
    assert seen[0][0].data() == b"to 3"
    assert seen[0][0].partition_key() == "kk"


@pytest.mark.parametrize("bad", [4, -1, 100])
def test_custom_router_out_of_range_fails_clearly(tmp_path: Path, client: Client, bad: int) -> None:
    make_partitioned(tmp_path, "p", 4)
    producer = client.create_producer("p", message_router=lambda msg, n: bad)
    with pytest.raises(InvalidConfiguration, match=str(bad)):
        producer.send(b"x")
    with pytest.raises(InvalidConfiguration):
        producer.send_async(b"x", None)
    producer.flush()
    for partition in client.get_topic_partitions("p"):
        assert read_all(client, partition) == []


def test_custom_partition_mode_without_a_router_is_refused(tmp_path: Path, client: Client) -> None:
    make_partitioned(tmp_path, "p", 2)
    with pytest.raises(InvalidConfiguration, match="message_router"):
        client.create_producer("p", message_routing_mode=PartitionsRoutingMode.CustomPartition)


# -- pending queue ------------------------------------------------------------------------------------


def test_queue_full_raises_when_not_blocking(client: Client) -> None:
    producer = client.create_producer(
        "t", batching_enabled=True, batching_max_publish_delay_ms=60_000, max_pending_messages=2
    )
    producer.send_async(b"1", None)
    producer.send_async(b"2", None)
    with pytest.raises(ProducerQueueIsFull):
        producer.send_async(b"3", None)
    failed = Callbacks(expected=1)
    producer.send_async(b"4", failed)
    assert failed.wait() == [(Result.ProducerQueueIsFull, None)]
    producer.flush()
    assert [m.data() for m in read_all(client, "t")] == [b"1", b"2"]
    producer.send_async(b"5", None)  # room again after the flush
    producer.flush()
    assert [m.data() for m in read_all(client, "t")] == [b"1", b"2", b"5"]


def test_queue_full_blocks_until_there_is_room(client: Client) -> None:
    producer = client.create_producer(
        "t",
        batching_enabled=True,
        batching_max_publish_delay_ms=60_000,
        max_pending_messages=2,
        block_if_queue_full=True,
    )
    producer.send_async(b"1", None)
    producer.send_async(b"2", None)
    queued = threading.Event()

    def third() -> None:
        producer.send_async(b"3", None)
        queued.set()

    thread = threading.Thread(target=third, daemon=True)
    thread.start()
    assert not queued.wait(0.3)  # blocked: the queue holds two messages
    producer.flush()  # makes room
    thread.join(10)
    assert queued.is_set()
    producer.flush()
    assert [m.data() for m in read_all(client, "t")] == [b"1", b"2", b"3"]


# -- deduplication ------------------------------------------------------------------------------------


def test_dedup_resumes_sequence_ids_and_drops_resends(tmp_path: Path) -> None:
    client = Client(str(tmp_path), broker_config=BrokerConfig(broker_deduplication_enabled=True))
    try:
        producer = client.create_producer("t", producer_name="writer")
        assert producer.last_sequence_id() == -1
        for i in range(3):
            producer.send(b"m%d" % i)
        assert producer.last_sequence_id() == 2
        producer.close()

        again = client.create_producer("t", producer_name="writer")
        assert again.last_sequence_id() == 2
        dup = again.send(b"m1 resent", sequence_id=1)
        assert (dup.ledger_id(), dup.entry_id()) == (-1, -1)
        same = again.send(b"m2 resent", sequence_id=2)
        assert (same.ledger_id(), same.entry_id()) == (-1, -1)
        fresh = again.send(b"m3")
        assert fresh.entry_id() == 3
        assert again.last_sequence_id() == 3
        msgs = read_all(client, "t")
        assert [m.data() for m in msgs] == [b"m0", b"m1", b"m2", b"m3"]
        assert [m.sequence_id() for m in msgs] == [0, 1, 2, 3]
    finally:
        client.close()


def test_dedup_inside_one_batch_acknowledges_duplicates(tmp_path: Path) -> None:
    client = Client(str(tmp_path), broker_config=BrokerConfig(broker_deduplication_enabled=True))
    try:
        producer = client.create_producer(
            "t", producer_name="w", batching_enabled=True, batching_max_publish_delay_ms=60_000
        )
        callbacks = Callbacks(expected=4)
        for seq in (5, 6, 6, 4):
            producer.send_async(b"s%d" % seq, callbacks, sequence_id=seq)
        producer.flush()
        results = callbacks.wait()
        assert all(r == Result.Ok for r, _ in results)
        written = [i for _, i in results if i is not None and i.entry_id() >= 0]
        dropped = [i for _, i in results if i is not None and i.entry_id() < 0]
        assert len(written) == 2
        assert len(dropped) == 2
        assert [m.data() for m in read_all(client, "t")] == [b"s5", b"s6"]
    finally:
        client.close()


def test_without_dedup_a_resend_is_written_again(client: Client) -> None:
    producer = client.create_producer("t", producer_name="writer")
    producer.send(b"a", sequence_id=1)
    assert producer.send(b"a again", sequence_id=1).entry_id() == 1
    assert len(read_all(client, "t")) == 2


# -- access modes -------------------------------------------------------------------------------------


@BOTH_CLIENTS
def test_exclusive_producer_makes_a_second_producer_busy(client: Client) -> None:
    """As Pulsar's broker answers: a second Exclusive producer is fenced, a Shared one is busy."""
    holder = client.create_producer("t", access_mode=ProducerAccessMode.Exclusive)
    with pytest.raises(ProducerFenced, match="exclusively"):
        client.create_producer("t", access_mode=ProducerAccessMode.Exclusive)
    with pytest.raises(ProducerBusy):
        client.create_producer("t", access_mode=ProducerAccessMode.Shared)
    holder.send(b"still mine")
    holder.close()
    client.create_producer("t", access_mode=ProducerAccessMode.Exclusive).send(b"next")
    assert [m.data() for m in read_all(client, "t")] == [b"still mine", b"next"]


@BOTH_CLIENTS
def test_exclusive_is_refused_while_a_shared_producer_is_connected(client: Client) -> None:
    client.create_producer("t")
    with pytest.raises(ProducerFenced):
        client.create_producer("t", access_mode=ProducerAccessMode.Exclusive)


@BOTH_CLIENTS
def test_two_producers_with_the_same_name_are_refused(client: Client) -> None:
    client.create_producer("t", producer_name="dup")
    with pytest.raises(ProducerBusy, match="dup"):
        client.create_producer("t", producer_name="dup")


@BOTH_CLIENTS
def test_exclusive_with_fencing_fences_the_first_producer(client: Client) -> None:
    first = client.create_producer("t", access_mode=ProducerAccessMode.Exclusive)
    first.send(b"before")
    fencer = client.create_producer("t", access_mode=ProducerAccessMode.ExclusiveWithFencing)
    with pytest.raises(ProducerFenced):
        first.send(b"zombie")
    assert not first.is_connected()
    failed = Callbacks(expected=1)
    refused_up_front = False  # as good as a failed callback
    try:
        first.send_async(b"zombie again", failed)
    except ProducerFenced:
        refused_up_front = True
    if not refused_up_front:
        assert failed.wait()[0][0] == Result.ProducerFenced
    fencer.send(b"after")
    assert [m.data() for m in read_all(client, "t")] == [b"before", b"after"]


@BOTH_CLIENTS
def test_exclusive_with_fencing_fences_shared_producers(client: Client) -> None:
    shared = client.create_producer("t")
    client.create_producer("t", access_mode=ProducerAccessMode.ExclusiveWithFencing)
    with pytest.raises(ProducerFenced):
        shared.send(b"zombie")
    assert read_all(client, "t") == []


@BOTH_CLIENTS
def test_wait_for_exclusive_waits_until_the_holder_closes(client: Client) -> None:
    holder = client.create_producer("t", access_mode=ProducerAccessMode.Exclusive)
    created = threading.Event()
    made: list[Any] = []
    errors: list[BaseException] = []

    def wait_for_it() -> None:
        try:
            made.append(client.create_producer("t", access_mode=ProducerAccessMode.WaitForExclusive))
        except BaseException as exc:  # surfaced by the assertions below
            errors.append(exc)
        created.set()

    thread = threading.Thread(target=wait_for_it, daemon=True)
    thread.start()
    assert not created.wait(0.3)  # still waiting while the holder is connected
    holder.send(b"holder")
    holder.close()
    thread.join(10)
    assert created.is_set()
    assert errors == []
    made[0].send(b"waiter")
    assert [m.data() for m in read_all(client, "t")] == [b"holder", b"waiter"]


def test_keyless_and_keyed_rows_carry_the_sticky_key_hash(tmp_path: Path) -> None:
    """A batch without keys takes a precomputed hash (``builder._KEYLESS_HASH``); it must be the
    same as the vectorised one, and a batch mixing keyed and keyless rows hashes each row."""
    import pyarrow as pa

    from broker_core.client.builder import PendingMessage, QueuedBatch, rows_for
    from broker_core.hashing import sticky_key_hash_array

    for keys in ([None, None, None], ["a", None, "b"]):
        batch = QueuedBatch(0.0)
        for key in keys:  # a keyless send is a plain one: its batch's columns alone
            batch.append(b"v", 1, 0, EPOCH_MS, None if key is None else PendingMessage(key, None, None, None, None))
        rows = rows_for(batch, None, "p")
        expected = sticky_key_hash_array(pa.array([None] * 3, pa.binary()), pa.array(keys, pa.string()))
        assert rows.column("sticky_key_hash").to_pylist() == expected.to_pylist()
