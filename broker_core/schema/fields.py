"""Typed fields of a ``Record`` (the shape of ``pulsar.schema``'s field classes).

A field knows its Avro type, the Python type(s) it accepts, its default, and whether it is
``required`` (a required field's Avro type is the bare type; an optional one is the union
``["null", type]``).  ``required_default=True`` writes the default into the Avro schema, which is
what makes adding or removing the field a compatible change under Avro schema resolution.
"""

from __future__ import annotations

import enum
from typing import Any

from broker_core.errors import SchemaDefinitionError


def _type_name(python_type: Any) -> str:
    if isinstance(python_type, tuple):
        return " or ".join(t.__name__ for t in python_type)
    return getattr(python_type, "__name__", str(python_type))


class Field:
    """A typed field of a ``Record``.

    Args:
        default: the value a new record starts with (and, with ``required_default``, the Avro default).
        required: the value may not be None (Avro type without the ``null`` branch).
        required_default: write ``default`` into the Avro schema.
    """

    avro_type = "null"
    python_types: Any = object

    def __init__(self, default: Any = None, required: bool = False, required_default: bool = False) -> None:
        self._required = bool(required)
        self._required_default = bool(required_default)
        self._default = None if default is None else self.validate_type("default", default)

    def type(self) -> str:
        """The Avro type name."""
        return self.avro_type

    def python_type(self) -> Any:
        return self.python_types

    def validate_type(self, name: str, val: Any) -> Any:
        """The value to store for ``name`` (``TypeError`` naming the field when ``val`` does not fit)."""
        if val is None:
            if self._required and self._default is None and name != "default":
                raise TypeError(f"field {name!r} is required and may not be None")
            return self.default()
        # bool is an int subclass: refuse True for an int field, as the types differ in Avro
        if isinstance(val, bool) and self.python_types is not bool and bool not in _as_tuple(self.python_types):
            raise TypeError(f"invalid type bool for field {name!r}; expected {_type_name(self.python_types)}")
        if not isinstance(val, self.python_types):
            raise TypeError(
                f"invalid type {type(val).__name__} for field {name!r}; expected {_type_name(self.python_types)}"
            )
        return val

    def schema(self) -> Any:
        return self.schema_info(set())

    def schema_info(self, defined_names: set[str]) -> Any:
        """The Avro schema of the field's type; named types already in ``defined_names`` are referenced by name."""
        return self.avro_type

    def default(self) -> Any:
        return self._default

    def required_default(self) -> bool:
        return self._required_default

    def to_avro(self, value: Any) -> Any:
        """The Avro datum of a stored value (identity for primitives)."""
        return value

    def to_json(self, value: Any) -> Any:
        """The JSON value of a stored value (identity for primitives)."""
        return value


def _as_tuple(types: Any) -> tuple[Any, ...]:
    return types if isinstance(types, tuple) else (types,)


class Null(Field):
    avro_type = "null"
    python_types = type(None)

    def validate_type(self, name: str, val: Any) -> Any:
        if val is not None:
            raise TypeError(f"field {name!r} is a Null field and only holds None")
        return val


class Boolean(Field):
    avro_type = "boolean"
    python_types = bool

    def default(self) -> Any:
        return False if self._default is None else self._default


class Integer(Field):
    avro_type = "int"
    python_types = int

    def validate_type(self, name: str, val: Any) -> Any:
        val = super().validate_type(name, val)
        if val is not None and not -(2**31) <= val < 2**31:
            raise TypeError(f"value {val} of field {name!r} does not fit an Avro int (32 bits); use Long")
        return val


class Long(Field):
    avro_type = "long"
    python_types = int

    def validate_type(self, name: str, val: Any) -> Any:
        val = super().validate_type(name, val)
        if val is not None and not -(2**63) <= val < 2**63:
            raise TypeError(f"value {val} of field {name!r} does not fit an Avro long (64 bits)")
        return val


class Float(Field):
    avro_type = "float"
    python_types = (float, int)


class Double(Field):
    avro_type = "double"
    python_types = (float, int)


class Bytes(Field):
    """Bytes; a str is stored UTF-8 encoded."""

    avro_type = "bytes"
    python_types = (bytes, str)

    def validate_type(self, name: str, val: Any) -> Any:
        val = super().validate_type(name, val)
        return val.encode("utf-8") if isinstance(val, str) else val

    def to_json(self, value: Any) -> Any:
        return None if value is None else value.decode("utf-8")


class String(Field):
    """Text; bytes are stored UTF-8 decoded."""

    avro_type = "string"
    python_types = (str, bytes)

    def validate_type(self, name: str, val: Any) -> Any:
        val = super().validate_type(name, val)
        return val.decode("utf-8") if isinstance(val, bytes) else val


class CustomEnum(Field):
    """A Python ``enum.Enum`` as an Avro enum (symbols are the member names).

    A member, its name or its value are accepted; Avro carries the name, JSON the value.
    """

    avro_type = "enum"

    def __init__(
        self, enum_type: type[enum.Enum], default: Any = None, required: bool = False, required_default: bool = False
    ) -> None:
        if not (isinstance(enum_type, type) and issubclass(enum_type, enum.Enum)):
            raise SchemaDefinitionError(f"CustomEnum needs an enum.Enum class, got {enum_type!r}")
        self.enum_type = enum_type
        self.python_types = enum_type
        self._by_value = {m.value: m for m in enum_type}
        super().__init__(default, required, required_default)

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None:
            return super().validate_type(name, val)
        if isinstance(val, self.enum_type):
            return val
        if isinstance(val, str) and val in self.enum_type.__members__:
            return self.enum_type[val]
        if not isinstance(val, bool) and val in self._by_value:
            return self._by_value[val]
        raise TypeError(
            f"invalid value {val!r} for enum field {name!r}; expected one of {list(self.enum_type.__members__)}"
        )

    def schema_info(self, defined_names: set[str]) -> Any:
        name = self.enum_type.__name__
        if name in defined_names:
            return name
        defined_names.add(name)
        return {"type": "enum", "name": name, "symbols": [m.name for m in self.enum_type]}

    def to_avro(self, value: Any) -> Any:
        return None if value is None else value.name

    def to_json(self, value: Any) -> Any:
        return None if value is None else value.value


__all__ = [
    "Boolean", "Bytes", "CustomEnum", "Double", "Field", "Float", "Integer", "Long", "Null", "String",
]
