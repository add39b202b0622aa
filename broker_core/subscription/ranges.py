"""Sets of offsets as sorted, disjoint, half-open ranges (acked messages, claims).

Cursors persist these as JSON lists ``[[start, end], ...]``; membership over whole arrays of offsets
is vectorised with ``numpy.searchsorted`` because dispatch filters thousands of offsets at a time.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

import numpy as np


class RangeSet:
    """Sorted disjoint half-open ranges ``[start, end)`` of non-negative ints."""

    __slots__ = ("_ends", "_starts")

    def __init__(self, ranges: Iterable[Iterable[int]] = ()) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        for pair in ranges:
            start, end = pair
            self.add(int(start), int(end))

    # -- mutation -------------------------------------------------------------------------------------

    def add(self, start: int, end: int) -> None:
        """Add ``[start, end)``, merging with touching or overlapping ranges."""
        if end <= start:
            return
        i = bisect.bisect_left(self._ends, start)  # first range that ends at or after start
        j = bisect.bisect_right(self._starts, end)  # ranges starting after end stay
        if i < j:
            start = min(start, self._starts[i])
            end = max(end, self._ends[j - 1])
        self._starts[i:j] = [start]
        self._ends[i:j] = [end]

    def add_offsets(self, offsets: Iterable[int] | np.ndarray) -> None:
        """Add single offsets (each run of consecutive offsets is one ``add``)."""
        for s, e in _runs(offsets):
            self.add(s, e)

    def remove(self, start: int, end: int) -> None:
        """Remove ``[start, end)``."""
        if end <= start:
            return
        out_s: list[int] = []
        out_e: list[int] = []
        i = bisect.bisect_right(self._ends, start)
        j = bisect.bisect_left(self._starts, end)
        for s, e in zip(self._starts[i:j], self._ends[i:j], strict=True):
            if s < start:
                out_s.append(s)
                out_e.append(start)
            if e > end:
                out_s.append(end)
                out_e.append(e)
        self._starts[i:j] = out_s
        self._ends[i:j] = out_e

    def remove_offsets(self, offsets: Iterable[int] | np.ndarray) -> None:
        """Remove single offsets (each run of consecutive offsets is one ``remove``)."""
        if not self._starts:
            return
        for s, e in _runs(offsets):
            self.remove(s, e)

    def remove_below(self, floor: int) -> None:
        """Drop everything below ``floor``."""
        self.remove(min(self._starts[0], floor) if self._starts else floor, floor)

    # -- queries --------------------------------------------------------------------------------------

    def __contains__(self, offset: int) -> bool:
        i = bisect.bisect_right(self._starts, offset) - 1
        return i >= 0 and offset < self._ends[i]

    def contains_array(self, offsets: np.ndarray) -> np.ndarray:
        """Vectorised membership of each offset."""
        if not self._starts:
            return np.zeros(len(offsets), dtype=bool)
        starts = np.asarray(self._starts, dtype=np.int64)
        ends = np.asarray(self._ends, dtype=np.int64)
        i = np.searchsorted(starts, offsets, side="right") - 1
        ok = i >= 0
        result = np.zeros(len(offsets), dtype=bool)
        result[ok] = offsets[ok] < ends[i[ok]]
        return result

    def count(self) -> int:
        return sum(e - s for s, e in zip(self._starts, self._ends, strict=True))

    def first_start(self) -> int | None:
        return self._starts[0] if self._starts else None

    def offsets(self) -> Iterator[int]:
        for s, e in zip(self._starts, self._ends, strict=True):
            yield from range(s, e)

    def to_json(self) -> list[list[int]]:
        return [[s, e] for s, e in zip(self._starts, self._ends, strict=True)]

    def copy(self) -> RangeSet:
        other = RangeSet()
        other._starts = list(self._starts)
        other._ends = list(self._ends)
        return other

    def __bool__(self) -> bool:
        return bool(self._starts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RangeSet) and self.to_json() == other.to_json()

    def __repr__(self) -> str:
        return f"RangeSet({self.to_json()})"


def _runs(offsets: Iterable[int] | np.ndarray) -> list[tuple[int, int]]:
    """The distinct offsets as half-open runs ``[start, end)``, in order: acks come in long runs.

    Acknowledgments one by one arrive in the order received, ascending: such an array is already
    distinct and sorted, and one ``diff`` says so, where ``np.unique`` (a hash pass, then a sort) was
    three quarters of the ack thread's CPU while consuming a backlog (D112)."""
    arr = offsets if isinstance(offsets, np.ndarray) else np.fromiter(offsets, dtype=np.int64)
    arr = arr.astype(np.int64, copy=False)
    steps = np.diff(arr)
    if not (steps > 0).all():  # out of order or repeated: sort and deduplicate first
        arr = np.unique(arr)
        steps = np.diff(arr)
    if not len(arr):
        return []
    breaks = np.nonzero(steps != 1)[0]
    starts = np.concatenate(([arr[0]], arr[breaks + 1]))
    ends = np.concatenate((arr[breaks], [arr[-1]])) + 1
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


__all__ = ["RangeSet"]
