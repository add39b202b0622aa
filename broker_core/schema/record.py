"""``Record``: a class whose typed fields define an Avro/JSON schema (the shape of ``pulsar.schema.Record``).

Declaring ``class Order(Record): id = Long(required=True); note = String()`` gives ``Order.schema()``,
the Avro record schema Pulsar's Python client derives for the same declaration (field order as
declared, ``["null", T]`` for optional fields, defaults only with ``required_default``), so a topic
typed by a Pulsar application and one typed here register the same schema.

A nested record is declared with the nested class (or an instance of it, whose ``required`` /
``default`` / ``required_default`` then apply to the field); an ``enum.Enum`` class becomes a
``CustomEnum`` field.
"""

from __future__ import annotations

import builtins
import enum
from typing import Any, ClassVar

from broker_core.schema.fields import CustomEnum, Field


class RecordField:
    """A field whose type is another ``Record`` class."""

    def __init__(self, record_cls: type[Record], default: Any = None, required: bool = False,
                 required_default: bool = False) -> None:
        self.record_cls = record_cls
        self._default = default
        self._required = required
        self._required_default = required_default

    def type(self) -> str:
        return self.record_cls.__name__

    def python_type(self) -> builtins.type[Record]:
        return self.record_cls

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None:
            if self._required and self._default is None:
                raise TypeError(f"record field {name!r} is required and may not be None")
            return self._default
        if isinstance(val, dict):
            return self.record_cls(**val)
        if not isinstance(val, self.record_cls):
            raise TypeError(
                f"invalid type {type(val).__name__} for record field {name!r}; expected {self.record_cls.__name__}"
            )
        return val

    def schema_info(self, defined_names: set[str]) -> Any:
        return self.record_cls.schema_info(defined_names)

    def default(self) -> Any:
        return self._default

    def required_default(self) -> bool:
        return self._required_default

    def to_avro(self, value: Any) -> Any:
        return None if value is None else value._to_datum(json=False)

    def to_json(self, value: Any) -> Any:
        return None if value is None else value._to_datum(json=True)

    def from_datum(self, value: Any) -> Any:
        return None if value is None else self.record_cls._from_datum(value, trusted=True)


AnyField = Field | RecordField


class RecordMeta(type):
    """Collects a record class's fields (in declaration order, base classes' first)."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> RecordMeta:
        fields: dict[str, AnyField] = {}
        if not any(isinstance(base, RecordMeta) for base in bases):  # the Record base class itself
            namespace["_fields"] = fields
            return super().__new__(mcs, name, bases, namespace)
        for base in reversed(bases):
            fields.update(getattr(base, "_fields", {}))
        for attr, value in list(namespace.items()):
            if attr.startswith("_"):
                continue
            spec = _as_field(value)
            if spec is not None:
                fields[attr] = spec
                del namespace[attr]  # the class attribute would shadow nothing useful; values live per instance
        namespace["_fields"] = fields
        cls = super().__new__(mcs, name, bases, namespace)
        return cls


def _as_field(value: Any) -> AnyField | None:
    if isinstance(value, Field | RecordField):
        return value
    if isinstance(value, type) and issubclass(value, enum.Enum):
        return CustomEnum(value)
    if isinstance(value, RecordMeta):
        return RecordField(value)  # type: ignore[arg-type]
    if isinstance(value, Record):
        spec = value.__dict__.get("_spec", (None, False, False))
        return RecordField(type(value), default=spec[0], required=spec[1], required_default=spec[2])
    return None


class Record(metaclass=RecordMeta):
    """Base class of typed records.

    Class attributes: ``_avro_namespace`` (the Avro namespace of the record), ``_sorted_fields``
    (emit fields sorted by name in the schema).

    Args:
        default, required, required_default: used when an instance declares a nested-record field.
        **kwargs: field values; unset fields take their default.  A dict is accepted for a nested
            record (and inside arrays and maps of records).
    """

    _fields: ClassVar[dict[str, AnyField]]
    _avro_namespace: ClassVar[str | None] = None
    _sorted_fields: ClassVar[bool] = False

    def __init__(self, default: Any = None, required_default: bool = False, required: bool = False,
                 **kwargs: Any) -> None:
        if default is not None or required or required_default:
            object.__setattr__(self, "_spec", (default, required, required_default))
        unknown = sorted(set(kwargs) - set(self._fields))
        if unknown:
            raise AttributeError(
                f"{type(self).__name__} has no field {unknown[0]!r}; fields: {', '.join(self._fields)}"
            )
        values = self.__dict__
        for name, spec in self._fields.items():
            if name in kwargs:
                values[name] = spec.validate_type(name, kwargs[name])
            else:
                values[name] = spec.default()

    def __setattr__(self, key: str, value: Any) -> None:
        spec = self._fields.get(key)
        if spec is None:
            raise AttributeError(f"cannot set undeclared field {key!r} on {type(self).__name__}")
        self.__dict__[key] = spec.validate_type(key, value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record) or type(other)._fields.keys() != self._fields.keys():
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self._fields)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields)
        return f"{type(self).__name__}({inner})"

    def type(self) -> str:
        return type(self).__name__

    def python_type(self) -> builtins.type[Record]:
        return type(self)

    # -- schema -------------------------------------------------------------------------------------

    @classmethod
    def schema(cls) -> dict[str, Any]:
        """The Avro schema of this record (a JSON-ready dict)."""
        return cls.schema_info(set())  # type: ignore[return-value]

    @classmethod
    def schema_info(cls, defined_names: set[str]) -> dict[str, Any] | str:
        """The Avro schema; a record already emitted in ``defined_names`` is referenced by its full name."""
        full_name = f"{cls._avro_namespace}.{cls.__name__}" if cls._avro_namespace else cls.__name__
        if full_name in defined_names:
            return full_name
        defined_names.add(full_name)
        out: dict[str, Any] = {"type": "record", "name": cls.__name__}
        if cls._avro_namespace is not None:
            out["namespace"] = cls._avro_namespace
        names = sorted(cls._fields) if cls._sorted_fields else list(cls._fields)
        fields = []
        for name in names:
            spec = cls._fields[name]
            inner = spec.schema_info(defined_names)
            avro_type = inner if spec._required else ["null", inner]
            if spec.required_default():
                default = spec.default()
                fields.append({"name": name, "default": default.name if isinstance(default, enum.Enum) else default,
                               "type": avro_type})
            else:
                fields.append({"name": name, "type": avro_type})
        out["fields"] = fields
        return out

    # -- data ---------------------------------------------------------------------------------------

    def _to_datum(self, *, json: bool) -> dict[str, Any]:
        """The record as a plain dict for fastavro (enum names) or JSON (enum values, bytes as text).

        Runs once per message sent, so only the fields that need converting are visited.
        """
        values = self.__dict__
        plan = _plan(type(self), "to_json" if json else "to_avro")
        if not plan and not json:
            return values  # fastavro reads the fields by name and ignores any other key: no copy needed
        out = {name: values[name] for name in self._fields}
        for name, convert in plan:
            value = out[name]
            if value is not None:
                out[name] = convert(value)
        return out

    @classmethod
    def _from_datum(cls, datum: dict[str, Any], *, trusted: bool = False) -> Record:
        """A record from a decoded dict; fields it lacks take their defaults, unknown keys are ignored.

        ``trusted``: the values were decoded by fastavro with this class's own schema, so they have
        the right types already and only enums and nested records need building (no per-field
        validation: this runs once per message received).
        """
        if not trusted:
            return cls(**{k: v for k, v in datum.items() if k in cls._fields})
        record = cls.__new__(cls)
        if not _plan(cls, "from_avro") and len(datum) == len(cls._fields):
            _SET_DICT(record, "__dict__", datum)  # a complete datum of plain fields: it becomes the record
            return record
        values = record.__dict__
        for name, spec in cls._fields.items():
            values[name] = datum[name] if name in datum else spec.default()
        for name, convert in _plan(cls, "from_avro"):
            value = values[name]
            if value is not None:
                values[name] = convert(value)
        return record


_SET_DICT = object.__setattr__  # ``Record.__setattr__`` validates one field; this swaps the whole __dict__


_PLANS: dict[tuple[type, str], list[tuple[str, Any]]] = {}
_IDENTITY = {
    "to_avro": ("Null", "Boolean", "Integer", "Long", "Float", "Double", "Bytes", "String"),
    "to_json": ("Null", "Boolean", "Integer", "Long", "Float", "Double", "String"),
    "from_avro": ("Null", "Boolean", "Integer", "Long", "Float", "Double", "Bytes", "String"),
}


def _plan(cls: builtins.type[Record], kind: str) -> list[tuple[str, Any]]:
    """(field, converter) for the fields of ``cls`` whose values need converting for ``kind`` (cached)."""
    plan = _PLANS.get((cls, kind))
    if plan is None:
        plan = []
        for name, spec in cls._fields.items():
            if type(spec).__name__ in _IDENTITY[kind] and type(spec).__module__ == Field.__module__:
                continue
            if kind == "from_avro" and isinstance(spec, RecordField):
                plan.append((name, spec.from_datum))
            elif kind == "from_avro":
                plan.append((name, lambda value, name=name, spec=spec: spec.validate_type(name, value)))
            else:
                plan.append((name, getattr(spec, kind)))
        _PLANS[(cls, kind)] = plan
    return plan


__all__ = ["Record", "RecordField", "RecordMeta"]
