"""Which partition a message goes to, decided as Pulsar's partitioned producer decides it.

A message with a key always goes to ``hash(key) % num_partitions``, whatever the routing mode, so
every producer (ours or an official client using the same hashing scheme) puts a key on the same
partition and per-key order holds.  Only keyless messages depend on the mode: spread round-robin,
pinned to one partition, or handed to user code.  An empty key counts as no key, because the Python
client does not attach an empty key to a message.

Each router answers for one message (``choose``) and for a whole bulk append (``choose_many``); the
bulk path hashes the key column with the vectorised hashes and fills keyless rows by the mode's rule.
"""

from __future__ import annotations

import enum
import random
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_core.clock import SYSTEM_CLOCK, Clock
from broker_core.errors import InvalidConfiguration
from broker_core.hashing import (
    HashingScheme,
    hash_keys,
    java_string_hash,
    murmur3_32_hash,
)

KeyColumn: TypeAlias = "pa.Array | pa.ChunkedArray"
KEY_CACHE_ENTRIES = 65_536
"""How many keys a router remembers the partition of (a dict of short strings: a few MB at most)."""


class PartitionsRoutingMode(enum.IntEnum):
    """How keyless messages are spread; names and values as in the official client."""

    UseSinglePartition = 0
    RoundRobinDistribution = 1
    CustomPartition = 2


def _require_num_partitions(num_partitions: object) -> int:
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, int | np.integer):
        raise InvalidConfiguration(
            f"num_partitions must be an int >= 1, got {type(num_partitions).__name__} {num_partitions!r}"
        )
    if num_partitions < 1:
        raise InvalidConfiguration(
            f"num_partitions must be >= 1, got {num_partitions}; a topic has at least one partition"
        )
    return int(num_partitions)


def _has_key(key: object) -> bool:
    if key is None:
        return False
    if not isinstance(key, str):
        raise InvalidConfiguration(f"a message key must be a str or None, got {type(key).__name__} {key!r}")
    return key != ""


def partition_for_key(
    key: str, num_partitions: int, scheme: HashingScheme | int | str = HashingScheme.JavaStringHash
) -> int:
    """The partition of a keyed message: ``hash(key) % num_partitions`` (the hash is non-negative).

    Raises:
        InvalidConfiguration: ``key`` is not a str, ``num_partitions`` < 1, or the scheme is unknown.
    """
    if not isinstance(key, str):
        raise InvalidConfiguration(f"a message key must be a str, got {type(key).__name__} {key!r}")
    count = _require_num_partitions(num_partitions)
    if HashingScheme.coerce(scheme) is HashingScheme.JavaStringHash:
        return java_string_hash(key) % count
    return murmur3_32_hash(key) % count


def _present_mask(keys: KeyColumn) -> np.ndarray:
    """True where a row has a key (non-null, non-empty)."""
    chunks = keys.chunks if isinstance(keys, pa.ChunkedArray) else [keys]
    masks = [np.zeros(0, dtype=bool)]
    for chunk in chunks:
        if pa.types.is_null(chunk.type):
            masks.append(np.zeros(len(chunk), dtype=bool))
            continue
        if pa.types.is_dictionary(chunk.type):
            lengths = pc.take(pc.binary_length(chunk.dictionary), chunk.indices)
        else:
            lengths = pc.binary_length(chunk)
        present = pc.fill_null(pc.greater(lengths, 0), False)
        masks.append(present.to_numpy(zero_copy_only=False))
    return np.concatenate(masks)


def partitions_for_keys(
    keys: KeyColumn, num_partitions: int, scheme: HashingScheme | int | str = HashingScheme.JavaStringHash
) -> np.ndarray:
    """``partition_for_key`` of every row of a key column, as a numpy int32 array.

    Rows without a key (null or empty) get -1; the caller fills them by its routing mode.

    Raises:
        InvalidConfiguration: ``keys`` is not a string column, ``num_partitions`` < 1, or the scheme
            is unknown.
    """
    count = _require_num_partitions(num_partitions)
    hashes = hash_keys(keys, HashingScheme.coerce(scheme))
    values = pc.fill_null(hashes, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return np.where(_present_mask(keys), values % count, -1).astype(np.int32)


class MessageRouter(ABC):
    """Chooses the partition of each message of one partitioned topic.

    Args:
        num_partitions: the topic's partition count (>= 1).

    Raises:
        InvalidConfiguration: ``num_partitions`` is not an int >= 1.
    """

    routing_mode: PartitionsRoutingMode

    def __init__(self, num_partitions: int) -> None:
        self._num_partitions = _require_num_partitions(num_partitions)

    @property
    def num_partitions(self) -> int:
        """The partition count routed over."""
        return self._num_partitions

    @abstractmethod
    def choose(self, key: str | None, message: object = None) -> int:
        """The partition of one message with ``key`` (None or "" for a keyless message)."""

    @abstractmethod
    def choose_many(self, keys: KeyColumn, messages: Sequence[object] | None = None) -> np.ndarray:
        """The partitions of a bulk append, one int32 per row of ``keys``, in row order."""


class _KeyHashRouter(MessageRouter):
    """Routes keyed messages by hash; subclasses say where keyless messages go."""

    def __init__(self, num_partitions: int, scheme: HashingScheme | int | str) -> None:
        super().__init__(num_partitions)
        self._scheme = HashingScheme.coerce(scheme)
        self._partition_of: dict[str, int] = {}  # keys routed so far (``choose``), at most KEY_CACHE_ENTRIES

    @property
    def scheme(self) -> HashingScheme:
        """The key hashing scheme."""
        return self._scheme

    @abstractmethod
    def _keyless(self, count: int) -> np.ndarray:
        """Partitions for ``count`` consecutive keyless messages."""

    def choose(self, key: str | None, message: object = None) -> int:
        # A partitioned producer calls this once per message: a key seen before is a dict look-up
        # (hashing even a short key in Python costs more than the rest of routing).
        if type(key) is str:
            cached = self._partition_of.get(key)
            if cached is not None:
                return cached
        if _has_key(key):
            partition = partition_for_key(key, self._num_partitions, self._scheme)  # type: ignore[arg-type]
            if len(self._partition_of) >= KEY_CACHE_ENTRIES:
                self._partition_of.clear()  # many distinct keys: start over rather than grow without bound
            self._partition_of[key] = partition  # type: ignore[index]
            return partition
        return self._keyless_one()

    def _keyless_one(self) -> int:
        """The partition of one keyless message (``_keyless(1)`` without the array)."""
        return int(self._keyless(1)[0])

    def choose_many(self, keys: KeyColumn, messages: Sequence[object] | None = None) -> np.ndarray:
        partitions = partitions_for_keys(keys, self._num_partitions, self._scheme)
        keyless_rows = np.flatnonzero(partitions == -1)
        if len(keyless_rows):
            partitions[keyless_rows] = self._keyless(len(keyless_rows))
        return partitions


class RoundRobinRouter(_KeyHashRouter):
    """Spreads keyless messages over all partitions (``RoundRobinDistribution``).

    With batching on, every keyless message of one batching window goes to the same partition, so
    batches fill up; the partition advances each ``partition_switch_ms`` of clock time.  With batching
    off, a counter advances per keyless message.

    Args:
        num_partitions: the topic's partition count (>= 1).
        scheme: the key hashing scheme (Java client default: ``JavaStringHash``).
        batching_enabled: whether the producer batches (Python client default: off).
        partition_switch_ms: the batching max publish delay; values below 1 are raised to 1 ms.
        clock: where "now" comes from; the system clock by default.
        start_index: the first partition offset; random when None, so that many producers started
            together do not all hit partition 0 first.

    Raises:
        InvalidConfiguration: a bad partition count, scheme, switch interval, clock or start index.
    """

    routing_mode = PartitionsRoutingMode.RoundRobinDistribution

    def __init__(
        self,
        num_partitions: int,
        *,
        scheme: HashingScheme | int | str = HashingScheme.JavaStringHash,
        batching_enabled: bool = False,
        partition_switch_ms: int = 10,
        clock: Clock | None = None,
        start_index: int | None = None,
    ) -> None:
        super().__init__(num_partitions, scheme)
        if isinstance(partition_switch_ms, bool) or not isinstance(partition_switch_ms, int):
            raise InvalidConfiguration(f"partition_switch_ms must be an int, got {partition_switch_ms!r}")
        if partition_switch_ms < 0:
            raise InvalidConfiguration(f"partition_switch_ms must be >= 0, got {partition_switch_ms}")
        chosen_clock = SYSTEM_CLOCK if clock is None else clock
        if not callable(getattr(chosen_clock, "now_ms", None)):
            raise InvalidConfiguration(f"clock must have a now_ms() method, got {chosen_clock!r}")
        if start_index is None:
            start_index = random.randrange(self._num_partitions)
        elif isinstance(start_index, bool) or not isinstance(start_index, int):
            raise InvalidConfiguration(f"start_index must be an int or None, got {start_index!r}")
        self._batching_enabled = bool(batching_enabled)
        self._partition_switch_ms = max(1, partition_switch_ms)
        self._clock = chosen_clock
        self._start_index = start_index
        self._next_counter = start_index
        self._lock = threading.Lock()

    @property
    def partition_switch_ms(self) -> int:
        """How long keyless messages stay on one partition when batching (>= 1 ms)."""
        return self._partition_switch_ms

    def _keyless_one(self) -> int:
        return self._first_keyless(1) % self._num_partitions

    def _keyless(self, count: int) -> np.ndarray:
        first = self._first_keyless(count)
        if self._batching_enabled:
            return np.full(count, first % self._num_partitions, dtype=np.int32)
        return (np.arange(first, first + count, dtype=np.int64) % self._num_partitions).astype(np.int32)

    def _first_keyless(self, count: int) -> int:
        """Where ``count`` keyless messages start: when batching, the current time window (one clock
        reading per call: a bulk append is one batch written at one instant, so all share it); else
        the first of ``count`` round-robin counter values, reserved under the lock."""
        if self._batching_enabled:
            return self._clock.now_ms() // self._partition_switch_ms + self._start_index
        with self._lock:
            first = self._next_counter
            self._next_counter += count
        return first


class SinglePartitionRouter(_KeyHashRouter):
    """Sends every keyless message to one partition (``UseSinglePartition``).

    Args:
        num_partitions: the topic's partition count (>= 1).
        scheme: the key hashing scheme.
        partition: the partition for keyless messages; chosen at random once when None.

    Raises:
        InvalidConfiguration: a bad partition count or scheme, or ``partition`` outside
            ``[0, num_partitions)``.
    """

    routing_mode = PartitionsRoutingMode.UseSinglePartition

    def __init__(
        self,
        num_partitions: int,
        *,
        scheme: HashingScheme | int | str = HashingScheme.JavaStringHash,
        partition: int | None = None,
    ) -> None:
        super().__init__(num_partitions, scheme)
        if partition is None:
            partition = random.randrange(self._num_partitions)
        elif isinstance(partition, bool) or not isinstance(partition, int):
            raise InvalidConfiguration(f"partition must be an int or None, got {partition!r}")
        elif not 0 <= partition < self._num_partitions:
            raise InvalidConfiguration(f"partition must be in [0, {self._num_partitions}), got {partition}")
        self._partition = partition

    @property
    def partition(self) -> int:
        """The partition keyless messages go to."""
        return self._partition

    def _keyless_one(self) -> int:
        return self._partition

    def _keyless(self, count: int) -> np.ndarray:
        return np.full(count, self._partition, dtype=np.int32)


class CustomRouter(MessageRouter):
    """Asks user code for every message's partition (``CustomPartition``), keyed or not.

    ``fn(message, num_partitions)`` receives the ``message`` passed to ``choose`` (or the row of
    ``messages`` in ``choose_many``), and the key itself when no message object was given.

    Args:
        num_partitions: the topic's partition count (>= 1).
        fn: the user's router.

    Raises:
        InvalidConfiguration: a bad partition count, or ``fn`` is not callable.
    """

    routing_mode = PartitionsRoutingMode.CustomPartition

    def __init__(self, num_partitions: int, fn: Callable[[object, int], int]) -> None:
        super().__init__(num_partitions)
        if not callable(fn):
            raise InvalidConfiguration(f"the custom message router must be callable, got {fn!r}")
        self._fn = fn

    def _call(self, message: object) -> int:
        result = self._fn(message, self._num_partitions)
        if isinstance(result, bool) or not isinstance(result, int | np.integer):
            raise InvalidConfiguration(
                f"the custom message router returned {type(result).__name__} {result!r}; it must "
                f"return an int partition in [0, {self._num_partitions})"
            )
        if not 0 <= result < self._num_partitions:
            raise InvalidConfiguration(
                f"the custom message router returned partition {result}; it must be in "
                f"[0, {self._num_partitions})"
            )
        return int(result)

    def choose(self, key: str | None, message: object = None) -> int:
        _has_key(key)  # validates the key's type
        return self._call(key if message is None else message)

    def choose_many(self, keys: KeyColumn, messages: Sequence[object] | None = None) -> np.ndarray:
        if not isinstance(keys, pa.Array | pa.ChunkedArray):
            raise InvalidConfiguration(
                f"keys must be a pyarrow Array or ChunkedArray, got {type(keys).__name__}"
            )
        key_list = keys.to_pylist()
        if messages is not None and len(messages) != len(key_list):
            raise InvalidConfiguration(
                f"messages has {len(messages)} rows but keys has {len(key_list)}; they must match"
            )
        rows = key_list if messages is None else messages
        return np.array([self._call(row) for row in rows], dtype=np.int32)


def router_for(
    num_partitions: int,
    *,
    message_routing_mode: PartitionsRoutingMode,
    message_router: Callable[[Any, int], int] | None,
    hashing_scheme: HashingScheme,
    batching_enabled: bool = False,
    partition_switch_ms: int = 10,
    clock: Clock | None = None,
) -> MessageRouter:
    """The router of a partitioned producer, chosen from its settings as the official client chooses.

    Persistent and non-persistent producers take the same settings, so one place decides: a
    ``message_router`` function wins whatever the mode, ``UseSinglePartition`` pins keyless
    messages, and anything else spreads them round-robin (``batching_enabled`` and
    ``partition_switch_ms`` as for ``RoundRobinRouter``).

    Raises:
        InvalidConfiguration: ``CustomPartition`` without a ``message_router`` function.
    """
    if message_router is not None:
        return CustomRouter(num_partitions, message_router)
    if message_routing_mode == PartitionsRoutingMode.UseSinglePartition:
        return SinglePartitionRouter(num_partitions, scheme=hashing_scheme)
    if message_routing_mode == PartitionsRoutingMode.CustomPartition:
        raise InvalidConfiguration("message_routing_mode=CustomPartition needs a message_router function")
    return RoundRobinRouter(
        num_partitions,
        scheme=hashing_scheme,
        batching_enabled=batching_enabled,
        partition_switch_ms=partition_switch_ms,
        clock=clock,
    )


__all__ = [
    "CustomRouter",
    "MessageRouter",
    "PartitionsRoutingMode",
    "RoundRobinRouter",
    "SinglePartitionRouter",
    "partition_for_key",
    "partitions_for_keys",
    "router_for",
]
