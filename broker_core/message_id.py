"""The position of a message in a topic, shaped like the official client's ``pulsar.MessageId``.

A message id is the four numbers (ledger, entry, partition, batch index).  Here a *ledger* is a
Parquet log segment and an *entry* a row group or batch inside it, but callers only see the numbers,
so code written against the official client keeps working: the same constructor keywords, the same
accessor methods, the same ``str()`` form and byte-for-byte the same ``serialize()`` output (the
protobuf ``MessageIdData`` encoding), so ids stored by one client can be read back by the other.

Comparison follows the official client where it is coherent: ``==`` looks at all four fields, while
``<`` looks at (ledger, entry, batch index) only, because a partition's ids are what get ordered.
``<=``/``>=`` are ``<``/``>`` or ``==``, so two ids that differ only in partition are neither equal
nor ordered.  (The official ``>``/``>=`` answer ``True`` both ways for such a pair; that is an
accident of how they are derived from ``<=``, not something worth copying.)
"""

from __future__ import annotations

import operator
import re
from typing import Any, ClassVar

from broker_core.errors import InvalidConfiguration

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_UINT64_MASK = 2**64 - 1

# Protobuf field numbers of MessageIdData (pulsar's PulsarApi.proto).
_FIELD_LEDGER_ID = 1
_FIELD_ENTRY_ID = 2
_FIELD_PARTITION = 3
_FIELD_BATCH_INDEX = 4
_WIRE_VARINT = 0
_WIRE_FIXED64 = 1
_WIRE_LENGTH_DELIMITED = 2
_WIRE_FIXED32 = 5
_MAX_VARINT_BYTES = 10

_ACCEPTED_FORMS = (
    "'(ledger,entry,partition,batch)' (the str() form), 'ledger:entry', 'ledger:entry:partition', "
    "'ledger:entry:partition:batch', 'earliest' or 'latest'"
)
_INT = r"\s*(-?\d+)\s*"
_TUPLE_FORM = re.compile(rf"\(\s*{_INT},{_INT},{_INT},{_INT}\s*\)")
_ADMIN_FORM = re.compile(rf"{_INT}:{_INT}(?::{_INT})?(?::{_INT})?")


def _checked_int(name: str, value: Any, low: int, high: int) -> int:
    """Coerce ``value`` to an int in ``[low, high]``, the range of the official field's C++ type.

    ``bool`` is refused on purpose: ``MessageId(True, ...)`` is always a bug, never a partition.
    """
    if isinstance(value, bool):
        raise InvalidConfiguration(f"MessageId {name} must be an int, got the bool {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise InvalidConfiguration(
            f"MessageId {name} must be an int, got {type(value).__name__} {value!r}"
        ) from None
    if not low <= number <= high:
        raise InvalidConfiguration(f"MessageId {name} must be in [{low}, {high}], got {number}")
    return number


def _encode_varint(value: int) -> bytes:
    """Protobuf base-128 varint of a value already reduced to an unsigned 64-bit number."""
    out = bytearray()
    while True:
        low7 = value & 0x7F
        value >>= 7
        if value:
            out.append(low7 | 0x80)
        else:
            out.append(low7)
            return bytes(out)


def _decode_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Read one varint at ``pos``; return (unsigned value, next position).

    Raises:
        InvalidConfiguration: the varint runs off the end or is longer than ten bytes.
    """
    result = 0
    for index in range(_MAX_VARINT_BYTES):
        if pos + index >= len(data):
            raise _malformed(data, f"a varint at byte {pos} runs past the end")
        byte = data[pos + index]
        result |= (byte & 0x7F) << (7 * index)
        if not byte & 0x80:
            return result & _UINT64_MASK, pos + index + 1
    raise _malformed(data, f"the varint at byte {pos} is longer than {_MAX_VARINT_BYTES} bytes")


def _malformed(data: bytes, why: str) -> InvalidConfiguration:
    return InvalidConfiguration(
        f"cannot deserialize a MessageId from {data.hex()!r}: {why}; pass bytes produced by "
        "MessageId.serialize()"
    )


def _to_signed(value: int, bits: int) -> int:
    """Two's-complement reinterpretation of the low ``bits`` bits, as protobuf does for int fields."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


class MessageId:
    """Immutable id of one message: (ledger_id, entry_id, partition, batch_index).

    ``-1`` means "not set" for partition and batch index (a non-partitioned topic, an unbatched
    message), as in the official client.

    Args:
        partition: partition index, or -1 for a non-partitioned topic.
        ledger_id: the ledger (log segment) number; int64.
        entry_id: the entry number inside the ledger; int64.
        batch_index: index inside a batched entry, or -1 when the entry is not a batch.

    Raises:
        InvalidConfiguration: a field is not an int or is outside its official C++ type's range.
    """

    __slots__ = ("_batch_index", "_entry_id", "_ledger_id", "_partition", "_topic")

    earliest: ClassVar[MessageId]
    latest: ClassVar[MessageId]

    _ledger_id: int
    _entry_id: int
    _partition: int
    _batch_index: int
    _topic: str | None  # the topic a received id came from; not part of equality or serialize()

    def __init__(self, partition: int = -1, ledger_id: int = -1, entry_id: int = -1, batch_index: int = -1):
        fields = {
            "_partition": _checked_int("partition", partition, _INT32_MIN, _INT32_MAX),
            "_ledger_id": _checked_int("ledger_id", ledger_id, _INT64_MIN, _INT64_MAX),
            "_entry_id": _checked_int("entry_id", entry_id, _INT64_MIN, _INT64_MAX),
            "_batch_index": _checked_int("batch_index", batch_index, _INT32_MIN, _INT32_MAX),
        }
        for name, value in fields.items():
            object.__setattr__(self, name, value)
        _SET_TOPIC(self, None)

    @classmethod
    def _trusted(
        cls, partition: int, ledger_id: int, entry_id: int, batch_index: int, topic: str | None = None
    ) -> MessageId:
        """Build from values the library computed itself (no range checks: the hot receive path).

        The slots' own descriptors set the fields (twice as fast as ``object.__setattr__`` by name);
        this runs once per received message.
        """
        self = object.__new__(cls)
        _SET_PARTITION(self, partition)
        _SET_LEDGER(self, ledger_id)
        _SET_ENTRY(self, entry_id)
        _SET_BATCH(self, batch_index)
        _SET_TOPIC(self, topic)
        return self

    @classmethod
    def wrap(cls, msg_id: MessageId) -> MessageId:
        """The official client's bridge from its C extension's id type; here ids have one type, so
        this returns an equal id (with the same topic, if it carries one)."""
        if not isinstance(msg_id, MessageId):
            raise InvalidConfiguration(
                f"MessageId.wrap takes a MessageId, got {type(msg_id).__name__} {msg_id!r}; "
                "build one with MessageId(partition, ledger_id, entry_id, batch_index) or MessageId.deserialize"
            )
        return cls._trusted(msg_id._partition, msg_id._ledger_id, msg_id._entry_id, msg_id._batch_index,
                            msg_id._topic)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"MessageId is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"MessageId is immutable; cannot delete {name!r}")

    def __reduce__(self) -> tuple[type[MessageId], tuple[int, int, int, int]]:
        # Slots plus a refusing __setattr__ defeat the default pickle/copy protocol.
        return (MessageId, (self._partition, self._ledger_id, self._entry_id, self._batch_index))

    # --- accessors (methods, as in the official client) --------------------------------------------

    def ledger_id(self) -> int:
        """The ledger (log segment) number."""
        return self._ledger_id

    def entry_id(self) -> int:
        """The entry number inside the ledger."""
        return self._entry_id

    def batch_index(self) -> int:
        """The index inside a batched entry, or -1 for an unbatched message."""
        return self._batch_index

    def partition(self) -> int:
        """The partition index, or -1 for a non-partitioned topic."""
        return self._partition

    # --- text forms --------------------------------------------------------------------------------

    def __str__(self) -> str:
        return f"({self._ledger_id},{self._entry_id},{self._partition},{self._batch_index})"

    def __repr__(self) -> str:
        return (
            f"MessageId(partition={self._partition}, ledger_id={self._ledger_id}, "
            f"entry_id={self._entry_id}, batch_index={self._batch_index})"
        )

    def to_admin_string(self) -> str:
        """The ``ledger:entry:partition:batch`` form that Pulsar's admin tools accept."""
        return f"{self._ledger_id}:{self._entry_id}:{self._partition}:{self._batch_index}"

    @classmethod
    def parse(cls, text: str) -> MessageId:
        """Read a message id typed by a person or stored as text.

        Accepts the ``str()`` form ``(l,e,p,b)``, the admin forms ``l:e``, ``l:e:p`` and ``l:e:p:b``
        (missing partition and batch default to -1), and ``earliest`` / ``latest``.

        Raises:
            InvalidConfiguration: ``text`` is not a str in one of those forms, or a number is out
                of range.
        """
        if not isinstance(text, str):
            raise InvalidConfiguration(
                f"MessageId.parse expects a str, got {type(text).__name__} {text!r}; "
                f"accepted forms: {_ACCEPTED_FORMS}"
            )
        stripped = text.strip()
        if stripped.lower() == "earliest":
            return cls.earliest
        if stripped.lower() == "latest":
            return cls.latest
        match = _TUPLE_FORM.fullmatch(stripped)
        if match is not None:
            ledger, entry, partition, batch = (int(group) for group in match.groups())
            return cls(partition=partition, ledger_id=ledger, entry_id=entry, batch_index=batch)
        match = _ADMIN_FORM.fullmatch(stripped)
        if match is not None:
            ledger, entry, partition, batch = (-1 if g is None else int(g) for g in match.groups())
            return cls(partition=partition, ledger_id=ledger, entry_id=entry, batch_index=batch)
        raise InvalidConfiguration(f"cannot parse {text!r} as a MessageId; accepted forms: {_ACCEPTED_FORMS}")

    # --- binary form -------------------------------------------------------------------------------

    def serialize(self) -> bytes:
        """The protobuf ``MessageIdData`` bytes, identical to the official client's output.

        Ledger and entry are always written (they are required fields); partition and batch index
        only when set, which is also why the official encoding of an unbatched id is short.
        """
        out = bytearray()
        out += _encode_varint(_FIELD_LEDGER_ID << 3 | _WIRE_VARINT)
        out += _encode_varint(self._ledger_id & _UINT64_MASK)
        out += _encode_varint(_FIELD_ENTRY_ID << 3 | _WIRE_VARINT)
        out += _encode_varint(self._entry_id & _UINT64_MASK)
        if self._partition != -1:
            out += _encode_varint(_FIELD_PARTITION << 3 | _WIRE_VARINT)
            out += _encode_varint(self._partition & _UINT64_MASK)
        if self._batch_index != -1:
            out += _encode_varint(_FIELD_BATCH_INDEX << 3 | _WIRE_VARINT)
            out += _encode_varint(self._batch_index & _UINT64_MASK)
        return bytes(out)

    @staticmethod
    def deserialize(data: bytes | bytearray | memoryview, topic: str | None = None) -> MessageId:
        """Rebuild a message id from :meth:`serialize` output (ours or the official client's).

        Fields this library does not use (ack sets, batch size, chunk ids) are skipped, so ids
        written by newer official clients still load.

        Args:
            data: the serialized bytes.
            topic: the topic (or partition) the id belongs to, as with the official client: a
                consumer of several topics or partitions can acknowledge an id only if it knows it.

        Raises:
            InvalidConfiguration: ``data`` is not bytes-like, is truncated or malformed, or lacks
                the required ledger and entry fields.
        """
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidConfiguration(
                f"MessageId.deserialize expects bytes, got {type(data).__name__} {data!r}"
            )
        if topic is not None and not isinstance(topic, str):
            raise InvalidConfiguration(f"topic must be a str or None, got {type(topic).__name__}")
        raw = bytes(data)
        values: dict[int, int] = {}
        pos = 0
        while pos < len(raw):
            key, pos = _decode_varint(raw, pos)
            field, wire = key >> 3, key & 0x7
            if field == 0:
                raise _malformed(raw, f"field number 0 at byte {pos - 1}")
            if wire == _WIRE_VARINT:
                value, pos = _decode_varint(raw, pos)
                if field in (_FIELD_LEDGER_ID, _FIELD_ENTRY_ID, _FIELD_PARTITION, _FIELD_BATCH_INDEX):
                    values[field] = value
            elif wire in (_WIRE_FIXED64, _WIRE_FIXED32):
                pos += 8 if wire == _WIRE_FIXED64 else 4
            elif wire == _WIRE_LENGTH_DELIMITED:
                length, pos = _decode_varint(raw, pos)
                pos += length
            else:
                raise _malformed(raw, f"unsupported wire type {wire} for field {field}")
            if pos > len(raw):
                raise _malformed(raw, f"field {field} runs past the end")
        if _FIELD_LEDGER_ID not in values or _FIELD_ENTRY_ID not in values:
            raise _malformed(raw, "the required ledgerId and entryId fields are missing")
        msg_id = MessageId(
            partition=_to_signed(values.get(_FIELD_PARTITION, _UINT64_MASK), 32),
            ledger_id=_to_signed(values[_FIELD_LEDGER_ID], 64),
            entry_id=_to_signed(values[_FIELD_ENTRY_ID], 64),
            batch_index=_to_signed(values.get(_FIELD_BATCH_INDEX, _UINT64_MASK), 32),
        )
        _SET_TOPIC(msg_id, topic)
        return msg_id

    # --- comparison --------------------------------------------------------------------------------

    def _fields(self) -> tuple[int, int, int, int]:
        return (self._ledger_id, self._entry_id, self._partition, self._batch_index)

    def _order_key(self) -> tuple[int, int, int]:
        return (self._ledger_id, self._entry_id, self._batch_index)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._order_key() < other._order_key()

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._order_key() > other._order_key()

    def __le__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._order_key() < other._order_key() or self._fields() == other._fields()

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._order_key() > other._order_key() or self._fields() == other._fields()


_SET_PARTITION = MessageId.__dict__["_partition"].__set__
_SET_LEDGER = MessageId.__dict__["_ledger_id"].__set__
_SET_ENTRY = MessageId.__dict__["_entry_id"].__set__
_SET_BATCH = MessageId.__dict__["_batch_index"].__set__
_SET_TOPIC = MessageId.__dict__["_topic"].__set__
MessageId.earliest = MessageId(partition=-1, ledger_id=-1, entry_id=-1, batch_index=-1)
MessageId.latest = MessageId(partition=-1, ledger_id=_INT64_MAX, entry_id=_INT64_MAX, batch_index=-1)

__all__ = ["MessageId"]
