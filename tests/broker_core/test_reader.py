"""The reader: start positions, seeks, waiting, push within a process, polling across processes."""

from __future__ import annotations

import os
import textwrap
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from processes import run_python

from broker_core import (
    AlreadyClosed,
    BrokerConfig,
    Client,
    InvalidConfiguration,
    Message,
    MessageId,
    Reader,
    Timeout,
)
from broker_core.broker.broker import Broker
from broker_core.clock import ManualClock

EPOCH_MS = 1_700_000_000_000


@pytest.fixture
def client(tmp_path: Path) -> Any:
    c = Client(str(tmp_path))
    yield c
    c.close()


def drain(reader: Reader) -> list[bytes]:
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(timeout_millis=5000).data())
    return out


def first_data(client: Client, topic: str, start: MessageId, *, inclusive: bool) -> list[bytes]:
    reader = client.create_reader(topic, start, start_message_id_inclusive=inclusive)
    try:
        return drain(reader)
    finally:
        reader.close()


class SignallingEvent(threading.Event):
    """An Event that reports when somebody starts waiting on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting.set()
        return super().wait(timeout)


def watch_waits(reader: Reader) -> SignallingEvent:
    """Swap the reader's wake-up event for one that tells the test when ``read_next`` blocks."""
    event = SignallingEvent()
    for part in reader._parts:
        part.log.remove_waiter(reader._wake)
        part.log.add_waiter(event)
    reader._wake = event
    return event


def _capture(call: Any, errors: list[BaseException]) -> None:
    try:
        call()
    except BaseException as exc:
        errors.append(exc)


@pytest.fixture
def mixed_topic(client: Client) -> dict[str, MessageId]:
    """Topic "t": entry 0 = batch [m0 m1 m2], entry 1 = batch [m3 m4], entries 2, 3 = m5, m6 unbatched."""
    ids: dict[str, MessageId] = {}
    batched = client.create_producer("t", batching_enabled=True, batching_max_publish_delay_ms=60_000)
    results: dict[str, MessageId] = {}
    for name in ("m0", "m1", "m2"):
        batched.send_async(name.encode(), lambda res, msg_id, n=name: results.__setitem__(n, msg_id))
    batched.flush()
    batched.send_async(b"m3", lambda res, msg_id: results.__setitem__("m3", msg_id))
    results["m4"] = batched.send(b"m4")
    batched.close()
    ids.update(results)
    plain = client.create_producer("t")
    ids["m5"] = plain.send(b"m5")
    ids["m6"] = plain.send(b"m6")
    plain.close()
    layout = {name: (i.entry_id(), i.batch_index()) for name, i in ids.items()}
    assert layout == {
        "m0": (0, 0),
        "m1": (0, 1),
        "m2": (0, 2),
        "m3": (1, 0),
        "m4": (1, 1),
        "m5": (2, -1),
        "m6": (3, -1),
    }
    return ids


ALL = [b"m0", b"m1", b"m2", b"m3", b"m4", b"m5", b"m6"]

# -- start positions ----------------------------------------------------------------------------------


def test_start_at_earliest_reads_everything(client: Client, mixed_topic: dict[str, MessageId]) -> None:
    assert first_data(client, "t", MessageId.earliest, inclusive=False) == ALL
    assert first_data(client, "t", MessageId.earliest, inclusive=True) == ALL
    reader = client.create_reader("t", MessageId.earliest)
    msgs = [reader.read_next(timeout_millis=5000) for _ in ALL]
    assert [m.message_id() for m in msgs] == [mixed_topic[f"m{i}"] for i in range(7)]


def test_start_at_latest_reads_only_new_messages(client: Client, mixed_topic: dict[str, MessageId]) -> None:
    reader = client.create_reader("t", MessageId.latest)
    assert not reader.has_message_available()
    with pytest.raises(Timeout):
        reader.read_next(timeout_millis=20)
    client.create_producer("t").send(b"new")
    assert reader.read_next(timeout_millis=5000).data() == b"new"


def test_latest_inclusive_returns_the_last_message(client: Client, mixed_topic: dict[str, MessageId]) -> None:
    assert first_data(client, "t", MessageId.latest, inclusive=True) == [b"m6"]


def test_latest_inclusive_on_an_empty_topic_waits_for_the_first_message(client: Client) -> None:
    reader = client.create_reader("empty", MessageId.latest, start_message_id_inclusive=True)
    assert not reader.has_message_available()
    client.create_producer("empty").send(b"first")
    assert reader.read_next(timeout_millis=5000).data() == b"first"


@pytest.mark.parametrize(
    ("start", "inclusive", "expected_first"),
    [
        ("m1", False, b"m2"),
        ("m1", True, b"m1"),
        ("m2", False, b"m3"),  # the last message of a batch: the next entry follows
        ("m2", True, b"m2"),
        ("m4", False, b"m5"),
        ("m3", True, b"m3"),
        ("m5", False, b"m6"),
        ("m5", True, b"m5"),
        ("m0", True, b"m0"),
        ("m6", True, b"m6"),
    ],
)
def test_start_at_a_message_id(
    client: Client, mixed_topic: dict[str, MessageId], start: str, inclusive: bool, expected_first: bytes
) -> None:
    got = first_data(client, "t", mixed_topic[start], inclusive=inclusive)
    assert got == ALL[ALL.index(expected_first) :]


def test_start_after_the_last_message_reads_nothing_yet(
    client: Client, mixed_topic: dict[str, MessageId]
) -> None:
    assert first_data(client, "t", mixed_topic["m6"], inclusive=False) == []


def test_a_batched_entry_addressed_without_a_batch_index(
    client: Client, mixed_topic: dict[str, MessageId]
) -> None:
    entry0 = MessageId(-1, mixed_topic["m0"].ledger_id(), 0, -1)
    assert first_data(client, "t", entry0, inclusive=False)[0] == b"m3"  # after the whole entry
    assert first_data(client, "t", entry0, inclusive=True)[0] == b"m0"


def test_a_message_id_parsed_from_text_positions_the_same(
    client: Client, mixed_topic: dict[str, MessageId]
) -> None:
    parsed = MessageId.parse(str(mixed_topic["m3"]))
    assert first_data(client, "t", parsed, inclusive=True)[0] == b"m3"
    restored = MessageId.deserialize(mixed_topic["m5"].serialize())
    assert first_data(client, "t", restored, inclusive=False)[0] == b"m6"


def test_partitioned_reader_refuses_a_specific_message_id(tmp_path: Path, client: Client) -> None:
    Broker.for_url(str(tmp_path)).admin.create_partitioned_topic("p", 3)
    producer = client.create_producer("p")
    ids = [producer.send(b"%d" % i, partition_key=f"k{i}") for i in range(9)]
    with pytest.raises(InvalidConfiguration, match="partition") as info:
        client.create_reader("p", ids[0])
    assert f"p-partition-{ids[0].partition()}" in str(info.value)  # it says what to do instead
    reader = client.create_reader("p", MessageId.earliest)
    msgs = [reader.read_next(timeout_millis=5000) for _ in range(9)]
    assert sorted(m.data() for m in msgs) == sorted(b"%d" % i for i in range(9))
    assert {m.message_id() for m in msgs} == set(ids)
    assert not reader.has_message_available()
    with pytest.raises(InvalidConfiguration):
        reader.seek(ids[3])
    latest = client.create_reader("p", MessageId.latest)
    assert not latest.has_message_available()
    producer.send(b"late", partition_key="k1")
    assert latest.read_next(timeout_millis=5000).data() == b"late"
    # on the partition itself, a message id is fine
    partition = client.get_topic_partitions("p")[ids[4].partition()]
    on_partition = client.create_reader(partition, ids[4], start_message_id_inclusive=True)
    assert on_partition.read_next(timeout_millis=5000).data() == b"4"


# -- seek ---------------------------------------------------------------------------------------------


def test_seek_by_message_id_follows_the_inclusive_flag(
    client: Client, mixed_topic: dict[str, MessageId]
) -> None:
    exclusive = client.create_reader("t", MessageId.earliest)
    assert drain(exclusive) == ALL
    exclusive.seek(mixed_topic["m1"])
    assert exclusive.read_next(timeout_millis=5000).data() == b"m2"
    exclusive.seek(mixed_topic["m5"])
    assert drain(exclusive) == [b"m6"]
    exclusive.seek(MessageId.earliest)
    assert drain(exclusive) == ALL
    exclusive.seek(MessageId.latest)
    assert not exclusive.has_message_available()

    inclusive = client.create_reader("t", MessageId.latest, start_message_id_inclusive=True)
    inclusive.seek(mixed_topic["m3"])
    assert drain(inclusive) == ALL[3:]


def test_seek_discards_what_was_buffered(client: Client, mixed_topic: dict[str, MessageId]) -> None:
    reader = client.create_reader("t", MessageId.earliest)
    assert reader.read_next(timeout_millis=5000).data() == b"m0"  # the rest of the slice is buffered
    reader.seek(mixed_topic["m4"])
    assert drain(reader) == [b"m5", b"m6"]


def test_seek_by_timestamp_is_inclusive_of_the_millisecond(tmp_path: Path) -> None:
    clock = ManualClock(EPOCH_MS)
    client = Client(str(tmp_path), clock=clock)
    try:
        producer = client.create_producer("t")
        producer.send(b"at 0")
        clock.advance(1)
        producer.send(b"at 1 a")
        producer.send(b"at 1 b")
        clock.advance(1)
        producer.send(b"at 2")
        reader = client.create_reader("t", MessageId.latest)
        reader.seek(EPOCH_MS + 1)
        assert drain(reader) == [b"at 1 a", b"at 1 b", b"at 2"]
        reader.seek(EPOCH_MS)
        assert drain(reader) == [b"at 0", b"at 1 a", b"at 1 b", b"at 2"]
        reader.seek(EPOCH_MS + 2)
        assert drain(reader) == [b"at 2"]
        reader.seek(EPOCH_MS + 3)
        assert drain(reader) == []
        reader.seek(0)
        assert len(drain(reader)) == 4
    finally:
        client.close()


def test_seek_by_timestamp_on_a_partitioned_topic(tmp_path: Path) -> None:
    clock = ManualClock(EPOCH_MS)
    client = Client(str(tmp_path), clock=clock)
    try:
        Broker.for_url(str(tmp_path)).admin.create_partitioned_topic("p", 2)
        producer = client.create_producer("p")
        for i in range(6):
            producer.send(b"%d" % i, partition_key=f"key{i}")
            clock.advance(10)
        reader = client.create_reader("p", MessageId.earliest)
        reader.seek(EPOCH_MS + 30)
        assert sorted(drain(reader)) == [b"3", b"4", b"5"]
    finally:
        client.close()


def test_seek_refuses_other_types(client: Client) -> None:
    reader = client.create_reader("t", MessageId.earliest)
    for bad in ("earliest", 1.5, True, None):
        with pytest.raises(ValueError):
            reader.seek(bad)  # type: ignore[arg-type]


# -- waiting ------------------------------------------------------------------------------------------


def test_has_message_available(client: Client) -> None:
    reader = client.create_reader("t", MessageId.earliest)
    assert not reader.has_message_available()
    producer = client.create_producer("t")
    producer.send(b"a")
    assert reader.has_message_available()
    assert reader.read_next(timeout_millis=5000).data() == b"a"
    assert not reader.has_message_available()


def test_read_next_times_out_when_drained_and_keeps_later_messages(client: Client) -> None:
    producer = client.create_producer("t")
    producer.send(b"a")
    reader = client.create_reader("t", MessageId.earliest)
    assert reader.read_next(timeout_millis=5000).data() == b"a"
    with pytest.raises(Timeout) as info:
        reader.read_next(timeout_millis=30)
    assert isinstance(info.value, TimeoutError)
    with pytest.raises(Timeout):
        reader.read_next(timeout_millis=0)
    producer.send(b"b")
    assert reader.read_next(timeout_millis=5000).data() == b"b"
    with pytest.raises(ValueError, match="timeout_millis"):
        reader.read_next(timeout_millis=1.5)  # type: ignore[arg-type]


@pytest.mark.timeout(30)
def test_read_next_timeout_is_real_time_even_with_a_manual_clock(tmp_path: Path) -> None:
    client = Client(str(tmp_path), clock=ManualClock(EPOCH_MS))
    try:
        reader = client.create_reader("t", MessageId.earliest)
        with pytest.raises(Timeout):
            reader.read_next(timeout_millis=50)
    finally:
        client.close()


def test_a_reader_of_another_client_is_woken_by_a_send_at_once(tmp_path: Path) -> None:
    # The reader's client polls storage only once a minute, so only the in-process push can wake it.
    reading = Client(str(tmp_path), reader_poll_interval_ms=60_000)
    sending = Client(str(tmp_path))
    try:
        reader = reading.create_reader("t", MessageId.earliest)
        blocked = watch_waits(reader)
        got: list[Message] = []
        errors: list[BaseException] = []
        thread = threading.Thread(target=lambda: _capture(lambda: got.append(reader.read_next()), errors))
        thread.daemon = True
        thread.start()
        assert blocked.waiting.wait(10)  # read_next found nothing and is blocked
        sent = sending.create_producer("t").send(b"pushed")
        thread.join(10)
        assert not thread.is_alive(), "the blocked reader was not woken by the send"
        assert errors == []
        assert got[0].data() == b"pushed"
        assert got[0].message_id() == sent
    finally:
        sending.close()
        reading.close()


def test_close_wakes_a_blocked_read_next(tmp_path: Path) -> None:
    client = Client(str(tmp_path), reader_poll_interval_ms=60_000)
    try:
        reader = client.create_reader("t", MessageId.earliest)
        blocked = watch_waits(reader)
        errors: list[BaseException] = []
        thread = threading.Thread(target=lambda: _capture(reader.read_next, errors), daemon=True)
        thread.start()
        assert blocked.waiting.wait(10)
        reader.close()
        thread.join(10)
        assert not thread.is_alive()
        assert len(errors) == 1
        assert isinstance(errors[0], AlreadyClosed)
        assert not reader.is_connected()
        with pytest.raises(AlreadyClosed):
            reader.has_message_available()
        reader.close()  # idempotent
    finally:
        client.close()


def test_client_close_wakes_a_blocked_read_next(tmp_path: Path) -> None:
    client = Client(str(tmp_path), reader_poll_interval_ms=60_000)
    reader = client.create_reader("t", MessageId.earliest)
    blocked = watch_waits(reader)
    errors: list[BaseException] = []
    thread = threading.Thread(target=lambda: _capture(reader.read_next, errors), daemon=True)
    thread.start()
    assert blocked.waiting.wait(10)
    client.close()
    thread.join(10)
    assert not thread.is_alive()
    assert [type(e) for e in errors] == [AlreadyClosed]


def test_reader_listener_receives_messages(client: Client) -> None:
    received: list[tuple[Reader, bytes]] = []
    three = threading.Event()

    def listener(reader: Reader, msg: Message) -> None:
        received.append((reader, msg.data()))
        if len(received) == 3:
            three.set()

    producer = client.create_producer("t")
    producer.send(b"before")
    reader = client.create_reader("t", MessageId.earliest, reader_listener=listener)
    producer.send(b"after 1")
    producer.send(b"after 2")
    assert three.wait(10)
    reader.close()
    assert [data for _, data in received] == [b"before", b"after 1", b"after 2"]
    assert all(r is reader for r, _ in received)


def test_small_receiver_queue_reads_everything_in_order(client: Client) -> None:
    producer = client.create_producer("t", batching_enabled=True, batching_max_publish_delay_ms=60_000)
    for i in range(7):
        producer.send_async(b"%d" % i, None)
    producer.flush()
    reader = client.create_reader("t", MessageId.earliest, receiver_queue_size=2)
    assert drain(reader) == [b"%d" % i for i in range(7)]


def test_chunks_are_reassembled_across_fetches(tmp_path: Path) -> None:
    client = Client(str(tmp_path), broker_config=BrokerConfig(max_message_size=100))
    try:
        producer = client.create_producer("t", chunking_enabled=True)
        big = os.urandom(450)
        producer.send(big)
        producer.send(b"small")
        reader = client.create_reader("t", MessageId.earliest, receiver_queue_size=2)
        assert drain(reader) == [big, b"small"]
    finally:
        client.close()


# -- read_batch ---------------------------------------------------------------------------------------


def test_read_batch_returns_arrow_with_position_columns(
    client: Client, mixed_topic: dict[str, MessageId]
) -> None:
    reader = client.create_reader("t", MessageId.earliest)
    first = reader.read_batch(max_messages=4)
    rest = reader.read_batch()
    assert isinstance(first, pa.Table)
    for column in (
        "value",
        "key",
        "properties",
        "publish_time",
        "partition",
        "offset",
        "entry_id",
        "batch_index",
    ):
        assert column in first.column_names
    assert first.schema == rest.schema
    table = pa.concat_tables([first, rest])
    assert table.column("value").to_pylist() == ALL
    assert table.column("offset").to_pylist() == list(range(7))
    assert table.column("partition").to_pylist() == [-1] * 7
    assert list(
        zip(table.column("entry_id").to_pylist(), table.column("batch_index").to_pylist(), strict=True)
    ) == [(mixed_topic[f"m{i}"].entry_id(), mixed_topic[f"m{i}"].batch_index()) for i in range(7)]
    empty = reader.read_batch()
    assert empty.num_rows == 0
    assert empty.schema == table.schema


def test_read_batch_on_a_partitioned_topic(tmp_path: Path, client: Client) -> None:
    Broker.for_url(str(tmp_path)).admin.create_partitioned_topic("p", 2)
    producer = client.create_producer("p")
    ids = [producer.send(b"%d" % i, partition_key=f"key{i}") for i in range(10)]
    table = client.create_reader("p", MessageId.earliest).read_batch()
    assert table.num_rows == 10
    rows = table.select(["partition", "offset", "entry_id", "value"]).to_pylist()
    for part in (0, 1):
        mine = [r for r in rows if r["partition"] == part]
        assert [r["offset"] for r in mine] == list(range(len(mine)))
        assert [r["entry_id"] for r in mine] == [i.entry_id() for i in ids if i.partition() == part]


# -- across processes ---------------------------------------------------------------------------------


SEND_SCRIPT = textwrap.dedent(
    """
    import sys
    from broker_core import Client

    client = Client(sys.argv[1])
    msg_id = client.create_producer(sys.argv[2]).send(sys.argv[3].encode(), properties={"from": "child"})
    print(msg_id.serialize().hex())
    client.close()
    """
)


def test_a_message_from_another_process_is_read(tmp_path: Path, client: Client) -> None:
    reader = client.create_reader("t", MessageId.latest)
    assert not reader.has_message_available()
    done = run_python("-c", SEND_SCRIPT, tmp_path, "t", "from the child")
    msg = reader.read_next(timeout_millis=10_000)
    assert msg.data() == b"from the child"
    assert msg.properties() == {"from": "child"}
    assert msg.message_id() == MessageId.deserialize(bytes.fromhex(done.stdout.strip()))
