"""Key_Shared consumer selection: which connected consumer owns a message's sticky key hash.

A Key_Shared subscription must send every message of one key to one consumer, and every process
that dispatches for the subscription must agree on that consumer without talking to the others.
So the selectors here are pure functions of the connected consumers (names, join order, declared
ranges): no storage, no clock, no randomness.  The dispatcher rebuilds one from the cursor's
consumer list and asks it for owners, a whole column of hashes at a time.

The three mappings Pulsar defines: ``AutoSplitHashRangeSelector`` (``AUTO_SPLIT``),
``ConsistentHashingSelector`` (``AUTO_SPLIT`` under ``subscriptionKeySharedUseConsistentHashing``)
and ``StickySelector`` (``STICKY``); ``selector_for`` picks one.

Every selector accepts hashes in any 32-bit representation of the key's murmur3 (signed, unsigned
or the message's precomputed 31-bit ``sticky_key_hash``) and reduces them to the 31-bit value,
because the low 31 bits are the same in all three and Pulsar masks to 31 bits.
"""

from __future__ import annotations

import abc
import bisect
import enum
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Self

import numpy as np
import numpy.typing as npt

from broker_core.errors import ConsumerAssignError, ConsumerBusy, InvalidConfiguration
from broker_core.hashing import murmur3_32_hash

HASH_RANGE_SIZE = 65536
"""Slots of the hash-range mappings: a hash's slot is ``hash % HASH_RANGE_SIZE``."""
RING_SIZE = 1 << 31
"""Positions on the consistent-hashing ring, ``0 .. 2**31 - 1`` (Java's ``Integer.MAX_VALUE``)."""
DEFAULT_POINTS_PER_CONSUMER = 100

_HASH_MASK = 0x7FFFFFFF
_SLOT_MASK = HASH_RANGE_SIZE - 1

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
        name: the consumer name, unique within the subscription (owners are reported by name).
        join_order: when it connected relative to the others (smaller = earlier); it orders the
            auto-split replay and the consumers sharing a ring point.
        sticky_ranges: for ``STICKY``, inclusive ``[start, end]`` slot ranges in ``0..65535``, as in
            Pulsar's ``Range``.  Lists are accepted and stored as tuples, so a cursor document's
            ``[[0, 99]]`` can be passed straight through.
    """

    name: str
    join_order: int
    sticky_ranges: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidConfiguration(f"Key_Shared consumer name must be a non-empty str, got {self.name!r}")
        if not _is_int(self.join_order):
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


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _hash_array(sticky_hashes: npt.ArrayLike) -> npt.NDArray[np.int64]:
    array = np.asarray(sticky_hashes)
    if array.dtype.kind not in "iu":
        raise InvalidConfiguration(f"sticky hashes must be an integer array, got dtype {array.dtype}")
    return array.astype(np.int64, copy=False) & _HASH_MASK


def _check_unique(consumers: Sequence[KeySharedConsumer]) -> None:
    seen: set[str] = set()
    for consumer in consumers:
        if not isinstance(consumer, KeySharedConsumer):
            raise InvalidConfiguration(
                f"expected KeySharedConsumer, got {type(consumer).__name__} {consumer!r}"
            )
        if consumer.name in seen:
            raise ConsumerBusy(
                f"Key_Shared consumer name {consumer.name!r} is used twice; names must be unique "
                "because keys are assigned by name"
            )
        seen.add(consumer.name)


def _join_sorted(consumers: Iterable[KeySharedConsumer]) -> list[KeySharedConsumer]:
    return sorted(consumers, key=lambda c: (c.join_order, c.name))


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
        """Disconnect a consumer; False (and no change) if no consumer has that name."""
        kept = tuple(c for c in self._consumers if c.name != name)
        if len(kept) == len(self._consumers):
            return False
        self._rebuild(kept)
        return True

    def owner(self, sticky_hash: int) -> str | None:
        """Name of the consumer owning ``sticky_hash``, or None if nobody owns it."""
        index = self.owner_index(sticky_hash)
        return None if index < 0 else self._consumers[index].name

    @abc.abstractmethod
    def owner_index(self, sticky_hash: int) -> int:
        """Scalar reference lookup: index into ``consumers`` or -1."""

    @abc.abstractmethod
    def owner_of_hashes(self, sticky_hashes: npt.ArrayLike) -> Owners:
        """Vectorised lookup: an int32 array of indices into ``consumers`` (-1 = no owner)."""

    @abc.abstractmethod
    def ranges(self) -> dict[str, list[tuple[int, int]]]:
        """Inclusive ``(start, end)`` ranges per consumer name, for topic stats."""

    @abc.abstractmethod
    def _rebuild(self, consumers: tuple[KeySharedConsumer, ...]) -> None:
        """Validate ``consumers`` and recompute the lookup tables; raise before mutating anything."""


class _SlotTable:
    """Disjoint inclusive slot ranges, each with an owner index, looked up by binary search."""

    __slots__ = ("ends", "owners", "start_list", "starts")

    def __init__(self, regions: Iterable[tuple[int, int, int]]) -> None:
        ordered = sorted(regions)
        self.starts = np.array([r[0] for r in ordered], dtype=np.int64)
        self.ends = np.array([r[1] for r in ordered], dtype=np.int64)
        self.owners = np.array([r[2] for r in ordered], dtype=np.int32)
        self.start_list = self.starts.tolist()

    def lookup(self, hashes: npt.NDArray[np.int64]) -> Owners:
        if len(self.starts) == 0:
            return np.full(hashes.shape, -1, dtype=np.int32)
        slots = hashes & _SLOT_MASK
        at = np.maximum(np.searchsorted(self.starts, slots, side="right") - 1, 0)
        inside = (slots >= self.starts[at]) & (slots <= self.ends[at])
        return np.where(inside, self.owners[at], np.int32(-1)).astype(np.int32, copy=False)

    def lookup_one(self, sticky_hash: int) -> int:
        slot = (int(sticky_hash) & _HASH_MASK) & _SLOT_MASK
        at = bisect.bisect_right(self.start_list, slot) - 1
        if at >= 0 and slot <= int(self.ends[at]):
            return int(self.owners[at])
        return -1


class _SlotSelector(KeySharedSelector):
    """A selector over 65536 slots (``hash % 65536``) backed by a ``_SlotTable``."""

    _table = _SlotTable(())

    def owner_index(self, sticky_hash: int) -> int:
        return self._table.lookup_one(sticky_hash)

    def owner_of_hashes(self, sticky_hashes: npt.ArrayLike) -> Owners:
        return self._table.lookup(_hash_array(sticky_hashes))


class AutoSplitHashRangeSelector(_SlotSelector):
    """Pulsar's auto-split hash range: one contiguous slot region per consumer, covering 0..65535.

    A join splits the largest region (ties: the one with the lowest start) and gives its lower
    half to the newcomer; the owner keeps the upper half (the larger half, if the size is odd).
    A leave merges the region into its right neighbour, or into its left one when it is the
    rightmost.  Both affect exactly one other consumer, which is the point of this mapping.

    The layout depends on history, not only on who is connected now, so this selector keeps state:
    use ``add``/``remove`` as consumers come and go.  ``build(consumers)`` (and the constructor)
    replays the joins in join order, which is what a process that did not observe the history
    reconstructs; after leaves it can differ from the incrementally maintained layout.
    """

    _regions: list[tuple[int, int, str]]

    def _rebuild(self, consumers: tuple[KeySharedConsumer, ...]) -> None:
        _check_unique(consumers)
        regions: list[tuple[int, int, str]] = []
        for consumer in _join_sorted(consumers):
            regions = _split_for(regions, consumer.name)
        self._commit(consumers, regions)

    def add(self, consumer: KeySharedConsumer) -> None:
        """Split the largest region for ``consumer`` (raises ConsumerBusy when none can split)."""
        consumers = (*self._consumers, consumer)
        _check_unique(consumers)
        self._commit(consumers, _split_for(self._regions, consumer.name))

    def remove(self, name: str) -> bool:
        """Merge ``name``'s region into its right neighbour (left if rightmost)."""
        if not any(region[2] == name for region in self._regions):
            return False
        self._commit(tuple(c for c in self._consumers if c.name != name), merge_regions(self._regions, name))
        return True

    @classmethod
    def from_regions(
        cls, consumers: Iterable[KeySharedConsumer], regions: Iterable[tuple[int, int, str]]
    ) -> AutoSplitHashRangeSelector:
        """A selector with a layout kept elsewhere (the cursor stores it, so every process agrees on
        the history-dependent layout); regions of consumers not in ``consumers`` own nothing."""
        selector = cls(())
        listed = tuple(consumers)
        names = {c.name for c in listed}
        selector._commit(listed, [r for r in regions if r[2] in names])
        return selector

    def _commit(self, consumers: tuple[KeySharedConsumer, ...], regions: list[tuple[int, int, str]]) -> None:
        index = {c.name: i for i, c in enumerate(consumers)}
        self._consumers, self._regions = consumers, regions
        self._table = _SlotTable((start, end, index[name]) for start, end, name in regions)

    def ranges(self) -> dict[str, list[tuple[int, int]]]:
        """Each consumer's single inclusive slot region."""
        by_name = {name: [(start, end)] for start, end, name in self._regions}
        return {c.name: by_name[c.name] for c in self._consumers}


def _split_for(regions: list[tuple[int, int, str]], name: str) -> list[tuple[int, int, str]]:
    """The regions after ``name`` joins (a new list; the input is left alone)."""
    if not regions:
        return [(0, HASH_RANGE_SIZE - 1, name)]
    # max() keeps the first of equal sizes, and regions are in slot order: lowest start wins ties.
    at = max(range(len(regions)), key=lambda i: regions[i][1] - regions[i][0])
    start, end, owner = regions[at]
    size = end - start + 1
    if size < 2:
        raise ConsumerAssignError(
            f"Key_Shared consumer {name!r} cannot join: every hash range is a single slot "
            f"({len(regions)} consumers already share the {HASH_RANGE_SIZE} slots)"
        )
    middle = start + size // 2
    return [*regions[:at], (start, middle - 1, name), (middle, end, owner), *regions[at + 1 :]]


def split_regions(regions: list[tuple[int, int, str]], name: str) -> list[tuple[int, int, str]]:
    """The AUTO_SPLIT layout after ``name`` joins."""
    return _split_for(regions, name)


def merge_regions(regions: list[tuple[int, int, str]], name: str) -> list[tuple[int, int, str]]:
    """The AUTO_SPLIT layout after ``name`` leaves: its region joins the right neighbour's (left if
    it was rightmost)."""
    at = next((i for i, region in enumerate(regions) if region[2] == name), None)
    if at is None:
        return list(regions)
    out = list(regions)
    start, end, _ = out.pop(at)
    if at < len(out):
        out[at] = (start, out[at][1], out[at][2])
    elif at > 0:
        out[at - 1] = (out[at - 1][0], end, out[at - 1][2])
    return out


@functools.lru_cache(maxsize=8192)
def _ring_points(name: str, count: int) -> tuple[int, ...]:
    """Where ``name`` marks the ring: murmur3 of the name followed by the decimal 1..count."""
    return tuple(murmur3_32_hash(f"{name}{i}") for i in range(1, count + 1))


class ConsistentHashingSelector(KeySharedSelector):
    """Pulsar's auto-split consistent hashing over a ring of ``0 .. 2**31 - 1``.

    Each consumer marks ``points_per_consumer`` points at ``murmur3_32(f"{name}{i}")`` (31-bit,
    ``i`` from 1).  A hash belongs to the first point at or after it, wrapping past the top; a point
    marked by several consumers (a hash collision) holds them in join order and the message hash
    picks ``consumers_at_point[hash % len(consumers_at_point)]``.  Joins and leaves move only the
    keys of the consumer that comes or goes.
    """

    def __init__(
        self,
        consumers: Iterable[KeySharedConsumer] = (),
        *,
        points_per_consumer: int = DEFAULT_POINTS_PER_CONSUMER,
    ) -> None:
        if not _is_int(points_per_consumer) or points_per_consumer < 1:
            raise InvalidConfiguration(
                f"points_per_consumer must be an int >= 1, got {points_per_consumer!r}"
            )
        self._points_per_consumer = points_per_consumer
        super().__init__(consumers)

    def _rebuild(self, consumers: tuple[KeySharedConsumer, ...]) -> None:
        _check_unique(consumers)
        index = {c.name: i for i, c in enumerate(consumers)}
        marks = [
            (point, rank, index[c.name])
            for rank, c in enumerate(_join_sorted(consumers))
            for point in _ring_points(c.name, self._points_per_consumer)
        ]
        marks.sort()
        points, first, counts = np.unique(
            np.array([m[0] for m in marks], dtype=np.int64), return_index=True, return_counts=True
        )
        self._consumers, self._points, self._point_list = consumers, points, points.tolist()
        self._first, self._counts = first.astype(np.int64), counts.astype(np.int64)
        self._members = np.array([m[2] for m in marks], dtype=np.int32)

    def owner_index(self, sticky_hash: int) -> int:
        if len(self._points) == 0:
            return -1
        value = int(sticky_hash) & _HASH_MASK
        at = bisect.bisect_left(self._point_list, value) % len(self._point_list)
        return int(self._members[int(self._first[at]) + value % int(self._counts[at])])

    def owner_of_hashes(self, sticky_hashes: npt.ArrayLike) -> Owners:
        hashes = _hash_array(sticky_hashes)
        if len(self._points) == 0:
            return np.full(hashes.shape, -1, dtype=np.int32)
        at = np.searchsorted(self._points, hashes, side="left") % len(self._points)
        return self._members[self._first[at] + hashes % self._counts[at]]

    def points(self) -> dict[str, list[int]]:
        """The ring points each consumer marked, sorted."""
        return {c.name: sorted(set(_ring_points(c.name, self._points_per_consumer))) for c in self._consumers}

    def ranges(self) -> dict[str, list[tuple[int, int]]]:
        """Inclusive ring segments (ring positions, not slots) each consumer serves.

        A segment ends at a point and starts just after the previous point; the one that wraps is
        reported as two pieces, and adjacent segments of one consumer are merged.  A point shared
        by colliding consumers lists its segment under each of them (they split its hashes by
        ``hash % n``).  Slot space is not used: a ring segment longer than 65536 covers every slot.
        """
        result: dict[str, list[tuple[int, int]]] = {c.name: [] for c in self._consumers}
        if len(self._points) == 0:
            return result
        points = self._point_list
        segments = [(points[k - 1] + 1 if k else 0, point, k) for k, point in enumerate(points)]
        if points[-1] < RING_SIZE - 1:
            segments.append((points[-1] + 1, RING_SIZE - 1, 0))  # past the last point: wraps to the first
        for start, end, k in segments:
            first, count = int(self._first[k]), int(self._counts[k])
            for member in dict.fromkeys(self._members[first : first + count].tolist()):
                spans = result[self._consumers[member].name]
                if spans and spans[-1][1] + 1 == start:
                    spans[-1] = (spans[-1][0], end)
                else:
                    spans.append((start, end))
        return result


class StickySelector(_SlotSelector):
    """Pulsar's ``STICKY`` mapping: consumers declare their own inclusive slot ranges.

    Ranges must lie in 0..65535 with ``start <= end`` and not overlap, within one consumer or across
    consumers; a consumer must declare at least one.  Coverage need not be complete: a slot nobody
    declared has no owner (-1) and its messages wait until some consumer covers it.
    """

    def _rebuild(self, consumers: tuple[KeySharedConsumer, ...]) -> None:
        _check_unique(consumers)
        regions: list[tuple[int, int, int]] = []
        for index, consumer in enumerate(consumers):
            if not consumer.sticky_ranges:
                raise InvalidConfiguration(
                    f"Key_Shared STICKY consumer {consumer.name!r} declared no hash ranges; give it "
                    f"sticky_ranges of inclusive (start, end) slots within 0..{HASH_RANGE_SIZE - 1}"
                )
            for start, end in consumer.sticky_ranges:
                if not 0 <= start <= end < HASH_RANGE_SIZE:
                    raise InvalidConfiguration(
                        f"Key_Shared STICKY consumer {consumer.name!r} has range [{start}, {end}]; ranges "
                        f"need 0 <= start <= end <= {HASH_RANGE_SIZE - 1}"
                    )
                regions.append((start, end, index))
        _check_disjoint(consumers, sorted(regions))
        self._consumers, self._table = consumers, _SlotTable(regions)

    def ranges(self) -> dict[str, list[tuple[int, int]]]:
        """Each consumer's declared inclusive slot ranges, sorted."""
        return {c.name: sorted(c.sticky_ranges) for c in self._consumers}


def _check_disjoint(consumers: tuple[KeySharedConsumer, ...], regions: list[tuple[int, int, int]]) -> None:
    """Refuse the first overlap, blaming the later-joined consumer of the pair."""
    widest: tuple[int, int, int] | None = None  # the region reaching furthest right so far
    for region in regions:
        if widest is not None and region[0] <= widest[1]:
            a, b = consumers[widest[2]], consumers[region[2]]
            if a.name == b.name:
                raise InvalidConfiguration(
                    f"Key_Shared STICKY consumer {a.name!r} declares overlapping ranges "
                    f"[{widest[0]}, {widest[1]}] and [{region[0]}, {region[1]}]"
                )
            (early, early_range), (late, late_range) = sorted(
                [(a, widest[:2]), (b, region[:2])], key=lambda pair: (pair[0].join_order, pair[0].name)
            )
            raise ConsumerAssignError(
                f"Key_Shared STICKY consumer {late.name!r} range {list(late_range)} overlaps range "
                f"{list(early_range)} of consumer {early.name!r}; sticky ranges must be disjoint"
            )
        if widest is None or region[1] > widest[1]:
            widest = region


def selector_for(
    mode: KeySharedMode | int | str,
    consistent_hashing: bool,
    consumers: Iterable[KeySharedConsumer],
    *,
    points_per_consumer: int = DEFAULT_POINTS_PER_CONSUMER,
) -> KeySharedSelector:
    """The selector a subscription uses.

    Args:
        mode: the consumers' Key_Shared mode.
        consistent_hashing: the broker setting ``subscriptionKeySharedUseConsistentHashing``; it
            replaces hash ranges with the ring for ``AutoSplit`` only.
        consumers: the connected consumers.
        points_per_consumer: ring points per consumer when the ring is used.
    """
    if KeySharedMode.coerce(mode) is KeySharedMode.Sticky:
        return StickySelector(consumers)
    if consistent_hashing:
        return ConsistentHashingSelector(consumers, points_per_consumer=points_per_consumer)
    return AutoSplitHashRangeSelector(consumers)


__all__ = [
    "DEFAULT_POINTS_PER_CONSUMER",
    "HASH_RANGE_SIZE",
    "RING_SIZE",
    "AutoSplitHashRangeSelector",
    "ConsistentHashingSelector",
    "KeySharedConsumer",
    "KeySharedMode",
    "KeySharedSelector",
    "StickySelector",
    "merge_regions",
    "selector_for",
    "split_regions",
]
