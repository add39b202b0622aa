"""The per-topic schema registry and Pulsar's compatibility strategies, across three versions."""

from __future__ import annotations

import json

import pytest

from broker_core import schema as m
from broker_core.errors import IncompatibleSchema, LogCorrupted, SchemaDefinitionError
from broker_core.naming import TopicName
from broker_core.schema.compatibility import SchemaCompatibilityStrategy as S
from broker_core.schema.info import SchemaInfo, SchemaType
from broker_core.schema.negotiation import SchemaPolicy, check_consumer, producer_version
from broker_core.schema.registry import SchemaRegistry, version_bytes, version_of
from broker_core.storage import LocalFileIO

TOPIC = TopicName.parse("persistent://public/default/typed")


def _record(cls_name: str, /, **fields: m.Field) -> type[m.Record]:
    return type(cls_name, (m.Record,), dict(fields))


def _no_default() -> m.String:
    return m.String()


def _with_default() -> m.String:
    return m.String(default="", required_default=True)


# Three versions each.  B: the last change breaks BACKWARD only against version 0 (transitive);
# F: the last change breaks FORWARD only against version 0; X: breaks BACKWARD against the latest;
# Y: breaks FORWARD against the latest.  (See docs/CLIENT.md, "Compatibility strategies".)
CHAINS = {
    "B": [_record("R", id=m.Long(required=True)),
          _record("R", id=m.Long(required=True), email=_with_default()),
          _record("R", id=m.Long(required=True), email=_no_default())],
    "F": [_record("R", id=m.Long(required=True), name=_no_default()),
          _record("R", id=m.Long(required=True), name=_with_default()),
          _record("R", id=m.Long(required=True))],
    "X": [_record("R", id=m.Long(required=True)),
          _record("R", id=m.Long(required=True), email=_with_default()),
          _record("R", id=m.Long(required=True), email=_with_default(), age=m.Integer(required=True))],
    "Y": [_record("R", id=m.Long(required=True), name=_no_default()),
          _record("R", id=m.Long(required=True), name=_no_default(), email=_with_default()),
          _record("R", id=m.Long(required=True), email=_with_default())],
}

# Is the third version accepted?  (The second one is accepted by every strategy but ALWAYS_INCOMPATIBLE.)
THIRD_ACCEPTED = {
    S.ALWAYS_COMPATIBLE: {"B": True, "F": True, "X": True, "Y": True},
    S.BACKWARD: {"B": True, "F": True, "X": False, "Y": True},
    S.FORWARD: {"B": True, "F": True, "X": True, "Y": False},
    S.FULL: {"B": True, "F": True, "X": False, "Y": False},
    S.BACKWARD_TRANSITIVE: {"B": False, "F": True, "X": False, "Y": True},
    S.FORWARD_TRANSITIVE: {"B": True, "F": False, "X": True, "Y": False},
    S.FULL_TRANSITIVE: {"B": False, "F": False, "X": False, "Y": False},
}


@pytest.fixture
def registry(tmp_path) -> SchemaRegistry:  # type: ignore[no-untyped-def]
    return SchemaRegistry(LocalFileIO(str(tmp_path), fsync=False), TOPIC)


@pytest.mark.parametrize("strategy", list(THIRD_ACCEPTED), ids=lambda s: s.value)
@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_evolution_across_three_versions(registry: SchemaRegistry, strategy: S, chain: str) -> None:
    policy = SchemaPolicy(strategy=strategy)
    v1, v2, v3 = (m.AvroSchema(cls).schema_info() for cls in CHAINS[chain])
    assert producer_version(registry, v1, policy, now_ms=1) == 0
    assert producer_version(registry, v2, policy, now_ms=2) == 1
    assert producer_version(registry, v1, policy, now_ms=3) == 0  # a registered schema is reused, not re-added
    if THIRD_ACCEPTED[strategy][chain]:
        assert producer_version(registry, v3, policy, now_ms=4) == 2
        assert registry.get(2) == v3
    else:
        with pytest.raises(IncompatibleSchema) as err:
            producer_version(registry, v3, policy, now_ms=4)
        assert err.value.version in (0, 1)  # names the registered version it conflicts with
        assert f"version {err.value.version}" in str(err.value) and strategy.value in str(err.value)
        assert [n for n, _ in registry.all_versions()] == [0, 1]  # nothing written


def test_always_incompatible_refuses_any_second_version(registry: SchemaRegistry) -> None:
    policy = SchemaPolicy(strategy=S.ALWAYS_INCOMPATIBLE)
    v1, v2, _ = (m.AvroSchema(cls).schema_info() for cls in CHAINS["B"])
    assert producer_version(registry, v1, policy, now_ms=1) == 0
    with pytest.raises(IncompatibleSchema, match="ALWAYS_INCOMPATIBLE"):
        producer_version(registry, v2, policy, now_ms=2)
    assert producer_version(registry, v1, policy, now_ms=3) == 0
    check_consumer(registry, v1, policy)
    with pytest.raises(IncompatibleSchema):
        check_consumer(registry, v2, policy)


def test_auto_update_off_refuses_unregistered_schemas(registry: SchemaRegistry) -> None:
    off = SchemaPolicy(allow_auto_update=False)
    v1 = m.AvroSchema(CHAINS["B"][0]).schema_info()
    with pytest.raises(IncompatibleSchema, match="isAllowAutoUpdateSchema"):
        producer_version(registry, v1, off, now_ms=1)
    assert registry.all_versions() == []
    producer_version(registry, v1, SchemaPolicy(), now_ms=1)  # an admin upload, in effect
    assert producer_version(registry, v1, off, now_ms=2) == 0


def test_untyped_producers_and_validation_enforced(registry: SchemaRegistry) -> None:
    bytes_info = m.BytesSchema().schema_info()
    assert producer_version(registry, bytes_info, SchemaPolicy(validation_enforced=True), now_ms=1) is None
    producer_version(registry, m.AvroSchema(CHAINS["B"][0]).schema_info(), SchemaPolicy(), now_ms=1)
    assert producer_version(registry, bytes_info, SchemaPolicy(), now_ms=2) is None
    with pytest.raises(IncompatibleSchema, match="schemaValidationEnforced"):
        producer_version(registry, bytes_info, SchemaPolicy(validation_enforced=True), now_ms=3)
    with pytest.raises(IncompatibleSchema, match="schemaValidationEnforced"):
        check_consumer(registry, bytes_info, SchemaPolicy(validation_enforced=True))


def test_type_changes_and_primitives_are_incompatible(registry: SchemaRegistry) -> None:
    producer_version(registry, m.AvroSchema(CHAINS["B"][0]).schema_info(), SchemaPolicy(), now_ms=1)
    with pytest.raises(IncompatibleSchema, match="JSON"):
        producer_version(registry, m.JsonSchema(CHAINS["B"][0]).schema_info(), SchemaPolicy(), now_ms=2)
    other = SchemaRegistry(registry.io, TopicName.parse("ints"))
    producer_version(other, m.Int32Schema().schema_info(), SchemaPolicy(), now_ms=1)
    with pytest.raises(IncompatibleSchema):
        producer_version(other, m.Int64Schema().schema_info(), SchemaPolicy(), now_ms=2)


def test_consumer_checks_follow_the_strategy(registry: SchemaRegistry) -> None:
    v1, v2, v3 = (m.AvroSchema(cls).schema_info() for cls in CHAINS["X"])
    producer_version(registry, v1, SchemaPolicy(), now_ms=1)
    producer_version(registry, v2, SchemaPolicy(), now_ms=2)
    check_consumer(registry, v1, SchemaPolicy())  # registered: always fine
    with pytest.raises(IncompatibleSchema, match="age"):
        check_consumer(registry, v3, SchemaPolicy())  # cannot fill 'age' from version 1's data
    check_consumer(registry, v3, SchemaPolicy(strategy=S.ALWAYS_COMPATIBLE))


def test_delete_starts_a_fresh_history(registry: SchemaRegistry) -> None:
    v1 = m.AvroSchema(CHAINS["B"][0]).schema_info()
    other = m.Int64Schema().schema_info()
    producer_version(registry, v1, SchemaPolicy(), now_ms=1)
    assert registry.delete(now_ms=2) == 1
    assert registry.latest() is None and registry.get(0) == v1  # old versions still decode old messages
    assert registry.delete(now_ms=3) is None  # nothing live: nothing written
    assert producer_version(registry, other, SchemaPolicy(), now_ms=4) == 2


def test_versions_are_immutable_files_named_by_number(registry: SchemaRegistry, tmp_path) -> None:  # type: ignore[no-untyped-def]
    info = m.AvroSchema(CHAINS["B"][0]).schema_info()
    producer_version(registry, info, SchemaPolicy(), now_ms=5)
    path = tmp_path / "public" / "default" / "persistent" / "_schemas" / "typed" / f"{0:020d}.json"
    doc = json.loads(path.read_text())
    assert doc == {"type": "AVRO", "name": "AVRO", "schema": info.schema(), "properties": {}, "createdMs": 5,
                   "deleted": False}
    assert version_bytes(0) == b"\0" * 8 and version_of(version_bytes(300)) == 300
    # a partition shares its topic's registry
    assert SchemaRegistry(registry.io, TOPIC.partition(3)).get(0) == info
    path.with_name(f"{1:020d}.json").write_text("{not json")
    with pytest.raises(LogCorrupted, match="schema version file"):
        SchemaRegistry(registry.io, TOPIC).get(1)


def test_bad_schema_documents_are_refused() -> None:
    with pytest.raises(SchemaDefinitionError, match="schema type"):
        SchemaInfo.from_json({"type": "XML", "schema": ""})
    with pytest.raises(SchemaDefinitionError, match="not JSON"):
        SchemaInfo.from_json({"type": "AVRO", "schema": "{oops"})
    with pytest.raises(SchemaDefinitionError, match="properties"):
        SchemaInfo.from_json({"type": "AVRO", "schema": "{}", "properties": {"a": 1}})
    info = SchemaInfo.from_json({"type": "AVRO", "schema": {"type": "record", "name": "R", "fields": []}})
    assert info.type is SchemaType.AVRO and info.parsed()["name"] == "R"
