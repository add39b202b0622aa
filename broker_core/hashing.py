"""Pulsar's key hashes, bit-exact, for one key at a time and for whole Arrow columns.

Partition routing and Key_Shared dispatch must agree with the official clients and broker, or a key
lands on a different partition (or consumer) depending on which client wrote it.  Pulsar uses two
schemes: Java's ``String.hashCode()`` and murmur3 x86 32-bit with seed 0 over the UTF-8 bytes, both
masked to 31 bits so the result is a non-negative Java ``int``.

The scalar functions are the readable reference.  The ``*_array`` functions are the hot path for
bulk appends (millions of rows): they hash each distinct value once (keys repeat a lot) and do the
per-value work with numpy over the Arrow offsets and data buffers, looping over byte positions
rather than over rows.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TypeAlias

import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_core.errors import InvalidConfiguration

_UINT32_MASK = 0xFFFFFFFF
_INT31_MASK = 0x7FFFFFFF
_NONE_KEY = b"NONE_KEY"  # the broker's sticky key for messages with neither ordering key nor key

# murmur3 x86 32-bit constants.
_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_N1 = np.uint32(0xE6546B64)
_F1 = np.uint32(0x85EBCA6B)
_F2 = np.uint32(0xC2B2AE35)

# Rows longer than this are hashed by the C mmh3 one at a time: the column-wise loop runs once per
# 4-byte block of the *longest* row, so one huge key would otherwise cost a long Python loop.
_LONG_ROW_BYTES = 1024
# Rows sampled to decide whether dictionary-encoding a column first is worth it.
_DISTINCT_SAMPLE_ROWS = 16384

ArrayLike: TypeAlias = "pa.Array | pa.ChunkedArray"
_DistinctHasher: TypeAlias = Callable[[pa.Array], np.ndarray]


class HashingScheme(enum.IntEnum):
    """The key hash a producer routes with; values follow the Java client's ``HashingScheme``."""

    JavaStringHash = 0
    Murmur3_32Hash = 1

    @classmethod
    def coerce(cls, scheme: HashingScheme | int | str) -> HashingScheme:
        """The scheme named by a member, its value or its name; anything else is a config error."""
        try:
            return cls[scheme] if isinstance(scheme, str) else cls(scheme)
        except (KeyError, ValueError):
            raise InvalidConfiguration(
                f"unknown hashing scheme {scheme!r}; use one of {[s.name for s in cls]}"
            ) from None


# --- scalar reference implementations --------------------------------------------------------------


def _utf8(key: str) -> bytes:
    """UTF-8 bytes of ``key`` as Java's ``getBytes(UTF_8)`` would produce them.

    A Python str can hold surrogates that Java would see as code units; pair them up first, then
    let any lone surrogate become ``?`` exactly as Java's encoder does.
    """
    try:
        return key.encode("utf-8")
    except UnicodeEncodeError:
        paired = key.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        return paired.encode("utf-8", "replace")


def _as_bytes(data: str | bytes | bytearray | memoryview, what: str) -> bytes:
    if isinstance(data, str):
        return _utf8(data)
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise InvalidConfiguration(f"{what} must be str or bytes, got {type(data).__name__} {data!r}")


def java_string_hash(key: str) -> int:
    """Java ``String.hashCode()`` of ``key`` masked to 31 bits (Pulsar's ``JavaStringHash``).

    Java hashes UTF-16 code units, so a character outside the BMP contributes its two surrogates.
    """
    if not isinstance(key, str):
        raise InvalidConfiguration(f"java_string_hash needs a str, got {type(key).__name__} {key!r}")
    result = 0
    for char in key:
        code_point = ord(char)
        if code_point > 0xFFFF:
            offset = code_point - 0x10000
            result = (result * 31 + (0xD800 + (offset >> 10))) & _UINT32_MASK
            result = (result * 31 + (0xDC00 + (offset & 0x3FF))) & _UINT32_MASK
        else:
            result = (result * 31 + code_point) & _UINT32_MASK
    return result & _INT31_MASK


def murmur3_32_unsigned(data: str | bytes) -> int:
    """Unmasked murmur3 x86 32-bit (seed 0) of ``data`` (a str is hashed as its UTF-8 bytes)."""
    return int(mmh3.hash(_as_bytes(data, "murmur3 input"), 0, signed=False))


def murmur3_32_hash(key: str | bytes) -> int:
    """Pulsar's ``Murmur3_32Hash``: murmur3 x86 32-bit, seed 0, masked to 31 bits."""
    return murmur3_32_unsigned(key) & _INT31_MASK


def sticky_key_hash(ordering_key: bytes | str | None, key: str | None) -> int:
    """The 31-bit murmur3 of one message's sticky key (what the ``sticky_key_hash`` column stores).

    The broker hashes the ordering key when the message has one, else the (partition) key, else the
    fixed bytes ``NONE_KEY``.  Empty values count as absent, because the Python client (like the
    official ``pulsar-client``) never sets an empty key or ordering key on a message (DECISIONS).
    Each Key_Shared selector reduces this value to its own range: ``consistent_sticky_hash`` or
    ``range_sticky_hash``.
    """
    if ordering_key:
        return murmur3_32_hash(_as_bytes(ordering_key, "ordering_key"))
    if key:
        return murmur3_32_hash(_as_bytes(key, "key"))
    return murmur3_32_hash(_NONE_KEY)


# Pulsar 4.x reduces the 31-bit murmur of the sticky key to the selector's hash range.
CONSISTENT_HASH_MAX = 65535
"""Consistent hashing's sticky hashes (and ring points) are ``1 .. 65535``."""
RANGE_HASH_SLOTS = 65536
"""The hash-range selectors' sticky hashes are ``h % 65536`` with 0 moved to 1, so ``1 .. 65535``."""


def consistent_sticky_hash(murmur31: int) -> int:
    """The consistent-hashing selector's sticky hash of a 31-bit murmur: ``h % 65535 + 1``."""
    return (int(murmur31) & _INT31_MASK) % CONSISTENT_HASH_MAX + 1


def range_sticky_hash(murmur31: int) -> int:
    """The auto-split and sticky selectors' sticky hash of a 31-bit murmur: ``h % 65536``, 0 -> 1."""
    return (int(murmur31) & _INT31_MASK) % RANGE_HASH_SLOTS or 1


def consistent_sticky_hashes(murmur31: np.ndarray) -> np.ndarray:
    """``consistent_sticky_hash`` of a whole int array (any 32-bit representation), as int64."""
    return (np.asarray(murmur31).astype(np.int64) & _INT31_MASK) % CONSISTENT_HASH_MAX + 1


def range_sticky_hashes(murmur31: np.ndarray) -> np.ndarray:
    """``range_sticky_hash`` of a whole int array (any 32-bit representation), as int64."""
    slots = (np.asarray(murmur31).astype(np.int64) & _INT31_MASK) % RANGE_HASH_SLOTS
    return np.where(slots == 0, 1, slots)


# --- Arrow plumbing ---------------------------------------------------------------------------------


def _chunks(values: object, what: str) -> list[pa.Array]:
    if isinstance(values, pa.ChunkedArray):
        return list(values.chunks)
    if isinstance(values, pa.Array):
        return [values]
    raise InvalidConfiguration(f"{what} must be a pyarrow Array or ChunkedArray, got {type(values).__name__}")


_TEXT_TYPES = (pa.string(), pa.large_string(), pa.string_view())
_BYTES_TYPES = (pa.binary(), pa.large_binary(), pa.binary_view())


def _offsets_and_data(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Row offsets (int64, rebased to 0) and the bytes they index, for a string or binary array.

    Honours a non-zero array offset (slices) and trims the data buffer to the rows in view.
    """
    large = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
    buffers = array.buffers()
    if len(array) == 0 or buffers[1] is None:
        return np.zeros(len(array) + 1, dtype=np.int64), np.zeros(0, dtype=np.uint8)
    raw_offsets = np.frombuffer(buffers[1], dtype=np.int64 if large else np.int32)
    offsets = raw_offsets[array.offset : array.offset + len(array) + 1].astype(np.int64)
    base, end = int(offsets[0]), int(offsets[-1])
    if buffers[2] is None or end == base:
        return offsets - base, np.zeros(0, dtype=np.uint8)
    data = np.frombuffer(buffers[2], dtype=np.uint8)[base:end]
    return offsets - base, data


def _rotl(values: np.ndarray, bits: int) -> np.ndarray:
    return (values << np.uint32(bits)) | (values >> np.uint32(32 - bits))


def _murmur3_rows(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Unmasked murmur3 x86 32-bit of every row, as uint32, working column-wise over 4-byte blocks.

    Rows are sorted by block count (longest first) so the rows still active at block ``j`` are a
    prefix; each step then gathers the j-th block of that prefix from the data buffer.
    """
    lengths = np.diff(offsets)
    out = np.empty(len(lengths), dtype=np.uint32)
    long_rows = np.flatnonzero(lengths > _LONG_ROW_BYTES)
    for row in long_rows:
        out[row] = mmh3.hash(data[offsets[row] : offsets[row + 1]].tobytes(), 0, signed=False)
    rows = np.flatnonzero(lengths <= _LONG_ROW_BYTES) if len(long_rows) else np.arange(len(lengths))
    if len(rows) == 0:
        return out
    blocks = lengths[rows] >> 2
    # Block counts are small (<= 256), so a stable sort on a uint16 key is numpy's O(n) radix sort.
    order = np.argsort((_LONG_ROW_BYTES // 4 - blocks).astype(np.uint16), kind="stable")
    rows, blocks = rows[order], blocks[order]
    starts, row_lengths = offsets[rows], lengths[rows]
    hashes = np.zeros(len(rows), dtype=np.uint32)
    max_blocks = int(blocks[0])
    if max_blocks:
        # Little-endian uint32 starting at *every* byte (an overlapping, unaligned view), so one
        # gather reads a whole block.  A full block never reaches the last 3 bytes' overhang.
        words = np.ndarray(shape=(len(data) - 3,), dtype="<u4", buffer=data, strides=(1,))
        active_counts = np.searchsorted(-blocks, -np.arange(max_blocks), side="left")
        positions = starts.copy()
        for active in active_counts.tolist():
            k1 = words[positions[:active]]
            k1 *= _C1
            k1 = _rotl(k1, 15)
            k1 *= _C2
            h1 = hashes[:active]
            h1 ^= k1
            h1 = _rotl(h1, 13)
            h1 *= np.uint32(5)
            h1 += _N1
            hashes[:active] = h1
            positions[:active] += 4
    tail_lengths = row_lengths & 3
    tail_starts = starts + 4 * blocks
    k1 = np.zeros(len(rows), dtype=np.uint32)
    for byte_index in (2, 1, 0):
        has = np.flatnonzero(tail_lengths > byte_index)
        k1[has] ^= data[tail_starts[has] + byte_index].astype(np.uint32) << np.uint32(8 * byte_index)
    has_tail = tail_lengths > 0
    k1 = _rotl(k1 * _C1, 15) * _C2
    hashes = np.where(has_tail, hashes ^ k1, hashes)
    hashes ^= row_lengths.astype(np.uint32)
    hashes ^= hashes >> np.uint32(16)
    hashes *= _F1
    hashes ^= hashes >> np.uint32(13)
    hashes *= _F2
    hashes ^= hashes >> np.uint32(16)
    out[rows] = hashes
    return out


def _java_rows(offsets: np.ndarray, units: np.ndarray) -> np.ndarray:
    """Unmasked Java hash (uint32) of every row of code units.

    Java's Horner loop equals ``sum(unit[i] * 31**(n-1-i)) mod 2**32``, so each unit is multiplied by
    a precomputed power of 31 and the products are summed per row with ``reduceat`` (all in wrapping
    uint32 arithmetic); no loop at all.
    """
    lengths = np.diff(offsets)
    out = np.zeros(len(lengths), dtype=np.uint32)
    nonempty = np.flatnonzero(lengths > 0)
    if len(nonempty) == 0:
        return out
    total = int(offsets[-1])
    row_of_unit = np.repeat(np.arange(len(lengths)), lengths)
    exponents = offsets[1:][row_of_unit] - 1 - np.arange(total)
    powers = np.ones(int(lengths.max()), dtype=np.uint32)
    powers[1:] = np.cumprod(np.full(len(powers) - 1, 31, dtype=np.uint32), dtype=np.uint32)
    terms = units[:total].astype(np.uint32) * powers[exponents]
    out[nonempty] = np.add.reduceat(terms, offsets[nonempty], dtype=np.uint32)
    return out


def _java_distinct(values: pa.Array) -> np.ndarray:
    """Java hashes of a string array; ASCII rows straight from the UTF-8 bytes (bytes == code units),
    the rest re-encoded as UTF-16 first."""
    offsets, data = _offsets_and_data(values)
    hashes = _java_rows(offsets, data)
    lengths = np.diff(offsets)
    nonempty = np.flatnonzero(lengths > 0)
    if len(nonempty) == 0:
        return hashes
    wide = nonempty[np.logical_or.reduceat(data >= 0x80, offsets[nonempty])]
    if len(wide):
        texts = values.take(pa.array(wide)).to_pylist()
        encoded = [text.encode("utf-16-le") if text is not None else b"" for text in texts]
        unit_offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(chunk) // 2 for chunk in encoded], out=unit_offsets[1:])
        units = np.frombuffer(b"".join(encoded), dtype="<u2")
        hashes[wide] = _java_rows(unit_offsets, units)
    return hashes


def _masked_int32(hashes: np.ndarray, values: pa.Array) -> pa.Array:
    """31-bit hashes as an int32 Arrow array carrying the nulls of ``values``."""
    masked = (hashes & np.uint32(_INT31_MASK)).view(np.int32)
    if values.null_count == 0:
        return pa.array(masked, type=pa.int32())
    return pa.array(masked, type=pa.int32(), mask=values.is_null().to_numpy(zero_copy_only=False))


def _mostly_distinct(array: pa.Array) -> bool:
    """Guess from a sample whether dictionary-encoding ``array`` would cost more than it saves.

    Encoding costs about as much per row as hashing it, so it pays only when values repeat.  A
    sample's own distinct ratio says little (a sample of a column with 10% distinct values is still
    mostly distinct), so the column's distinct count is estimated with Chao1 from how many sampled
    values occur once (f1) and twice (f2): ``d + f1**2 / (2 * f2)``.
    """
    if len(array) < 4 * _DISTINCT_SAMPLE_ROWS:
        return False
    positions = np.linspace(0, len(array) - 1, _DISTINCT_SAMPLE_ROWS).astype(np.int64)
    sample = array.take(pa.array(positions)).drop_null()
    counts = pc.value_counts(sample).field("counts").to_numpy()
    seen, once, twice = len(counts), int((counts == 1).sum()), int((counts == 2).sum())
    estimate = seen + (once * once / (2 * twice) if twice else once * (once - 1) / 2)
    return estimate > len(array) / 2


def _hash_rows(array: pa.Array, hash_distinct: _DistinctHasher) -> pa.Array:
    """Hash each distinct value once, then spread the hashes back over the rows (nulls stay null).

    Keys usually repeat (user ids, order ids), so hashing the dictionary is much less work; when
    a sample says the rows are mostly distinct, the encoding step is skipped and rows are hashed
    directly.
    """
    if pa.types.is_dictionary(array.type):
        dictionary, indices = array.dictionary, array.indices
    elif _mostly_distinct(array):
        return _masked_int32(hash_distinct(array), array)
    else:
        encoded = pc.dictionary_encode(array)
        dictionary, indices = encoded.dictionary, encoded.indices
    return pc.take(_masked_int32(hash_distinct(dictionary), dictionary), indices)


def _hash_column(
    values: ArrayLike, what: str, allow_binary: bool, hash_distinct: _DistinctHasher
) -> pa.Array:
    results = []
    for chunk in _chunks(values, what):
        # View layouts have no offsets buffer; the large layouts do and hold any view's contents.
        if pa.types.is_string_view(chunk.type):
            chunk = chunk.cast(pa.large_string())
        elif pa.types.is_binary_view(chunk.type):
            chunk = chunk.cast(pa.large_binary())
        value_type = chunk.type.value_type if pa.types.is_dictionary(chunk.type) else chunk.type
        if pa.types.is_null(value_type):
            results.append(pa.nulls(len(chunk), type=pa.int32()))
        elif value_type in _TEXT_TYPES or (allow_binary and value_type in _BYTES_TYPES):
            results.append(_hash_rows(chunk, hash_distinct))
        else:
            kinds = "string or binary" if allow_binary else "string"
            raise InvalidConfiguration(f"{what} must be a {kinds} column, got type {chunk.type}")
    if not results:
        return pa.array([], type=pa.int32())
    return results[0] if len(results) == 1 else pa.concat_arrays(results)


# --- vectorised API -------------------------------------------------------------------------------


def java_string_hash_array(keys: ArrayLike) -> pa.Array:
    """``java_string_hash`` of every row of a string column, as int32; null rows give null."""
    return _hash_column(keys, "java_string_hash_array keys", False, _java_distinct)


def murmur3_32_hash_array(values: ArrayLike) -> pa.Array:
    """``murmur3_32_hash`` of every row of a string or binary column, as int32; nulls give null."""

    def distinct_hashes(distinct: pa.Array) -> np.ndarray:
        return _murmur3_rows(*_offsets_and_data(distinct))

    return _hash_column(values, "murmur3_32_hash_array values", True, distinct_hashes)


def _as_large_binary(values: ArrayLike | None, what: str) -> pa.Array | None:
    if values is None:
        return None
    chunks = _chunks(values, what)
    if any(not (c.type in _TEXT_TYPES or c.type in _BYTES_TYPES or pa.types.is_null(c.type)) for c in chunks):
        raise InvalidConfiguration(f"{what} must be a string or binary column, got type {values.type}")
    if not chunks:
        return pa.array([], type=pa.large_binary())
    return pa.concat_arrays([chunk.cast(pa.large_binary()) for chunk in chunks])


def sticky_key_hash_array(ordering_keys: ArrayLike | None, keys: ArrayLike | None) -> pa.Array:
    """``sticky_key_hash`` of every row, as int32 (never null: keyless rows hash ``NONE_KEY``).

    Either column may be None when the batch has no such column at all.

    Raises:
        InvalidConfiguration: both columns are None, their lengths differ, or a column is not
            string or binary.
    """
    ordering = _as_large_binary(ordering_keys, "ordering_keys")
    partition_keys = _as_large_binary(keys, "keys")
    if ordering is None and partition_keys is None:
        raise InvalidConfiguration("sticky_key_hash_array needs ordering_keys or keys (both are None)")
    if ordering is not None and partition_keys is not None and len(ordering) != len(partition_keys):
        raise InvalidConfiguration(
            f"ordering_keys has {len(ordering)} rows but keys has {len(partition_keys)}; they must match"
        )
    chosen: pa.Array | pa.Scalar = pa.scalar(_NONE_KEY, type=pa.large_binary())
    for column in (partition_keys, ordering):  # later columns win, so the ordering key goes last
        if column is not None:
            present = pc.fill_null(pc.greater(pc.binary_length(column), 0), False)
            chosen = pc.if_else(present, column, chosen)
    return murmur3_32_hash_array(chosen)


def hash_keys(keys: ArrayLike, scheme: HashingScheme | int | str) -> pa.Array:
    """Hash a key column with the given scheme (as int32, nulls preserved)."""
    if HashingScheme.coerce(scheme) is HashingScheme.JavaStringHash:
        return java_string_hash_array(keys)
    return murmur3_32_hash_array(keys)


__all__ = [
    "CONSISTENT_HASH_MAX",
    "RANGE_HASH_SLOTS",
    "HashingScheme",
    "consistent_sticky_hash",
    "consistent_sticky_hashes",
    "hash_keys",
    "java_string_hash",
    "java_string_hash_array",
    "murmur3_32_hash",
    "murmur3_32_hash_array",
    "murmur3_32_unsigned",
    "range_sticky_hash",
    "range_sticky_hashes",
    "sticky_key_hash",
    "sticky_key_hash_array",
]
