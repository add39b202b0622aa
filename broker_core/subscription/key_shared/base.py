"""What every Key_Shared selector shares: the mode, the consumer record and the selector interface.

A Key_Shared subscription must send every message of one key to one consumer, and every process
that dispatches for the subscription must agree on that consumer without talking to the others.
So selectors are pure functions of the connected consumers (names, arrival order, declared ranges,
and for AUTO_SPLIT hash ranges the layout the cursor stores): no storage, no clock, no randomness.

Pulsar 4.x hashes the sticky key once (the 31-bit murmur3 our segments store as
``sticky_key_hash``) and each selector reduces it to its own range (``hashing.consistent_sticky_hash``
or ``hashing.range_sticky_hash``).  Selectors here accept the stored murmur (``owner_index``,
``owner_of_hashes``) and also the already reduced sticky hash (``select``), which is what Pulsar's
``select(int hash)`` and its reported ranges are expressed in.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Self

import numpy as np
import numpy.typing as npt

from broker_core.errors import ConsumerBusy, InvalidConfiguration

HASH_RANGE_SIZE = 65536
"""Slots of the hash-range mappings; STICKY ranges lie within ``0 .. HASH_RANGE_SIZE - 1``."""

_HASH_MASK = 0x7FFFFFFF

Owners = npt.NDArray[np.int32]


class KeySharedMode(enum.IntEnum):
    """How a Key_Shared subscription maps keys to consumers (the official Python client's values)."""

    AutoSplit = 0
    Sticky = 1

    @classmethod
    def coerce(cls, mode: KeySharedMode | int | str) -> KeySharedMode:
        """The mode named by a member, its value, its name or the Java name (``AUTO_SPLIT``)."""
        try:
            if isinstance(mode, str):
                return {m.name.lower(): m for m in cls}[mode.replace("_", "").lower()]
            return cls(mode)
        except (KeyError, ValueError):
            raise InvalidConfiguration(
                f"unknown Key_Shared mode {mode!r}; use one of {[m.name for m in cls]}"
            ) from None


@dataclass(frozen=True, slots=True)
class KeySharedConsumer:
    """What a selector needs to know about one connected consumer.

    Attributes:
        name: the consumer name (owners are reported by name).
        join_order: when it connected relative to the others (smaller = earlier): the arrival order
            that auto-split replays and that decides who keeps a colliding ring point.
        sticky_ranges: for ``STICKY``, inclusive ``[start, end]`` ranges in ``0..65535``, as in
            Pulsar's ``Range``.  Lists are accepted and stored as tuples, so a cursor document's
            ``[[0, 99]]`` can be passed straight through.
    """

    name: str
    join_order: int
    sticky_ranges: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidConfiguration(f"Key_Shared consumer name must be a non-empty str, got {self.name!r}")
        if not is_int(self.join_order):
            raise InvalidConfiguration(
                f"join_order of consumer {self.name!r} must be an int, got {self.join_order!r}"
            )
        try:
            ranges = tuple((int(start), int(end)) for start, end in self.sticky_ranges)
        except (TypeError, ValueError):
            raise InvalidConfiguration(
                f"sticky_ranges of consumer {self.name!r} must be (start, end) int pairs, "
                f"got {self.sticky_ranges!r}"
            ) from None
        object.__setattr__(self, "sticky_ranges", ranges)


def is_int(value: object) -> bool:
    """An int that is not a bool (config values must not accept True as 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def hash_array(sticky_hashes: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """An integer array of murmur hashes as int64 masked to 31 bits (any 32-bit form is accepted)."""
    array = np.asarray(sticky_hashes)
    if array.dtype.kind not in "iu":
        raise InvalidConfiguration(f"sticky hashes must be an integer array, got dtype {array.dtype}")
    return array.astype(np.int64, copy=False) & _HASH_MASK


def check_consumers(consumers: Sequence[KeySharedConsumer], *, unique: bool) -> None:
    """Refuse anything but ``KeySharedConsumer``s, and (``unique``) a name used twice."""
    seen: set[str] = set()
    for consumer in consumers:
        if not isinstance(consumer, KeySharedConsumer):
            raise InvalidConfiguration(
                f"expected KeySharedConsumer, got {type(consumer).__name__} {consumer!r}"
            )
        if unique and consumer.name in seen:
            raise ConsumerBusy(
                f"Key_Shared consumer name {consumer.name!r} is used twice; names must be unique "
                "because keys are assigned by name"
            )
        seen.add(consumer.name)


def arrival_sorted(consumers: Iterable[KeySharedConsumer]) -> list[KeySharedConsumer]:
    """Consumers in the order they connected (ties, which a cursor never has, by name)."""
    return sorted(consumers, key=lambda c: (c.join_order, c.name))


def merge_adjacent(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted inclusive spans with touching or overlapping ones joined."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out


class KeySharedSelector(abc.ABC):
    """Maps sticky key hashes to the consumer that owns them.

    Owners are indices into ``consumers`` (the list the selector was built from, in that order,
    with ``add`` appending and ``remove`` dropping), or -1 when no consumer owns the hash.
    """

    def __init__(self, consumers: Iterable[KeySharedConsumer] = ()) -> None:
        self._consumers: tuple[KeySharedConsumer, ...] = ()
        self._rebuild(tuple(consumers))

    @classmethod
    def build(cls, consumers: Iterable[KeySharedConsumer]) -> Self:
        """The selector for this consumer list (the same list gives the same mapping anywhere)."""
        return cls(consumers)

    @property
    def consumers(self) -> tuple[KeySharedConsumer, ...]:
        """The consumers that owner indices refer to."""
        return self._consumers

    def add(self, consumer: KeySharedConsumer) -> None:
        """Connect one more consumer; on error nothing changes, as if it never tried to connect."""
        self._rebuild((*self._consumers, consumer))

    def remove(self, name: str) -> bool:
        """Disconnect the consumers of that name; False (and no change) if there is none."""
        kept = tuple(c for c in self._consumers if c.name != name)
        if len(kept) == len(self._consumers):
            return False
        self._rebuild(kept)
        return True

    def owner(self, murmur31: int) -> str | None:
        """Name of the consumer owning a message with this stored murmur, or None if nobody does."""
        index = self.owner_index(murmur31)
        return None if index < 0 else self._consumers[index].name

    def owner_index(self, murmur31: int) -> int:
        """Scalar lookup by the stored 31-bit murmur: index into ``consumers`` or -1."""
        return self.select(int(self.sticky_hashes(np.array([murmur31], dtype=np.int64))[0]))

    def owner_of_hashes(self, murmur31: npt.ArrayLike) -> Owners:
        """Vectorised lookup by stored murmur: int32 indices into ``consumers`` (-1 = no owner)."""
        return self.select_many(self.sticky_hashes(hash_array(murmur31)))

    def select(self, sticky_hash: int) -> int:
        """Owner index of an already reduced sticky hash (Pulsar's ``select(int hash)``), or -1."""
        return int(self.select_many(np.array([sticky_hash], dtype=np.int64))[0])

    @abc.abstractmethod
    def sticky_hashes(self, murmur31: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """This selector's sticky hashes of stored 31-bit murmurs (what its ranges are made of)."""

    @abc.abstractmethod
    def select_many(self, sticky_hashes: npt.NDArray[np.int64]) -> Owners:
        """Owner indices of reduced sticky hashes."""

    @abc.abstractmethod
    def ranges(self) -> dict[str, list[tuple[int, int]]]:
        """Inclusive ``(start, end)`` sticky-hash ranges per consumer name, for topic stats."""

    @abc.abstractmethod
    def _rebuild(self, consumers: tuple[KeySharedConsumer, ...]) -> None:
        """Validate ``consumers`` and recompute the lookup tables; raise before mutating anything."""


__all__ = [
    "HASH_RANGE_SIZE",
    "KeySharedConsumer",
    "KeySharedMode",
    "KeySharedSelector",
    "Owners",
    "arrival_sorted",
    "check_consumers",
    "hash_array",
    "is_int",
    "merge_adjacent",
]
