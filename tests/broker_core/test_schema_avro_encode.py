"""Avro records encoded a batch at a time (``broker_core/schema/avro_encode.py``, D91).

A producer of a plain ``Record`` class defers each send's encoding to the batch: the payloads must be
byte for byte fastavro's, the values those of the record when it was sent (a later change to the
record does not leak in), and a record that does not fit the schema must still fail its own send.
"""

from __future__ import annotations

import enum
import io
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pytest

from broker_core import BrokerConfig, Client, InitialPosition, MessageTooBig
from broker_core import schema as m
from broker_core.errors import PayloadTypeError


class Mixed(m.Record):
    a = m.Long(required=True)
    b = m.String()
    c = m.Double(required=True)
    d = m.Integer()
    e = m.Boolean(required=True)
    f = m.Bytes()
    g = m.Float()


class Shade(enum.Enum):
    light = 1
    dark = 2


class Color(m.Record):
    name = m.String(required=True)
    shade = m.CustomEnum(Shade)


def _random_records(seed: int, n: int) -> list[Mixed]:
    rnd = random.Random(seed)
    return [Mixed(a=rnd.choice([0, -1, 1, 63, 64, -65, 2**63 - 1, -(2**63), rnd.randrange(-2**40, 2**40)]),
                  b=rnd.choice([None, "", "abc" * rnd.randrange(0, 50), "x"]),
                  c=rnd.choice([0.0, -0.0, 1e300, float("inf"), float("nan"), rnd.random()]),
                  d=rnd.choice([None, 0, -(2**31), 2**31 - 1, rnd.randrange(-1000, 1000)]),
                  e=rnd.random() < 0.5,
                  f=rnd.choice([None, b"", bytes(rnd.randrange(0, 300))]),
                  g=rnd.choice([None, 1e300, 0.5, -3.25, rnd.random()]))
            for _ in range(n)]


def _fastavro(record: m.Record) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(type(record).schema()), record._to_datum(json=False))
    return buffer.getvalue()


def test_bulk_payloads_are_fastavros_bytes_and_sizes_are_upper_bounds() -> None:
    records = _random_records(1, 2000)
    encoder = m.AvroSchema(Mixed).deferred_encoder()
    assert encoder is not None
    deferred = [encoder.defer(r) for r in records]
    assert all(type(d) is tuple for d in deferred)
    expected = [_fastavro(r) for r in records]
    assert encoder.column(deferred).to_pylist() == expected
    assert all(encoder.deferred_size(d) >= len(e) for d, e in zip(deferred, expected, strict=True))


def test_a_batch_mixing_deferred_records_payloads_and_tombstones_keeps_its_order() -> None:
    schema = m.AvroSchema(Mixed)
    encoder = schema.deferred_encoder()
    assert encoder is not None
    plain, accented, int_for_double = Mixed(a=1, c=0.5, e=True), Mixed(a=2, b="é", c=1.0, e=False), \
        Mixed(a=3, c=7, e=True)
    values = [None, encoder.defer(plain), encoder.defer(accented), b"raw", encoder.defer(int_for_double)]
    assert type(values[2]) is bytes and type(values[4]) is bytes  # fastavro at the send: not checked cheaply
    assert encoder.column(values).to_pylist() == [None, _fastavro(plain), _fastavro(accented), b"raw",
                                                  _fastavro(int_for_double)]


def test_only_flat_records_of_plain_fields_defer() -> None:
    assert m.AvroSchema(Color).deferred_encoder() is None  # an enum field: fastavro at every send
    assert m.AvroSchema(None, schema_definition=Mixed.schema()).deferred_encoder() is None  # dicts
    assert m.JsonSchema(Mixed).deferred_encoder() is None


def test_a_row_that_escaped_the_checks_is_named_by_the_per_record_fallback() -> None:
    encoder = m.AvroSchema(Mixed).deferred_encoder()
    assert encoder is not None
    good = encoder.defer(Mixed(a=1, c=0.5, e=True))
    bad = ("not a long", None, 0.5, None, True, None, None, 40)  # what no send hands over
    with pytest.raises(PayloadTypeError, match="not a long"):
        encoder.column([good, bad])


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    (tmp_path / "_pubsub").mkdir()
    (tmp_path / "_pubsub" / "broker.toml").write_text("fsyncEnabled = false\n")
    c = Client(f"file://{tmp_path}", broker_config=BrokerConfig(max_message_size=1000))
    yield c
    c.close()


def _received(client: Client, topic: str, n: int) -> list[Any]:
    consumer = client.subscribe(topic, "s", schema=m.AvroSchema(Mixed), initial_position=InitialPosition.Earliest)
    try:
        msgs = [consumer.receive(10_000) for _ in range(n)]
        return [msg.value() for msg in msgs]
    finally:
        consumer.close()


def test_a_producer_sends_the_record_as_it_was_at_the_send(client: Client) -> None:
    producer = client.create_producer("t", schema=m.AvroSchema(Mixed), batching_enabled=True)
    assert producer._bulk is not None  # the deferred path is the one under test
    record = Mixed(a=0, b="first", c=1.5, e=True)
    sent = []
    for i in range(5):
        record.a, record.b = i, f"value {i}"  # one record object reused, changed after each send
        producer.send_async(record, None)
        sent.append(Mixed(a=i, b=f"value {i}", c=1.5, e=True))
    record.c = -1.0
    producer.flush()
    producer.close()
    assert _received(client, "t", 5) == sent


def test_a_record_that_does_not_fit_fails_its_own_send_only(client: Client) -> None:
    producer = client.create_producer("t", schema=m.AvroSchema(Mixed), batching_enabled=True)
    producer.send_async(Mixed(a=1, c=0.5, e=True), None)
    missing = Mixed(c=0.5, e=True)  # the required long was never set
    with pytest.raises(PayloadTypeError):
        producer.send_async(missing, None)
    surrogate = Mixed(a=2, b="\ud800", c=0.5, e=True)  # no UTF-8 form
    with pytest.raises(PayloadTypeError):
        producer.send_async(surrogate, None)
    producer.send_async(Mixed(a=3, c=0.5, e=True), None)
    producer.flush()
    producer.close()
    assert [v.a for v in _received(client, "t", 2)] == [1, 3]


def test_max_message_size_is_checked_against_the_exact_size(client: Client) -> None:
    producer = client.create_producer("t", schema=m.AvroSchema(Mixed), batching_enabled=False)
    fits = Mixed(a=1, b="x" * 960, c=0.5, e=True)  # its size bound is over 1000 bytes, its payload is not
    encoder = m.AvroSchema(Mixed).deferred_encoder()
    assert encoder is not None and encoder.deferred_size(encoder.defer(fits)) > 1000 >= len(_fastavro(fits))
    producer.send(fits)
    with pytest.raises(MessageTooBig):
        producer.send(Mixed(a=1, b="x" * 1000, c=0.5, e=True))
    producer.close()
    assert [v.b for v in _received(client, "t", 1)] == ["x" * 960]
