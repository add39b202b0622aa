"""Container fields of a ``Record``: ``Array`` and ``Map`` (the shape of ``pulsar.schema``'s).

Their own module because their item type may be a ``Record`` class: this module builds on both
``fields`` and ``record``, and ``record`` builds on ``fields``.
"""

from __future__ import annotations

import enum
from typing import Any

from broker_core.errors import SchemaDefinitionError
from broker_core.schema.fields import CustomEnum, Field
from broker_core.schema.record import Record, RecordField


def _item_schema(item: Any, defined_names: set[str]) -> Any:
    return item.schema_info(defined_names)


class Array(Field):
    """A list of ``array_type`` items."""

    avro_type = "array"
    python_types = list

    def __init__(self, array_type: Any, default: Any = None, required: bool = False,
                 required_default: bool = False) -> None:
        self.array_type = _field_of(array_type, "Array")
        super().__init__(default, required, required_default)

    def validate_type(self, name: str, val: Any) -> Any:
        val = super().validate_type(name, val)
        if val is None:
            return None
        return [self.array_type.validate_type(f"{name}[{i}]", item) for i, item in enumerate(val)]

    def schema_info(self, defined_names: set[str]) -> Any:
        return {"type": "array", "items": _item_schema(self.array_type, defined_names)}

    def to_avro(self, value: Any) -> Any:
        if value is None:
            return None
        convert = self.array_type.to_avro
        return [convert(v) for v in value]

    def to_json(self, value: Any) -> Any:
        if value is None:
            return None
        convert = self.array_type.to_json
        return [convert(v) for v in value]


class Map(Field):
    """A dict from str to ``value_type`` values."""

    avro_type = "map"
    python_types = dict

    def __init__(self, value_type: Any, default: Any = None, required: bool = False,
                 required_default: bool = False) -> None:
        self.value_type = _field_of(value_type, "Map")
        super().__init__(default, required, required_default)

    def validate_type(self, name: str, val: Any) -> Any:
        val = super().validate_type(name, val)
        if val is None:
            return None
        out = {}
        for k, v in val.items():
            if not isinstance(k, str):
                raise TypeError(f"map field {name!r} needs str keys, got {type(k).__name__} {k!r}")
            out[k] = self.value_type.validate_type(f"{name}[{k!r}]", v)
        return out

    def schema_info(self, defined_names: set[str]) -> Any:
        return {"type": "map", "values": _item_schema(self.value_type, defined_names)}

    def to_avro(self, value: Any) -> Any:
        if value is None:
            return None
        convert = self.value_type.to_avro
        return {k: convert(v) for k, v in value.items()}

    def to_json(self, value: Any) -> Any:
        if value is None:
            return None
        convert = self.value_type.to_json
        return {k: convert(v) for k, v in value.items()}


def _field_of(item: Any, container: str) -> Any:
    """An item type given to Array/Map as a field, a Record class or instance, or an Enum class."""
    if isinstance(item, Field | RecordField):
        return item
    if isinstance(item, type) and issubclass(item, Record):
        return RecordField(item)
    if isinstance(item, Record):
        return RecordField(type(item))
    if isinstance(item, type) and issubclass(item, enum.Enum):
        return CustomEnum(item)
    raise SchemaDefinitionError(f"{container} item type {item!r} is not a Field, a Record or an Enum")


__all__ = ["Array", "Map"]
