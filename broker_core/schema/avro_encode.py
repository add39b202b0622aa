"""Avro records encoded a batch at a time: a producer's sends become payloads when the batch is cut.

``fastavro.schemaless_writer`` costs more per record than the rest of a send.  For a ``Record`` class
of plain fields (booleans, ints, longs, floats, doubles, strings, bytes, each maybe optional) a send
instead takes a snapshot of the record's values (a tuple: a later change to the record does not change
what was sent) and checks each against its Avro type; the whole batch is then encoded at once when
it is cut: the snapshots become one Arrow struct column (``pyarrow`` converts them in C) and each
field is written into one output buffer for all rows together in NumPy (zigzag varints,
little-endian floats, length-prefixed strings, a branch index before an optional value).  The bytes
are exactly fastavro's (``tests/broker_core/test_schema_avro_encode.py`` compares them).

What the check at send does not accept (a value of another type, say an ``int`` for a ``Double``, a
non-ASCII string, whose UTF-8 validity and length only encoding tells, a record class with enums or
nested records) is encoded at once by fastavro as before, so a value that does not fit the schema
still fails its own ``send`` with ``PayloadTypeError``.  A deferred payload carries an upper bound of
its encoded size (exact for strings and bytes, the varint maximum for numbers): the producer's batch
byte limit counts it; ``maxMessageSize`` is checked against the exact size whenever the bound
exceeds it (docs/DECISIONS.md D91).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from broker_core.errors import PayloadTypeError

# Avro type -> (Arrow type, the check of a value ``{v}`` of it as Python source, upper bound of its size)
_KINDS: dict[str, tuple[pa.DataType, str, int]] = {
    "boolean": (pa.bool_(), "type({v}) is bool", 1),
    "int": (pa.int32(), "type({v}) is int and -2147483648 <= {v} <= 2147483647", 5),
    "long": (pa.int64(), "type({v}) is int and -9223372036854775808 <= {v} <= 9223372036854775807", 10),
    "float": (pa.float32(), "type({v}) is float", 4),
    "double": (pa.float64(), "type({v}) is float", 8),
    "string": (pa.string(), "type({v}) is str and {v}.isascii()", 10),  # + len: the length varint's bound
    "bytes": (pa.binary(), "type({v}) is bytes", 10),
}
_SIZED = ("string", "bytes")  # a payload's size bound adds their lengths


class RecordEncoder:
    """Encodes records of one flat Avro record schema in bulk; ``for_definition`` says whether it can.

    A send's deferred payload (``defer``) is a plain tuple: the record's values in schema order, then
    an upper bound of the payload's size (``deferred_size``).  A tuple of numbers and strings is one
    allocation that the garbage collector stops tracking at its first pass, so a producer's queue of
    them costs later collections nothing.
    """

    def __init__(self, fields: list[tuple[str, str, int | None]], exact: Callable[[dict[str, Any]], bytes]) -> None:
        # (name, Avro type, None for a required field else the union branch index of its value)
        self._fields = fields
        self._names = [name for name, _, _ in fields]
        # the records' struct column, the size bound last (converted with them, never encoded)
        self._struct = pa.struct([*((name, _KINDS[kind][0]) for name, kind, _ in fields), ("", pa.int64())])
        self._exact = exact  # one datum dict -> its payload (fastavro): the per-record fallback
        self.defer: Callable[[Any], Any] = exact

    @classmethod
    def for_definition(cls, definition: Any, exact: Callable[[dict[str, Any]], bytes]) -> RecordEncoder | None:
        """The encoder of an Avro record schema of plain fields, None for any other schema."""
        if not isinstance(definition, dict) or definition.get("type") != "record" or not definition.get("fields"):
            return None
        fields: list[tuple[str, str, int | None]] = []
        for field in definition["fields"]:
            kind, branch = field.get("type"), None
            if isinstance(kind, list) and len(kind) == 2 and "null" in kind:
                branch = 1 - kind.index("null")
                kind = kind[branch]
            if not isinstance(kind, str) or kind not in _KINDS or not str(field.get("name", "")).isidentifier():
                return None
            fields.append((field["name"], kind, branch))
        return cls(fields, exact)

    def deferring(self, record_cls: type, encode_now: Callable[[Any], bytes]) -> RecordEncoder:
        """Set ``defer``, the producer's per-send encoder for ``record_cls``: the deferred tuple of an
        instance of that very class whose values all pass their checks, else ``encode_now(value)``.

        Generated once per schema, one Python function with no call per field, so that a send costs
        a fraction of a fastavro call; field names enter the source only as string literals.
        """
        reads, checks, sized, bound = [], [], [], 0
        for index, (name, kind, branch) in enumerate(self._fields):
            local = f"v{index}"
            reads.append(f"        {local} = d[{name!r}]\n")
            check = _KINDS[kind][1].format(v=local)
            checks.append(f"({check})" if branch is None else f"({local} is None or ({check}))")
            bound += _KINDS[kind][2] + (branch is not None)
            if kind in _SIZED:
                sized.append(f"len({local})" if branch is None else f"len({local} or b'')")
        values = ", ".join(f"v{index}" for index in range(len(self._fields)))
        source = (
            "def defer(value):\n"
            "    if type(value) is not cls:\n"
            "        return encode_now(value)\n"
            "    d = value.__dict__\n"
            "    try:\n"
            f"{''.join(reads)}"
            "    except KeyError:\n"
            "        return encode_now(value)\n"
            f"    if {' and '.join(checks)}:\n"
            f"        return ({values}, {' + '.join([str(bound), *sized])})\n"
            "    return encode_now(value)\n"
        )
        scope: dict[str, Any] = {"cls": record_cls, "encode_now": encode_now}
        exec(compile(source, f"<deferred Avro encoder of {record_cls.__name__}>", "exec"), scope)
        self.defer = scope["defer"]
        return self

    @staticmethod
    def deferred_size(payload: tuple[Any, ...]) -> int:
        """The upper bound of a deferred payload's encoded size."""
        return int(payload[-1])

    def column(self, values: list[Any]) -> pa.Array:
        """The binary column of a batch's payloads: deferred tuples, bytes (encoded at the send) and
        None (tombstones), in order."""
        try:
            records = pa.array(values, self._struct)
        except (pa.ArrowException, TypeError, ValueError):
            records = None
        if records is not None and not records.null_count:
            return self._encode_or_fallback(records, values)
        deferred = [i for i, v in enumerate(values) if type(v) is tuple]
        if not deferred:
            return pa.array(values, pa.binary())
        if len(deferred) == len(values):  # tuples alone, and yet no struct column: find the bad one
            return self._one_by_one(values)
        out = list(values)
        encoded = self.column([values[i] for i in deferred]).to_pylist()
        for i, payload in zip(deferred, encoded, strict=True):
            out[i] = payload
        return pa.array(out, pa.binary())

    def _encode_or_fallback(self, records: pa.StructArray, rows: list[tuple[Any, ...]]) -> pa.Array:
        """The payloads of deferred ``rows`` (``records`` their struct column).

        Should the bulk path fail anyway (values changed behind the ``Record`` API after the send
        checked them), each row is encoded by fastavro alone, so the error names the row that does
        not fit.
        """
        try:
            with np.errstate(over="ignore"):  # a double beyond float32 becomes inf, as fastavro writes it
                return self._encode(records)
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            return self._one_by_one(rows)

    def _one_by_one(self, rows: list[tuple[Any, ...]]) -> pa.Array:
        """Each deferred row encoded by fastavro alone: ``PayloadTypeError`` names the first that fails."""
        payloads = []
        for row in rows:
            try:
                payloads.append(self._exact(dict(zip(self._names, row[:-1], strict=True))))
            except PayloadTypeError as exc:
                raise PayloadTypeError(f"record {row[:-1]!r}: {exc}") from None
            except (ValueError, TypeError, AttributeError, OverflowError) as exc:
                raise PayloadTypeError(f"record {row[:-1]!r} does not fit the Avro schema: {exc}") from None
        return pa.array(payloads, pa.binary())

    def _encode(self, records: pa.StructArray) -> pa.Array:
        n = len(records)
        pieces: list[tuple[str, np.ndarray | None, Any]] = []  # (how to write, rows that have it, what)
        for index, (_, kind, branch) in enumerate(self._fields):
            column = records.field(index)
            rows = None
            if branch is not None:
                present = np.asarray(column.is_valid())
                pieces.append(("byte", None, np.where(present, 2 * branch, 2 * (1 - branch)).astype(np.uint8)))
                if not present.all():
                    rows = np.flatnonzero(present)
                    column = column.drop_null()
            elif column.null_count:
                raise PayloadTypeError(f"field {self._names[index]!r} is required and may not be None")
            if kind in ("int", "long"):
                values = column.to_numpy().astype(np.int64)
                pieces.append(("varint", rows, (values << 1) ^ (values >> 63)))
            elif kind in ("float", "double"):
                width = 4 if kind == "float" else 8
                values = column.to_numpy().astype(f"<f{width}")
                pieces.append(("fixed", rows, values.view(np.uint8).reshape(-1, width)))
            elif kind == "boolean":
                pieces.append(("byte", rows, np.asarray(column).astype(np.uint8)))
            else:
                offsets = np.frombuffer(column.buffers()[1], np.int32, len(column) + 1, column.offset * 4)
                lengths = np.diff(offsets).astype(np.int64)
                data = column.buffers()[2]
                body = np.frombuffer(data, np.uint8)[offsets[0]: offsets[-1]] if data is not None \
                    else np.zeros(0, np.uint8)
                pieces.append(("varint", rows, lengths << 1))
                pieces.append(("blob", rows, (lengths, body)))
        sizes = np.zeros(n, np.int64)
        for how, rows, what in pieces:
            size = _piece_sizes(how, what)
            if rows is None:
                sizes += size
            else:
                sizes[rows] += size
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        if offsets[-1] >= 2**31:
            raise PayloadTypeError("a batch of records over 2 GiB")
        out = np.zeros(int(offsets[-1]), np.uint8)
        cursor = offsets[:-1].copy()
        for how, rows, what in pieces:
            at = cursor if rows is None else cursor[rows]
            _write(out, at, how, what)
            if rows is None:
                cursor += _piece_sizes(how, what)
            else:
                cursor[rows] += _piece_sizes(how, what)
        return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets.astype(np.int32)),
                                                      pa.py_buffer(out)])


def _varint_lengths(zigzag: np.ndarray) -> np.ndarray:
    """Bytes of each (zigzagged) varint: 7 bits a byte, at least one."""
    unsigned = zigzag.view(np.uint64)
    lengths = np.ones(len(unsigned), np.int64)
    rest = unsigned >> np.uint64(7)
    while rest.any():
        lengths += rest != 0
        rest >>= np.uint64(7)
    return lengths


def _piece_sizes(how: str, what: Any) -> np.ndarray | int:
    if how == "byte":
        return 1
    if how == "fixed":
        return int(what.shape[1])
    if how == "varint":
        return _varint_lengths(what)
    return what[0]  # blob: the lengths


def _write(out: np.ndarray, at: np.ndarray, how: str, what: Any) -> None:
    """Write one piece of every row that has it, row ``i`` starting at ``out[at[i]]``."""
    if how == "byte":
        out[at] = what
    elif how == "fixed":
        out[at[:, None] + np.arange(what.shape[1])] = what
    elif how == "varint":
        unsigned = what.view(np.uint64)
        lengths = _varint_lengths(what)
        for k in range(int(lengths.max()) if len(lengths) else 0):
            more = lengths > k
            byte = ((unsigned >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
            byte |= np.where(lengths > k + 1, np.uint8(0x80), np.uint8(0))
            out[at[more] + k] = byte[more]
    else:  # blob: each row's bytes, contiguous in ``body`` in row order
        lengths, body = what
        if len(body):
            starts = np.zeros(len(lengths), np.int64)
            np.cumsum(lengths[:-1], out=starts[1:])
            out[np.arange(len(body)) + np.repeat(at - starts, lengths)] = body


__all__ = ["RecordEncoder"]
