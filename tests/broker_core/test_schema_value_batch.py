"""``Message.value()`` of a segment read's Avro messages: decoded for the whole batch at once.

The batch path (``RowBatch``, ``AvroSchema.decode_values``) must give exactly what decoding each
message alone gives, hand each value out once (a second ``value()`` is a fresh object), and step
aside (message by message) whenever it could differ: older writer versions, tombstones, replaced
payloads, logical types.  Batches of at least ``_MIN_BATCH_ROWS`` messages take it; the counts
below are above that.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core import Client, InitialPosition
from broker_core import message as message_module
from broker_core import schema as m
from broker_core.errors import InvalidConfiguration
from broker_core.schema import avro as avro_module

N = 300
assert N > message_module._MIN_BATCH_ROWS


class Mood(enum.Enum):
    calm = "C"
    busy = "B"


class Inner(m.Record):
    x = m.Double(required=True)


class Plain(m.Record):
    id = m.Long(required=True)
    name = m.String()
    ratio = m.Float()
    small = m.Integer()
    flag = m.Boolean()
    blob = m.Bytes()


class Rich(m.Record):
    id = m.Long(required=True)
    mood = m.CustomEnum(Mood, default=Mood.calm, required=True, required_default=True)
    inner = Inner()


class PlainV2(m.Record):
    id = m.Long(required=True)
    name = m.String()
    ratio = m.Float()
    small = m.Integer()
    flag = m.Boolean()
    blob = m.Bytes()
    extra = m.String(default="x", required=True, required_default=True)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    (tmp_path / "_pubsub").mkdir()
    (tmp_path / "_pubsub" / "broker.toml").write_text("fsyncEnabled = false\n")
    c = Client(f"file://{tmp_path}")
    yield c
    c.close()


@pytest.fixture
def fastavro_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts per-message fastavro decodes (the path the batch decode replaces)."""
    calls: list[int] = []
    real = avro_module._read

    def counting(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(avro_module, "_read", counting)
    return calls


def _plain(i: int) -> Plain:
    return Plain(id=i, name=None if i % 7 == 0 else f"n{i}", ratio=i / 4, small=-i, flag=i % 2 == 0,
                 blob=bytes([i % 256]) * (i % 5))


def _send(client: Client, topic: str, schema: m.Schema, values: list[Any]) -> None:
    producer = client.create_producer(topic, schema=schema, batching_enabled=True, block_if_queue_full=True)
    for value in values:
        producer.send_async(value, None)
    producer.flush()
    producer.close()


def _receive_all(client: Client, topic: str, schema: m.Schema, n: int) -> list[Any]:
    consumer = client.subscribe(topic, "s", schema=schema, initial_position=InitialPosition.Earliest,
                                receiver_queue_size=n)
    try:
        msgs = [consumer.receive(10_000) for _ in range(n)]
        for msg in msgs:
            consumer.acknowledge(msg)
        return msgs
    finally:
        consumer.close()


def test_a_batch_decodes_without_fastavro_per_message_and_equals_the_per_message_decode(
    client: Client, fastavro_calls: list[int]
) -> None:
    schema = m.AvroSchema(Plain)
    sent = [_plain(i) for i in range(N)]
    _send(client, "plain", schema, sent)
    msgs = _receive_all(client, "plain", schema, N)
    values = [msg.value() for msg in msgs]
    assert values == sent
    assert all(type(v) is Plain for v in values)
    assert not fastavro_calls  # one vectorised pass per segment read, no per-message fastavro call
    assert values == [schema.decode(msg.data()) for msg in msgs]  # the per-message decode agrees


def test_each_value_call_is_a_fresh_object(client: Client) -> None:
    schema = m.AvroSchema(Plain)
    _send(client, "fresh", schema, [_plain(i) for i in range(N)])
    msg = _receive_all(client, "fresh", schema, N)[3]
    first = msg.value()
    first.name = "changed"
    second = msg.value()
    assert second is not first and second == _plain(3)


def test_enums_and_nested_records_take_the_batch_path(client: Client, fastavro_calls: list[int]) -> None:
    schema = m.AvroSchema(Rich)
    sent = [Rich(id=i, mood=Mood.busy if i % 3 else Mood.calm, inner=None if i % 4 == 0 else Inner(x=i / 2))
            for i in range(N)]
    _send(client, "rich", schema, sent)
    values = [msg.value() for msg in _receive_all(client, "rich", schema, N)]
    assert values == sent
    assert isinstance(values[1].mood, Mood) and isinstance(values[1].inner, Inner)
    assert not fastavro_calls


def test_dict_schemas_decode_in_batches_too(client: Client) -> None:
    schema = m.AvroSchema(None, schema_definition=Plain.schema())
    _send(client, "dicts", schema, [_plain(i)._to_datum(json=False) for i in range(N)])
    values = [msg.value() for msg in _receive_all(client, "dicts", schema, N)]
    assert values == [dict(_plain(i)._to_datum(json=False)) for i in range(N)]


def test_older_writer_versions_in_the_same_read_are_resolved_message_by_message(client: Client) -> None:
    _send(client, "evolving", m.AvroSchema(Plain), [_plain(i) for i in range(N)])
    _send(client, "evolving", m.AvroSchema(PlainV2), [PlainV2(id=N + i, extra="y") for i in range(N)])
    values = [msg.value() for msg in _receive_all(client, "evolving", m.AvroSchema(PlainV2), 2 * N)]
    assert [v.extra for v in values] == ["x"] * N + ["y"] * N  # the v1 rows get the reader's default
    assert [v.id for v in values] == list(range(2 * N))
    assert values[5].name == "n5" and values[5].ratio == 5 / 4


def test_tombstones_in_a_batch(client: Client) -> None:
    schema = m.AvroSchema(Plain)
    sent: list[Plain | None] = [None if i % 10 == 0 else _plain(i) for i in range(N)]
    _send(client, "tombstones", schema, sent)
    values = [msg.value() for msg in _receive_all(client, "tombstones", schema, N)]
    assert values == sent


def test_logical_types_are_decoded_by_fastavro(client: Client) -> None:
    definition = {"type": "record", "name": "Stamped",
                  "fields": [{"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
    schema = m.AvroSchema(None, schema_definition=definition)
    assert not schema.batch_decodes  # the vectorised decoder would return ints where fastavro gives datetimes
    import datetime

    stamp = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    _send(client, "stamped", schema, [{"at": stamp}] * N)
    assert {msg.value()["at"] for msg in _receive_all(client, "stamped", schema, N)} == {stamp}


def test_message_ids_are_built_on_demand_and_match_the_producers(client: Client) -> None:
    schema = m.AvroSchema(Plain)
    producer = client.create_producer("ids", schema=schema, batching_enabled=True)
    sent_ids = []
    for i in range(N):
        producer.send_async(_plain(i), lambda _res, msg_id: sent_ids.append(msg_id))
    producer.flush()
    producer.close()
    msgs = _receive_all(client, "ids", schema, N)
    assert msgs[0]._message_id is None  # nobody asked yet
    assert [msg.message_id() for msg in msgs] == sent_ids
    assert msgs[0].message_id() is msgs[0].message_id()


def test_receive_checks_its_timeout_even_with_messages_queued(client: Client) -> None:
    schema = m.AvroSchema(Plain)
    _send(client, "timeouts", schema, [_plain(i) for i in range(3)])
    consumer = client.subscribe("timeouts", "s", schema=schema, initial_position=InitialPosition.Earliest)
    try:
        assert consumer.receive(10_000).value() == _plain(0)  # (a message is queued from here on)
        with pytest.raises(InvalidConfiguration):
            consumer.receive("100")  # type: ignore[arg-type]
        assert consumer.receive(10_000).value() == _plain(1)
    finally:
        consumer.close()


def test_a_reader_takes_the_batch_path_too(client: Client, fastavro_calls: list[int]) -> None:
    from broker_core import MessageId

    schema = m.AvroSchema(Plain)
    sent = [_plain(i) for i in range(N)]
    _send(client, "readers", schema, sent)
    reader = client.create_reader("readers", MessageId.earliest, schema=schema)
    try:
        msgs = [reader.read_next(10_000) for _ in range(N)]
    finally:
        reader.close()
    assert [msg.value() for msg in msgs] == sent
    assert not fastavro_calls


# -- a segment decoded once for all its reads (``client/segment_values.py``, D118) -----------------

SEGMENT = 1_000  # one segment (one producer batch) read in reads of READ rows, not aligned with it
READ = 300


@pytest.fixture
def batch_decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of payloads of each batch decode."""
    sizes: list[int] = []
    real = avro_module.AvroSchema.decode_batch

    def counting(self: avro_module.AvroSchema, payloads: Any, *args: Any) -> Any:
        sizes.append(len(payloads))
        return real(self, payloads, *args)

    monkeypatch.setattr(avro_module.AvroSchema, "decode_batch", counting)
    return sizes


def _one_segment(client: Client, topic: str, values: list[Any], schema: m.Schema | None = None) -> None:
    producer = client.create_producer(topic, schema=schema or m.AvroSchema(Plain), batching_enabled=True,
                                      batching_max_messages=SEGMENT, batching_max_publish_delay_ms=60_000,
                                      block_if_queue_full=True)
    for value in values:
        producer.send_async(value, None)
    producer.flush()
    producer.close()


def _values_in_reads(client: Client, topic: str, n: int, schema: m.Schema | None = None) -> list[Any]:
    consumer = client.subscribe(topic, "s", schema=schema or m.AvroSchema(Plain),
                                initial_position=InitialPosition.Earliest, receiver_queue_size=READ)
    try:
        values = []
        for _ in range(n):
            msg = consumer.receive(10_000)
            values.append(msg.value())
            consumer.acknowledge(msg)
        return values
    finally:
        consumer.close()


def test_the_reads_of_one_segment_share_one_decode(client: Client, batch_decodes: list[int],
                                                   fastavro_calls: list[int]) -> None:
    sent = [_plain(i) for i in range(SEGMENT)]
    _one_segment(client, "shared-decode", sent)
    assert _values_in_reads(client, "shared-decode", SEGMENT) == sent
    # the whole segment once; the last read (100 rows) is below the batch minimum and so is its own
    assert batch_decodes == [SEGMENT]
    assert len(fastavro_calls) == SEGMENT % READ


def test_a_segment_that_cannot_decode_at_once_leaves_each_read_its_own(
        client: Client, batch_decodes: list[int], fastavro_calls: list[int]) -> None:
    sent: list[Plain | None] = [_plain(i) for i in range(SEGMENT - 1)] + [None]  # a tombstone, last
    _one_segment(client, "tombstone-last", sent)
    assert _values_in_reads(client, "tombstone-last", SEGMENT) == sent
    assert batch_decodes[0] == SEGMENT and batch_decodes[1:] == [READ] * (SEGMENT // READ)
    assert len(fastavro_calls) == SEGMENT % READ - 1  # the last read, one by one (a tombstone has none)


@pytest.mark.parametrize("why", ["evicted", "big"])
def test_without_the_segment_each_read_decodes_its_own_rows(
        client: Client, batch_decodes: list[int], monkeypatch: pytest.MonkeyPatch, why: str) -> None:
    from broker_core.client import segment_values
    from broker_core.topic.topic_log import TopicLog

    if why == "evicted":  # the log's cache let the segment go: no storage call for it from value()
        monkeypatch.setattr(TopicLog, "cached_segment_rows", lambda self, seg: None)
    else:
        monkeypatch.setattr(segment_values, "MAX_SEGMENT_ROWS", SEGMENT - 1)
    sent = [_plain(i) for i in range(SEGMENT)]
    _one_segment(client, f"own-{why}", sent)
    assert _values_in_reads(client, f"own-{why}", SEGMENT) == sent
    assert batch_decodes == [READ] * (SEGMENT // READ)


def test_a_segment_of_an_older_writer_is_resolved_in_every_read(client: Client, batch_decodes: list[int]) -> None:
    _one_segment(client, "older", [_plain(i) for i in range(SEGMENT)])
    values = _values_in_reads(client, "older", SEGMENT, m.AvroSchema(PlainV2))
    assert [v.extra for v in values] == ["x"] * SEGMENT and [v.id for v in values] == list(range(SEGMENT))
    assert values[5].name == "n5" and values[5].ratio == 5 / 4
    assert batch_decodes[0] == SEGMENT  # tried for the segment, then for each read: another writer's rows
