"""Pulsar's key hashes, bit-exact, for one key at a time and for whole Arrow columns.

Partition routing and Key_Shared dispatch must agree with the official clients and broker, or a key
lands on a different partition (or consumer) depending on which client wrote it.  Pulsar uses two
schemes: Java's ``String.hashCode()`` and murmur3 x86 32-bit with seed 0 over the UTF-8 bytes, both
masked to 31 bits so the result is a non-negative Java ``int``.

The scalar functions are the readable reference.  The ``*_array`` functions are the hot path for
bulk appends (millions of rows): they hash each distinct value once (keys repeat a lot) and do the
per-value work with numpy over the Arrow offsets and data buffers, looping over byte positions
rather than over rows.

``hashing.keys`` holds the scalar functions, the schemes and the Key_Shared slot mapping;
``hashing.columns`` the Arrow functions.
"""

from __future__ import annotations

from broker_core.hashing.columns import (
    hash_keys,
    java_string_hash_array,
    murmur3_32_hash_array,
    sticky_key_hash_array,
)
from broker_core.hashing.keys import (
    CONSISTENT_HASH_MAX,
    RANGE_HASH_SLOTS,
    HashingScheme,
    consistent_sticky_hash,
    consistent_sticky_hashes,
    java_string_hash,
    murmur3_32_hash,
    murmur3_32_unsigned,
    range_sticky_hash,
    range_sticky_hashes,
    sticky_key_hash,
)

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
