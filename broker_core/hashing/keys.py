"""Pulsar's key hashes for one key at a time, the routing schemes, and the Key_Shared slot mapping.

These are the readable reference the column functions (``hashing.columns``) are tested against.
Pulsar uses two schemes: Java's ``String.hashCode()`` and murmur3 x86 32-bit with seed 0 over the
UTF-8 bytes, both masked to 31 bits so the result is a non-negative Java ``int``.
"""

from __future__ import annotations

import enum

import mmh3
import numpy as np

from broker_core.errors import InvalidConfiguration

_UINT32_MASK = 0xFFFFFFFF
INT31_MASK = 0x7FFFFFFF
NONE_KEY = b"NONE_KEY"  # the broker's sticky key for messages with neither ordering key nor key


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
    return result & INT31_MASK


def murmur3_32_unsigned(data: str | bytes) -> int:
    """Unmasked murmur3 x86 32-bit (seed 0) of ``data`` (a str is hashed as its UTF-8 bytes)."""
    return int(mmh3.hash(_as_bytes(data, "murmur3 input"), 0, signed=False))


def murmur3_32_hash(key: str | bytes) -> int:
    """Pulsar's ``Murmur3_32Hash``: murmur3 x86 32-bit, seed 0, masked to 31 bits."""
    return murmur3_32_unsigned(key) & INT31_MASK


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
    return murmur3_32_hash(NONE_KEY)


# Pulsar 4.x reduces the 31-bit murmur of the sticky key to the selector's hash range.
CONSISTENT_HASH_MAX = 65535
"""Consistent hashing's sticky hashes (and ring points) are ``1 .. 65535``."""
RANGE_HASH_SLOTS = 65536
"""The hash-range selectors' sticky hashes are ``h % 65536`` with 0 moved to 1, so ``1 .. 65535``."""


def consistent_sticky_hash(murmur31: int) -> int:
    """The consistent-hashing selector's sticky hash of a 31-bit murmur: ``h % 65535 + 1``."""
    return (int(murmur31) & INT31_MASK) % CONSISTENT_HASH_MAX + 1


def range_sticky_hash(murmur31: int) -> int:
    """The auto-split and sticky selectors' sticky hash of a 31-bit murmur: ``h % 65536``, 0 -> 1."""
    return (int(murmur31) & INT31_MASK) % RANGE_HASH_SLOTS or 1


def consistent_sticky_hashes(murmur31: np.ndarray) -> np.ndarray:
    """``consistent_sticky_hash`` of a whole int array (any 32-bit representation), as int64."""
    return (np.asarray(murmur31).astype(np.int64) & INT31_MASK) % CONSISTENT_HASH_MAX + 1


def range_sticky_hashes(murmur31: np.ndarray) -> np.ndarray:
    """``range_sticky_hash`` of a whole int array (any 32-bit representation), as int64."""
    slots = (np.asarray(murmur31).astype(np.int64) & INT31_MASK) % RANGE_HASH_SLOTS
    return np.where(slots == 0, 1, slots)
