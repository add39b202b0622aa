"""The vectorised column codecs: binary value columns to typed Arrow columns by writer version, and back."""

from __future__ import annotations

import enum

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core import schema as m
from broker_core.errors import PayloadTypeError, SchemaDefinitionError
from broker_core.schema.column_encoding import avro_from_arrow, encode_column, fit_problem, record_info
from broker_core.schema.columns import arrow_type, decode_column
from broker_core.schema.registry import version_bytes


class Kind(enum.Enum):
    a = 1
    b = 2


class V1(m.Record):
    id = m.Long(required=True)
    name = m.String()
    tags = m.Map(m.Integer())
    kind = Kind


class V2(m.Record):
    id = m.Long(required=True)
    name = m.String()
    tags = m.Map(m.Integer())
    kind = Kind
    extra = m.Double(default=1.0, required=True, required_default=True)
    items = m.Array(m.String(), required_default=True)


I1, I2 = m.AvroSchema(V1).schema_info(), m.AvroSchema(V2).schema_info()
WRITERS = {0: I1, 1: I2}.get


def test_avro_rows_of_several_versions_and_tombstones_decode_in_order() -> None:
    values = [m.AvroSchema(V2).encode(V2(id=3, extra=5.0, items=["q"])), None,
              m.AvroSchema(V1).encode(V1(id=1, name="x", tags={"k": 2}, kind=Kind.b)), b""]
    versions = [version_bytes(1), None, version_bytes(0), None]
    column = decode_column(pa.array(values[:3], pa.binary()), pa.array(versions[:3], pa.binary()),
                           reader=I2, writer_of=WRITERS)
    assert column.type == arrow_type(I2)
    assert column.to_pylist() == [
        {"id": 3, "name": None, "tags": None, "kind": None, "extra": 5.0, "items": ["q"]}, None,
        {"id": 1, "name": "x", "tags": [("k", 2)], "kind": "b", "extra": 1.0, "items": None}]
    # and back: the encoded column decodes to the same values with plain fastavro semantics
    again = decode_column(encode_column(column, I2), None, reader=I2, writer_of=WRITERS)
    assert again.to_pylist() == column.to_pylist()
    with pytest.raises(PayloadTypeError, match="version 7"):
        decode_column(pa.array(values[:1], pa.binary()), pa.array([version_bytes(7)], pa.binary()),
                      reader=I2, writer_of=WRITERS)
    with pytest.raises(PayloadTypeError):
        decode_column(pa.array([b"\xff"], pa.binary()), None, reader=I2, writer_of=WRITERS)


def test_json_columns_fill_defaults_and_keep_newlines_in_strings() -> None:
    class J1(m.Record):
        id = m.Long(required=True)
        name = m.String()

    class J2(m.Record):
        id = m.Long(required=True)
        name = m.String()
        score = m.Double(default=0.5, required=True, required_default=True)

    j1, j2 = m.JsonSchema(J1), m.JsonSchema(J2)
    payloads = [j1.encode(J1(id=1, name="a\nb")), None, j2.encode(J2(id=2, score=3.0)), b'{\n "id": 4\n}']
    column = decode_column(pa.array(payloads, pa.binary()), None, reader=j2.schema_info(), writer_of=lambda v: None)
    assert column.to_pylist() == [{"id": 1, "name": "a\nb", "score": 0.5}, None,
                                  {"id": 2, "name": None, "score": 3.0}, {"id": 4, "name": None, "score": 0.5}]
    # records with maps and enums are parsed row by row; a JSON enum keeps its value
    rich = m.JsonSchema(V1)
    column = decode_column(pa.array([rich.encode(V1(id=1, tags={"t": 1}, kind=Kind.a))]), None,
                           reader=rich.schema_info(), writer_of=lambda v: None)
    assert column.to_pylist() == [{"id": 1, "name": None, "tags": [("t", 1)], "kind": "1"}]
    with pytest.raises(PayloadTypeError, match="JSON"):
        decode_column(pa.array([b"{oops"]), None, reader=j2.schema_info(), writer_of=lambda v: None)


@pytest.mark.parametrize(("schema", "values"), [
    (m.Int32Schema(), [1, None, -5]), (m.Int64Schema(), [2**40, -1]), (m.DoubleSchema(), [1.5, None]),
    (m.FloatSchema(), [0.5]), (m.BooleanSchema(), [True, False, None]), (m.Int8Schema(), [-2]),
    (m.StringSchema(), ["é", None]),
])
def test_primitive_columns_match_the_row_encoding(schema: m.Schema, values: list[object]) -> None:
    info = schema.schema_info()
    typed = pa.array(values, arrow_type(info))
    encoded = encode_column(typed, info)
    assert encoded.to_pylist() == [None if v is None else schema.encode(v) for v in values]
    assert decode_column(encoded, None, reader=info, writer_of=lambda v: None).to_pylist() == values


def test_key_value_columns_decode_both_parts() -> None:
    for encoding in m.KeyValueEncodingType:
        schema = m.KeyValueSchema(m.StringSchema(), m.AvroSchema(V1), encoding)
        value = m.KeyValue("k", V1(id=1))
        key, payload = schema.encode_separated(value) if schema.separated_key else (None, schema.encode(value))
        column = decode_column(pa.array([payload]), None, reader=schema.schema_info(), writer_of=lambda v: None,
                               keys=pa.array([key], pa.string()))
        assert column.to_pylist() == [{"key": "k", "value": {"id": 1, "name": None, "tags": None, "kind": None}}]


def test_fit_problems_name_the_column() -> None:
    assert fit_problem(pa.struct([("id", pa.int64()), ("name", pa.string())]), I1) is None
    assert "value.zzz" in str(fit_problem(pa.struct([("id", pa.int64()), ("zzz", pa.int32())]), I1))
    assert "value.id" in str(fit_problem(pa.struct([("name", pa.string())]), I1))
    assert "value.id" in str(fit_problem(pa.struct([("id", pa.string())]), I1))
    assert "value.tags{}" in str(fit_problem(pa.struct([("id", pa.int64()),
                                                         ("tags", pa.map_(pa.string(), pa.string()))]), I1))
    assert "STRING" in str(fit_problem(pa.int32(), m.StringSchema().schema_info()))
    with pytest.raises(PayloadTypeError, match=r"value\.id"):
        encode_column(pa.array([{"id": "x"}], pa.struct([("id", pa.string())])), I1)


def test_derived_record_schemas_round_trip() -> None:
    struct = pa.struct([("id", pa.int64()), ("inner", pa.struct([("xs", pa.list_(pa.string()))]))])
    info = record_info(struct)
    values = pa.array([{"id": 1, "inner": {"xs": ["a"]}}, None], struct)
    assert decode_column(encode_column(values, info), None, reader=info, writer_of=lambda v: None).to_pylist() \
        == values.to_pylist()
    with pytest.raises(SchemaDefinitionError, match=r"value\.t"):
        avro_from_arrow(pa.struct([("t", pa.timestamp("us"))]))
    with pytest.raises(SchemaDefinitionError, match="union"):
        arrow_type(m.AvroSchema(None, schema_definition={
            "type": "record", "name": "U", "fields": [{"name": "u", "type": ["int", "string"]}]}).schema_info())


class Color(enum.Enum):
    red = 1
    green = 2


class Inner(m.Record):
    x = m.Double(required=True)
    label = m.String()


class Flat1(m.Record):
    a = m.Long(required=True)
    b = m.Integer()
    s = m.String()
    f = m.Float()
    flag = m.Boolean(required=True)
    blob = m.Bytes()
    color = Color
    inner = Inner


class Flat2(m.Record):
    a = m.Long(required=True)
    s = m.String()
    b = m.Integer()
    flag = m.Boolean(required=True)
    color = Color
    inner = Inner
    added = m.String(default="dflt", required=True, required_default=True)


def _flat_values(count: int) -> list[Flat1]:
    out = []
    for i in range(count):
        out.append(Flat1(a=(-1) ** i * (2**62 + i) if i % 7 == 0 else i - 50, b=None if i % 3 == 0 else -i,
                         s=None if i % 5 == 0 else "é" * (i % 4) + str(i), f=i / 4, flag=i % 2 == 0,
                         blob=None if i % 4 == 0 else bytes([i % 256]) * (i % 3),
                         color=None if i % 6 == 0 else Color.green,
                         inner=None if i % 8 == 0 else Inner(x=-i * 1.5, label=None if i % 2 else "in")))
    return out


def test_the_vectorised_avro_decoder_equals_fastavro_with_and_without_resolution() -> None:
    from broker_core.schema import avro_vector
    from broker_core.schema.columns import _decode_avro

    values = pa.array([m.AvroSchema(Flat1).encode(v) for v in _flat_values(300)], pa.binary())
    w, r = m.AvroSchema(Flat1).schema_info(), m.AvroSchema(Flat2).schema_info()
    for reader in (w, r):
        target = arrow_type(reader)
        fast = avro_vector.decode_records(values, w.parsed(), reader.parsed(), target)
        # the same through decode_column's Avro entry point, on a slice (a non-zero array offset)
        expected = pa.array([m.AvroSchema(Flat2 if reader is r else Flat1).decode_with(v, w)._to_datum(json=False)
                             for v in values.to_pylist()], target)
        assert fast.to_pylist() == expected.to_pylist()
        assert _decode_avro(values.slice(7, 50), w, reader, target).to_pylist() == expected.to_pylist()[7:57]
    # bad data is not decoded by the vector path (fastavro then reports it)
    with pytest.raises(avro_vector.Unsupported):
        avro_vector.decode_records(pa.array([values[0].as_py() + b"\x00"]), w.parsed(), w.parsed(), arrow_type(w))
    with pytest.raises(PayloadTypeError):
        decode_column(pa.array([values[0].as_py()[:3]]), None, reader=w, writer_of=lambda v: None)


_ROW = st.fixed_dictionaries({
    "a": st.integers(-(2**63), 2**63 - 1),
    "s": st.one_of(st.none(), st.text(max_size=5)),
    "t": st.text(max_size=3),
    "b": st.one_of(st.none(), st.binary(max_size=4)),
    "i": st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
    "d": st.floats(allow_nan=False),
})
_ROW_SCHEMA = {"type": "record", "name": "P", "fields": [
    {"name": "a", "type": "long"}, {"name": "s", "type": ["null", "string"]}, {"name": "t", "type": "string"},
    {"name": "b", "type": ["null", "bytes"]}, {"name": "i", "type": ["int", "null"]}, {"name": "d", "type": "double"}]}


@settings(max_examples=60, deadline=None)
@given(st.lists(_ROW, max_size=20))
def test_the_vectorised_decoder_matches_fastavro_on_any_rows(rows: list[dict[str, object]]) -> None:
    from broker_core.schema import avro_vector

    schema = m.AvroSchema(None, schema_definition=_ROW_SCHEMA)
    payloads = pa.array([schema.encode(r) for r in rows], pa.binary())
    info = schema.schema_info()
    decoded = avro_vector.decode_records(payloads, info.parsed(), info.parsed(), arrow_type(info))
    assert decoded.to_pylist() == [schema.decode(p) for p in payloads.to_pylist()]
    # a slice (a read of part of a segment: the array shares the whole column's buffers) decodes alone
    half = len(rows) // 2
    tail = avro_vector.decode_records(payloads.slice(half), info.parsed(), info.parsed(), arrow_type(info))
    assert tail.to_pylist() == decoded.to_pylist()[half:]


@pytest.mark.parametrize(("column", "expected"), [
    (pa.array([b"\x00\x01"] * 5, pa.binary()), (True, b"\x00\x01")),
    (pa.array([b"ab", b"ab", b"ac"], pa.binary()), (False, None)),
    (pa.array([b"ab", b"abc", b"a"], pa.binary()), (False, None)),  # same total length, other widths
    (pa.array([b"ab", b"a", b"ab", b"a"], pa.binary()).slice(1, 1), (True, b"a")),
    (pa.array([b"x", b"y", b"y", b"y"], pa.binary()).slice(1), (True, b"y")),  # a slice ignores row 0
    (pa.array(["p", "p"], pa.string()), (True, "p")),
    (pa.array([b"", b""], pa.binary()), (True, b"")),
    (pa.array([None, None], pa.binary()), (True, None)),
    (pa.array([b"a", None], pa.binary()), (False, None)),
    (pa.array([], pa.binary()), (False, None)),
    (pa.chunked_array([[b"v1"], [b"v1", b"v1"]], pa.binary()), (True, b"v1")),
    (pa.chunked_array([[b"v1"], [b"v2"]], pa.binary()), (False, None)),
    (pa.array([3, 3, 3]), (True, 3)),
    (pa.array([3, 4]), (False, None)),
])
def test_constant_value_tells_a_one_value_column(column: pa.Array, expected: tuple[bool, object]) -> None:
    from broker_core.schema.constant_column import constant_value

    assert constant_value(column) == expected
