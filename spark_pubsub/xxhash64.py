"""Spark's ``xxhash64`` of a string, computed on the driver without Spark.

The native scan looks a row's file up by ``xxhash64(_metadata.file_name)`` (a few long comparisons
per row, where comparing the names themselves costs several times more), so the driver must know
the very values Spark computes: Spark hashes a string column as the 64-bit xxHash (XXH64) of its
UTF-8 bytes with seed 42, returned as a signed long.  Written from the algorithm's public
specification; ``tests/spark_pubsub/test_native_scan.py`` checks it against Spark itself.
"""

from __future__ import annotations

SPARK_SEED = 42
"""The seed of Spark's ``xxhash64`` SQL function."""

_MASK = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _MASK, 31) * _P1) & _MASK


def _merge(acc: int, value: int) -> int:
    return ((acc ^ _round(0, value)) * _P1 + _P4) & _MASK


def xxh64(data: bytes, seed: int = 0) -> int:
    """The XXH64 digest of ``data`` as an unsigned 64-bit int."""
    n, i = len(data), 0
    seed &= _MASK
    if n >= 32:
        v = [(seed + _P1 + _P2) & _MASK, (seed + _P2) & _MASK, seed, (seed - _P1) & _MASK]
        while i + 32 <= n:
            v = [_round(v[k], int.from_bytes(data[i + 8 * k:i + 8 * k + 8], "little")) for k in range(4)]
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _MASK
        for lane in v:
            h = _merge(h, lane)
    else:
        h = (seed + _P5) & _MASK
    h = (h + n) & _MASK
    while i + 8 <= n:
        h = (_rotl(h ^ _round(0, int.from_bytes(data[i:i + 8], "little")), 27) * _P1 + _P4) & _MASK
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ (int.from_bytes(data[i:i + 4], "little") * _P1 & _MASK), 23) * _P2 + _P3) & _MASK
        i += 4
    while i < n:
        h = (_rotl(h ^ (data[i] * _P5 & _MASK), 11) * _P1) & _MASK
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _MASK
    h ^= h >> 29
    h = (h * _P3) & _MASK
    return h ^ (h >> 32)


def spark_xxhash64(text: str) -> int:
    """What Spark's ``xxhash64(column)`` gives for a string column holding ``text`` (a signed long)."""
    h = xxh64(text.encode("utf-8"), SPARK_SEED)
    return h - (1 << 64) if h >= 1 << 63 else h


__all__ = ["SPARK_SEED", "spark_xxhash64", "xxh64"]
