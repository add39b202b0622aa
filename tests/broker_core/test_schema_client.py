"""Typed topics through the client: records, primitive and KeyValue schemas, evolution, refusals, the CLI."""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from records import V1, V2

from broker_core import Client, InitialPosition, MessageId
from broker_core import schema as m
from broker_core.cli import main
from broker_core.errors import IncompatibleSchema, PayloadTypeError, SchemaDefinitionError


class Level(enum.Enum):
    low = "L"
    high = "H"


class V3(m.Record):
    id = m.Long(required=True)
    name = m.String()
    score = m.Double(default=0.5, required=True, required_default=True)
    level = m.CustomEnum(Level, default=Level.low, required=True, required_default=True)


class Clash(m.Record):
    id = m.String(required=True)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    (tmp_path / "_pubsub").mkdir()
    (tmp_path / "_pubsub" / "broker.toml").write_text("fsyncEnabled = false\n")
    c = Client(f"file://{tmp_path}")
    yield c
    c.close()


def _drain(client: Client, topic: str, schema: m.Schema, n: int, sub: str = "s") -> list[Any]:
    consumer = client.subscribe(topic, sub, schema=schema, initial_position=InitialPosition.Earliest)
    try:
        return [consumer.receive(5000).value() for _ in range(n)]
    finally:
        consumer.close()


def test_messages_of_older_versions_are_resolved_to_the_readers_schema(client: Client) -> None:
    for cls, value in ((V1, V1(id=1, name="a")), (V2, V2(id=2, name="b", score=2.0)),
                       (V3, V3(id=3, level=Level.high))):
        producer = client.create_producer("evolve", schema=m.AvroSchema(cls))
        producer.send(value)
        producer.close()
    assert _drain(client, "evolve", m.AvroSchema(V3), 3) == [
        V3(id=1, name="a", score=0.5, level=Level.low), V3(id=2, name="b", score=2.0, level=Level.low),
        V3(id=3, level=Level.high)]
    # an old reader reads newer data too (FULL), dropping the fields it does not know
    assert _drain(client, "evolve", m.AvroSchema(V1), 3, sub="old") == [V1(id=1, name="a"), V1(id=2, name="b"),
                                                                        V1(id=3)]


def test_json_topics_evolve_the_same_way(client: Client) -> None:
    client.create_producer("j", schema=m.JsonSchema(V1)).send(V1(id=1, name="a"))
    client.create_producer("j", schema=m.JsonSchema(V3)).send(V3(id=2, level="high"))
    assert _drain(client, "j", m.JsonSchema(V3), 2) == [V3(id=1, name="a"), V3(id=2, level=Level.high)]


def test_an_incompatible_producer_is_refused_and_nothing_is_written(client: Client, tmp_path: Path) -> None:
    client.create_producer("t", schema=m.AvroSchema(V1)).send(V1(id=1))
    with pytest.raises(IncompatibleSchema) as err:
        client.create_producer("t", schema=m.AvroSchema(Clash))
    assert err.value.version == 0 and "version 0" in str(err.value) and "Clash" in str(err.value)
    assert len(list((tmp_path / "public/default/persistent/_schemas/t").glob("*.json"))) == 1
    with pytest.raises(IncompatibleSchema):
        client.subscribe("t", "s2", schema=m.AvroSchema(Clash))
    with pytest.raises(IncompatibleSchema):
        client.create_reader("t", MessageId.earliest, schema=m.AvroSchema(Clash))
    assert _drain(client, "t", m.AvroSchema(V1), 1) == [V1(id=1)]


def test_topic_policies_choose_the_strategy(client: Client) -> None:
    client.create_producer("p", schema=m.AvroSchema(V1)).close()
    client._broker.policies.set_topic_policies("p", {"schemaCompatibilityStrategy": "ALWAYS_INCOMPATIBLE"})
    with pytest.raises(IncompatibleSchema, match="ALWAYS_INCOMPATIBLE"):
        client.create_producer("p", schema=m.AvroSchema(V2))
    client._broker.policies.set_namespace_policies("public/default", {"isAllowAutoUpdateSchema": False})
    client._broker.policies.set_topic_policies("p", {}, remove=["schemaCompatibilityStrategy"])
    with pytest.raises(IncompatibleSchema, match="isAllowAutoUpdateSchema"):
        client.create_producer("p", schema=m.AvroSchema(V2))
    client._broker.policies.set_namespace_policies("public/default", {"schemaValidationEnforced": True})
    with pytest.raises(IncompatibleSchema, match="schemaValidationEnforced"):
        client.create_producer("p")


def test_partitioned_topics_share_one_registry(client: Client) -> None:
    client._broker.admin.create_partitioned_topic(m_topic := "persistent://public/default/parts", 3)
    producer = client.create_producer(m_topic, schema=m.AvroSchema(V2))
    for i in range(6):
        producer.send(V2(id=i), partition_key=str(i))
    values = _drain(client, m_topic, m.AvroSchema(V2), 6)
    assert sorted(v.id for v in values) == list(range(6))


@pytest.mark.parametrize(("schema", "value"), [
    (m.BooleanSchema(), True), (m.Int8Schema(), -3), (m.Int16Schema(), 300), (m.Int32Schema(), -70000),
    (m.Int64Schema(), 2**40), (m.FloatSchema(), 1.5), (m.DoubleSchema(), -2.25), (m.StringSchema(), "é"),
    (m.BytesSchema(), b"\x00\x01"),
])
def test_primitive_schemas_round_trip_with_pulsars_encodings(client: Client, schema: m.Schema, value: Any) -> None:
    topic = f"prim-{type(schema).__name__}"
    client.create_producer(topic, schema=schema).send(value)
    assert _drain(client, topic, schema, 1) == [value]
    assert m.Int32Schema().encode(1) == b"\0\0\0\1" and m.Int64Schema().encode(-1) == b"\xff" * 8


@pytest.mark.parametrize("encoding", list(m.KeyValueEncodingType))
def test_key_value_schemas_in_both_encodings(client: Client, encoding: m.KeyValueEncodingType) -> None:
    schema = m.KeyValueSchema(m.AvroSchema(V1), m.JsonSchema(V2), encoding)
    topic = f"kv-{encoding.value}"
    producer = client.create_producer(topic, schema=schema)
    producer.send(m.KeyValue(V1(id=1, name="k"), V2(id=2)))
    producer.send(m.KeyValue(V1(id=3), None))
    consumer = client.subscribe(topic, "s", schema=schema, initial_position=InitialPosition.Earliest)
    first, second = consumer.receive(5000), consumer.receive(5000)
    assert first.value() == m.KeyValue(V1(id=1, name="k"), V2(id=2))
    assert second.value().key == V1(id=3)
    if encoding is m.KeyValueEncodingType.SEPARATED:
        assert first.data() == m.JsonSchema(V2).encode(V2(id=2))  # the payload is the value alone
        assert first.partition_key()  # the key travels base64-encoded as the message key
    else:
        assert first.data()[:4] == len(m.AvroSchema(V1).encode(V1(id=1, name="k"))).to_bytes(4, "big")
    consumer.close()
    with pytest.raises(IncompatibleSchema):  # an encoding change is a different schema
        other = m.KeyValueEncodingType.INLINE if encoding is m.KeyValueEncodingType.SEPARATED \
            else m.KeyValueEncodingType.SEPARATED
        client.create_producer(topic, schema=m.KeyValueSchema(m.AvroSchema(V1), m.JsonSchema(V2), other))


def test_bad_values_and_declarations_are_typed_errors(client: Client) -> None:
    producer = client.create_producer("bad", schema=m.AvroSchema(V1))
    with pytest.raises(PayloadTypeError, match="V1"):
        producer.send(V2(id=1))
    with pytest.raises(PayloadTypeError):
        producer.send({"id": 1})
    with pytest.raises(TypeError, match="'id'"):
        V1(id="x")
    with pytest.raises(TypeError, match="Avro int"):
        type("I", (m.Record,), {"n": m.Integer()})(n=2**40)
    with pytest.raises(AttributeError, match="nope"):
        V1(nope=1)
    record = V1(id=1)
    with pytest.raises(AttributeError, match="undeclared"):
        record.other = 3
    with pytest.raises(TypeError, match="required"):
        record.id = None
    with pytest.raises(TypeError, match="enum field"):
        V3(id=1, level="medium")
    with pytest.raises(SchemaDefinitionError):
        m.AvroSchema(None)
    with pytest.raises(SchemaDefinitionError):
        m.AvroSchema(dict)  # type: ignore[arg-type]
    with pytest.raises(SchemaDefinitionError):
        m.Array(int)
    with pytest.raises(SchemaDefinitionError):
        m.KeyValueSchema(m.StringSchema(), "x")  # type: ignore[arg-type]
    with pytest.raises(PayloadTypeError, match="truncated"):
        m.KeyValueSchema(m.StringSchema(), m.StringSchema()).decode(b"\0\0\0\x09ab")
    with pytest.raises(PayloadTypeError, match="4 bytes"):
        m.Int32Schema().decode(b"\0")
    with pytest.raises(PayloadTypeError):
        m.Int8Schema().encode(300)
    with pytest.raises(PayloadTypeError):
        m.Int32Schema().encode(True)
    with pytest.raises(PayloadTypeError, match="not JSON"):
        m.JsonSchema(V1).decode(b"{")
    assert record.__dict__ == {"id": 1, "name": None}  # nothing half-set by the refused assignments


def test_dict_schemas_without_a_record_class(client: Client) -> None:
    definition = {"type": "record", "name": "D", "fields": [{"name": "a", "type": "int"}]}
    schema = m.AvroSchema(None, schema_definition=definition)
    client.create_producer("dicts", schema=schema).send({"a": 4})
    assert _drain(client, "dicts", schema, 1) == [{"a": 4}]
    with pytest.raises(PayloadTypeError, match="does not fit"):
        schema.encode({"a": "x"})


@pytest.fixture
def cli(client: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    def run(*args: str) -> tuple[int, Any, str]:
        code = main(["--root", str(tmp_path), *args, "--json"])
        out = capsys.readouterr()
        return code, json.loads(out.out) if code == 0 else None, out.err

    return run


def test_cli_schemas_get_upload_compatibility_delete(cli: Any, client: Client, tmp_path: Path) -> None:
    v1 = tmp_path / "v1.json"
    v1.write_text(json.dumps({"type": "AVRO", "schema": json.dumps(V1.schema()), "properties": {}}))
    clash = tmp_path / "clash.json"
    clash.write_text(json.dumps({"type": "AVRO", "schema": Clash.schema()}))
    code, _, err = cli("schemas", "get", "cli-topic")
    assert code == 1 and "does not exist" in err  # issue 28: a missing topic, not "has no schema"
    assert cli("schemas", "upload", "cli-topic", "-f", str(v1))[1]["version"] == 0
    got = cli("schemas", "get", "cli-topic")[1]
    assert got["version"] == 0 and json.loads(got["schema"]) == V1.schema()
    assert cli("schemas", "compatibility", "cli-topic", "-f", str(v1))[1]["registeredAs"] == 0
    code, _, err = cli("schemas", "compatibility", "cli-topic", "-f", str(clash))
    assert code == 1 and "version 0" in err and "FULL" in err
    code, _, err = cli("schemas", "upload", "cli-topic", "-f", str(clash))
    assert code == 1 and "incompatible" in err
    assert len(cli("schemas", "get", "cli-topic", "--all")[1]["versions"]) == 1
    # the registered schema is what a producer of V1 uses
    client.create_producer("cli-topic", schema=m.AvroSchema(V1)).send(V1(id=9))
    assert cli("schemas", "delete", "cli-topic")[1]["deletedAt"] == 1
    assert cli("schemas", "upload", "cli-topic", "-f", str(clash))[1]["version"] == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "XML"}')
    code, _, err = cli("schemas", "upload", "cli-topic", "-f", str(bad))
    assert code == 2 or code == 1
    assert "XML" in err
    code, _, err = cli("schemas", "get", "cli-topic", "--version", "7")
    assert code == 1 and "no schema version 7" in err


def test_deleting_a_topic_ends_its_schema_history(client: Client) -> None:
    client.create_producer("gone", schema=m.AvroSchema(V1)).close()
    client._broker.admin.delete_topic("gone", force=True)
    registry = client._broker.schemas.registry("gone")
    assert registry.latest() is None and registry.get(0) is not None  # old versions stay readable
    client.create_producer("gone", schema=m.AvroSchema(Clash)).send(Clash(id="x"))
    assert registry.latest()[0] == 2
