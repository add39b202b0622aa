"""Pulsar's ``STICKY`` Key_Shared selector: consumers declare exclusive hash ranges themselves.

Ranges are inclusive ``[start, end]`` within ``0 .. 65535`` and must not overlap, within one
consumer or across consumers; a consumer that declares none, or one that overlaps, is refused and
the selector stays as it was.  A message's sticky hash is ``h % 65536`` with 0 moved to 1 (as for
auto-split), and a hash no range covers belongs to nobody: its messages are held back until some
consumer covers it, never handed to someone else.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from broker_core.errors import ConsumerAssignError, InvalidConfiguration
from broker_core.hashing.keys import range_sticky_hashes
from broker_core.subscription.key_shared.base import (
    HASH_RANGE_SIZE,
    KeySharedConsumer,
    KeySharedSelector,
    Owners,
    check_consumers,
    merge_adjacent,
)


class StickySelector(KeySharedSelector):
    """Exclusive declared ranges (see the module docstring)."""

    _starts = np.zeros(0, dtype=np.int64)
    _range_ends = np.zeros(0, dtype=np.int64)
    _owners = np.zeros(0, dtype=np.int32)

    def _rebuild(self, consumers: tuple[KeySharedConsumer, ...]) -> None:
        check_consumers(consumers, unique=True)
        regions: list[tuple[int, int, int]] = []
        for index, consumer in enumerate(consumers):
            if not consumer.sticky_ranges:
                raise InvalidConfiguration(
                    f"Key_Shared STICKY consumer {consumer.name!r} declared no hash ranges; give it "
                    f"sticky_ranges of inclusive (start, end) hashes within 0..{HASH_RANGE_SIZE - 1}"
                )
            for start, end in consumer.sticky_ranges:
                if not 0 <= start <= end < HASH_RANGE_SIZE:
                    raise InvalidConfiguration(
                        f"Key_Shared STICKY consumer {consumer.name!r} has range [{start}, {end}]; ranges "
                        f"need 0 <= start <= end <= {HASH_RANGE_SIZE - 1}"
                    )
                regions.append((start, end, index))
        regions.sort()
        _check_disjoint(consumers, regions)
        self._consumers = consumers
        self._starts = np.array([r[0] for r in regions], dtype=np.int64)
        self._range_ends = np.array([r[1] for r in regions], dtype=np.int64)
        self._owners = np.array([r[2] for r in regions], dtype=np.int32)

    def sticky_hashes(self, murmur31: npt.ArrayLike) -> npt.NDArray[np.int64]:
        return range_sticky_hashes(np.asarray(murmur31))

    def select_many(self, sticky_hashes: npt.NDArray[np.int64]) -> Owners:
        hashes = np.asarray(sticky_hashes, dtype=np.int64)
        if len(self._starts) == 0:
            return np.full(hashes.shape, -1, dtype=np.int32)
        at = np.maximum(np.searchsorted(self._starts, hashes, side="right") - 1, 0)
        inside = (hashes >= self._starts[at]) & (hashes <= self._range_ends[at])
        return np.where(inside, self._owners[at], np.int32(-1)).astype(np.int32, copy=False)

    def ranges(self) -> dict[str, list[tuple[int, int]]]:
        """Each consumer's declared inclusive ranges, sorted (touching ones joined)."""
        return {c.name: merge_adjacent(c.sticky_ranges) for c in self._consumers}


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


__all__ = ["StickySelector"]
