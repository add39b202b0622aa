"""Pulsar's key hashes over whole Arrow columns, bit-exact with ``hashing.keys``.

The hot path for bulk appends (millions of rows): each distinct value is hashed once (keys repeat a
lot) and the per-value work runs with numpy over the Arrow offsets and data buffers, looping over
byte positions rather than over rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_core.errors import InvalidConfiguration
from broker_core.hashing.keys import INT31_MASK, NONE_KEY, HashingScheme

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
    masked = (hashes & np.uint32(INT31_MASK)).view(np.int32)
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
    chosen: pa.Array | pa.Scalar = pa.scalar(NONE_KEY, type=pa.large_binary())
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
