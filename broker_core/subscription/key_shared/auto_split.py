"""Pulsar 4.x's auto-split hash-range Key_Shared selector (AUTO_SPLIT with consistent hashing off).

``range_size`` is a power of two >= 2 (default 65536).  Each consumer holds an end key and owns the
slots ``(end key of the range below, own end key]``; the lowest range starts at slot 0, and the
first consumer's end key is ``range_size`` itself (one beyond the last slot, which is why
``range_size`` slots need ``range_size + 1`` key values).  A message's slot is its range sticky
hash (``h % 65536``, 0 -> 1) modulo ``range_size``, and it goes to the smallest end key >= the slot.

- Join: the largest range (size = end key minus the end key below, 0 below the lowest; ties: the
  lower range) is split at ``end - ((end - end_below) >> 1)``; the newcomer takes the lower part,
  with the split point as its end key.  A largest range of size <= 1 means more consumers than
  slots: ``ConsumerAssignException``.
- Leave: the range joins its upper neighbour (whose end key now covers it), except the top range,
  whose end key (``range_size``) the lower neighbour takes over.

The layout depends on the join/leave history, not only on who is connected, so the cursor stores
it (``autoSplitEndKeys``, docs/PROTOCOL.md) and every process builds the same selector from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from broker_core.errors import ConsumerAssignException, InvalidConfiguration
from broker_core.hashing.keys import range_sticky_hashes
from broker_core.subscription.key_shared.base import (
    HASH_RANGE_SIZE,
    KeySharedConsumer,
    KeySharedSelector,
    Owners,
    arrival_sorted,
    check_consumers,
    is_int,
)

DEFAULT_RANGE_SIZE = HASH_RANGE_SIZE
"""Pulsar's ``DEFAULT_RANGE_SIZE`` (``2 << 15``)."""

EndKeys = list[tuple[int, str]]
"""``(end key, consumer name)`` pairs in ascending end-key order."""


def check_range_size(range_size: object) -> int:
    """``range_size`` if it is a power of two >= 2, else ``InvalidConfiguration`` naming it."""
    if not is_int(range_size) or range_size < 2 or range_size & (range_size - 1):  # type: ignore[operator]
        raise InvalidConfiguration(
            f"Key_Shared auto-split range size must be a power of two >= 2 "
            f"(subscriptionKeySharedAutoSplitRangeSize), got {range_size!r}"
        )
    return int(range_size)  # type: ignore[call-overload]


def join(ends: Sequence[tuple[int, str]], name: str, range_size: int) -> EndKeys:
    """The end keys after ``name`` joins (a new list; the input is left alone).

    Raises:
        ConsumerAssignException: no range has more than one slot left to split.
    """
    if not ends:
        return [(range_size, name)]
    best_size, best_at, below = 0, 0, 0
    for at, (end, _) in enumerate(ends):
        if end - below > best_size:  # strictly larger: ties keep the lower range
            best_size, best_at = end - below, at
        below = end
    if best_size <= 1:
        raise ConsumerAssignException(
            f"Key_Shared consumer {name!r} cannot join: no hash range can be split any more "
            f"({len(ends)} consumers already share {range_size} slots)"
        )
    end = ends[best_at][0]
    split = end - (best_size >> 1)
    return [*ends[:best_at], (split, name), *ends[best_at:]]


def leave(ends: Sequence[tuple[int, str]], name: str, range_size: int) -> EndKeys:
    """The end keys after ``name`` leaves (unchanged if it holds none)."""
    at = next((i for i, (_, owner) in enumerate(ends) if owner == name), None)
    if at is None:
        return list(ends)
    out = list(ends)
    end, _ = out.pop(at)
    if end == range_size and out:  # the top range: the lower neighbour takes over its end key
        out[-1] = (range_size, out[-1][1])
    return out


def end_keys_from_regions(regions: Iterable[Sequence[object]]) -> EndKeys:
    """End keys equivalent to a cursor's legacy ``regions`` (inclusive ``[start, end, name]`` slots).

    Each old region ``[s, e]`` becomes end key ``e + 1``: the same consumers in the same order with
    the same range sizes, so the split/merge history carries over; only each boundary slot moves
    one position up (docs/PROTOCOL.md).
    """
    return sorted((int(str(r[1])) + 1, str(r[2])) for r in regions)


class AutoSplitHashRangeSelector(KeySharedSelector):
    """Auto-split hash ranges over ``range_size`` slots (see the module docstring).

    ``build(consumers)`` (and the constructor) replays the joins in join order, which is what a
    process that saw no history reconstructs; ``add``/``remove`` follow the history;
    ``from_end_keys`` takes a stored layout.
    """

    def __init__(self, consumers: Iterable[KeySharedConsumer] = (), *, range_size: int = DEFAULT_RANGE_SIZE) -> None:
        self._range_size = check_range_size(range_size)
        self._ends: EndKeys = []
        super().__init__(consumers)

    @property
    def range_size(self) -> int:
        return self._range_size

    @property
    def end_keys(self) -> EndKeys:
        """The layout, as the cursor stores it."""
        return list(self._ends)

    def _rebuild(self, consumers: tuple[KeySharedConsumer, ...]) -> None:
        check_consumers(consumers, unique=True)
        ends: EndKeys = []
        for consumer in arrival_sorted(consumers):
            ends = join(ends, consumer.name, self._range_size)
        self._commit(consumers, ends)

    def add(self, consumer: KeySharedConsumer) -> None:
        """Split the largest range for ``consumer`` (``ConsumerAssignException`` when none can split)."""
        consumers = (*self._consumers, consumer)
        check_consumers(consumers, unique=True)
        self._commit(consumers, join(self._ends, consumer.name, self._range_size))

    def remove(self, name: str) -> bool:
        """``name``'s range joins its upper neighbour's (the top range: its lower neighbour's)."""
        if all(owner != name for _, owner in self._ends):
            return False
        kept = tuple(c for c in self._consumers if c.name != name)
        self._commit(kept, leave(self._ends, name, self._range_size))
        return True

    @classmethod
    def from_end_keys(
        cls,
        consumers: Iterable[KeySharedConsumer],
        ends: Iterable[tuple[int, str]],
        *,
        range_size: int = DEFAULT_RANGE_SIZE,
    ) -> AutoSplitHashRangeSelector:
        """A selector over a stored layout.  Ranges of consumers not in ``consumers`` (their lease ran
        out but the cursor has not dropped them yet) belong to nobody until the layout is updated."""
        selector = cls((), range_size=range_size)
        listed = tuple(consumers)
        check_consumers(listed, unique=True)
        selector._commit(listed, sorted((int(end), str(name)) for end, name in ends))
        return selector

    def _commit(self, consumers: tuple[KeySharedConsumer, ...], ends: EndKeys) -> None:
        index = {c.name: i for i, c in enumerate(consumers)}
        self._consumers, self._ends = consumers, ends
        self._end_array = np.array([end for end, _ in ends], dtype=np.int64)
        # a last -1 for slots above the highest end key (none once the top end key is range_size)
        self._end_owners = np.array([*(index.get(name, -1) for _, name in ends), -1], dtype=np.int32)

    def sticky_hashes(self, murmur31: npt.ArrayLike) -> npt.NDArray[np.int64]:
        return range_sticky_hashes(np.asarray(murmur31))

    def select_many(self, sticky_hashes: npt.NDArray[np.int64]) -> Owners:
        slots = np.asarray(sticky_hashes, dtype=np.int64) % self._range_size
        if len(self._end_array) == 0:
            return np.full(slots.shape, -1, dtype=np.int32)
        return self._end_owners[np.searchsorted(self._end_array, slots, side="left")]

    def ranges(self) -> dict[str, list[tuple[int, int]]]:
        """Each live consumer's range ``[end below + 1, end]`` (the lowest from 0), as Pulsar reports."""
        out: dict[str, list[tuple[int, int]]] = {c.name: [] for c in self._consumers}
        below = -1
        for end, name in self._ends:
            if name in out:
                out[name].append((below + 1, end))
            below = end
        return out


__all__ = [
    "DEFAULT_RANGE_SIZE",
    "AutoSplitHashRangeSelector",
    "EndKeys",
    "check_range_size",
    "end_keys_from_regions",
    "join",
    "leave",
]
