"""Pulsar 4.x's consistent-hashing Key_Shared selector (AUTO_SPLIT's default mapping in 4.x).

The ring holds sticky hashes ``1 .. 65535``.  Each consumer marks ``replica_points`` points; its
point ``i`` (from 0) is the consistent sticky hash of ``f"{name}\\0{name_index}\\0{i}"``, where
``name_index`` is the smallest index no other connected consumer of the same name holds (so
same-named consumers do not land on the same points, and one that leaves and comes back gets its
points back).  A message goes to the first point at or above its sticky hash, wrapping to the
lowest.  When points collide, the consumer that arrived first keeps the point and the others wait
behind it in arrival order, each taking over when the ones before it leave.  A join or a leave
therefore moves only the keys of the consumer that comes or goes.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from broker_core.errors import InvalidConfiguration
from broker_core.hashing.keys import (
    CONSISTENT_HASH_MAX,
    consistent_sticky_hash,
    consistent_sticky_hashes,
    murmur3_32_hash,
)
from broker_core.subscription.key_shared.base import (
    KeySharedConsumer,
    KeySharedSelector,
    Owners,
    check_consumers,
    is_int,
    merge_adjacent,
)

DEFAULT_POINTS_PER_CONSUMER = 100
"""``subscriptionKeySharedConsistentHashingReplicaPoints``'s default."""


@functools.lru_cache(maxsize=8192)
def ring_points(name: str, name_index: int, count: int) -> tuple[int, ...]:
    """The ``count`` ring points of consumer ``name`` with ``name_index``, in point order."""
    return tuple(consistent_sticky_hash(murmur3_32_hash(f"{name}\0{name_index}\0{i}")) for i in range(count))


def _free_index(used: Iterable[int]) -> int:
    taken = set(used)
    index = 0
    while index in taken:
        index += 1
    return index


class ConsistentHashingSelector(KeySharedSelector):
    """Consistent hashing over the ring ``1 .. 65535`` (see the module docstring).

    Consumer names may repeat here (Pulsar allows it; a cursor does not), each occurrence getting
    its own ``name_index``.  Building from a list replays the arrivals in ``join_order``; ``add`` and
    ``remove`` keep the name indices of the consumers that stay.
    """

    def __init__(
        self,
        consumers: Iterable[KeySharedConsumer] = (),
        *,
        points_per_consumer: int = DEFAULT_POINTS_PER_CONSUMER,
    ) -> None:
        if not is_int(points_per_consumer) or points_per_consumer < 1:
            raise InvalidConfiguration(
                f"points_per_consumer (subscriptionKeySharedConsistentHashingReplicaPoints) must be an "
                f"int >= 1, got {points_per_consumer!r}"
            )
        self._points_per_consumer = points_per_consumer
        self._name_indexes: tuple[int, ...] = ()
        super().__init__(consumers)

    # -- membership ---------------------------------------------------------------------------------

    def _rebuild(self, consumers: tuple[KeySharedConsumer, ...]) -> None:
        check_consumers(consumers, unique=False)
        indexes: dict[int, int] = {}
        by_name: dict[str, list[int]] = {}
        for position in self._arrival(consumers):
            name = consumers[position].name
            indexes[position] = _free_index(by_name.get(name, []))
            by_name.setdefault(name, []).append(indexes[position])
        self._commit(consumers, tuple(indexes[p] for p in range(len(consumers))))

    def add(self, consumer: KeySharedConsumer) -> None:
        """Connect ``consumer`` with the smallest name index its name has free."""
        check_consumers([consumer], unique=False)
        used = (i for c, i in zip(self._consumers, self._name_indexes, strict=True) if c.name == consumer.name)
        self._commit((*self._consumers, consumer), (*self._name_indexes, _free_index(used)))

    def remove(self, name: str) -> bool:
        """Disconnect the consumers of that name; the others keep their name indices and points."""
        kept = [(c, i) for c, i in zip(self._consumers, self._name_indexes, strict=True) if c.name != name]
        if len(kept) == len(self._consumers):
            return False
        self._commit(tuple(c for c, _ in kept), tuple(i for _, i in kept))
        return True

    def remove_consumer(self, consumer: KeySharedConsumer) -> bool:
        """Disconnect one consumer (same name and join order); the others keep their points."""
        kept = [(c, i) for c, i in zip(self._consumers, self._name_indexes, strict=True) if c != consumer]
        if len(kept) == len(self._consumers):
            return False
        self._commit(tuple(c for c, _ in kept), tuple(i for _, i in kept))
        return True

    @staticmethod
    def _arrival(consumers: tuple[KeySharedConsumer, ...]) -> list[int]:
        return sorted(range(len(consumers)), key=lambda p: (consumers[p].join_order, p))

    def _commit(self, consumers: tuple[KeySharedConsumer, ...], name_indexes: tuple[int, ...]) -> None:
        ring: dict[int, int] = {}  # point -> index of the consumer holding it (the earliest arrival)
        for position in self._arrival(consumers):
            for point in ring_points(consumers[position].name, name_indexes[position], self._points_per_consumer):
                ring.setdefault(point, position)
        points = sorted(ring)
        self._consumers, self._name_indexes = consumers, name_indexes
        self._points = np.array(points, dtype=np.int64)
        self._point_owners = np.array([ring[p] for p in points], dtype=np.int32)
        # one more slot for "past the highest point", which wraps to the lowest point's owner
        self._wrapped_owners = np.append(self._point_owners, self._point_owners[:1]).astype(np.int32)

    @property
    def name_indexes(self) -> tuple[int, ...]:
        """Each consumer's name index, parallel to ``consumers``."""
        return self._name_indexes

    # -- lookup -------------------------------------------------------------------------------------

    def sticky_hashes(self, murmur31: npt.ArrayLike) -> npt.NDArray[np.int64]:
        return consistent_sticky_hashes(np.asarray(murmur31))

    def select_many(self, sticky_hashes: npt.NDArray[np.int64]) -> Owners:
        hashes = np.asarray(sticky_hashes, dtype=np.int64)
        if len(self._points) == 0:
            return np.full(hashes.shape, -1, dtype=np.int32)
        return self._wrapped_owners[np.searchsorted(self._points, hashes, side="left")]

    def points(self) -> dict[str, list[int]]:
        """The ring points each consumer name marked (held or queued), sorted."""
        out: dict[str, set[int]] = {}
        for consumer, index in zip(self._consumers, self._name_indexes, strict=True):
            out.setdefault(consumer.name, set()).update(
                ring_points(consumer.name, index, self._points_per_consumer)
            )
        return {name: sorted(points) for name, points in out.items()}

    def ranges(self) -> dict[str, list[tuple[int, int]]]:
        """Sticky-hash ranges per consumer name, as Pulsar reports them.

        Each held point owns from the previous point + 1 up to itself (the lowest point from 1);
        the hashes above the highest point belong to the lowest point's consumer; adjacent ranges of
        one consumer are merged.
        """
        spans: dict[str, list[tuple[int, int]]] = {c.name: [] for c in self._consumers}
        if len(self._points) == 0:
            return spans
        points = self._points.tolist()
        owners = self._point_owners.tolist()
        previous = 0
        for point, owner in zip(points, owners, strict=True):
            spans[self._consumers[owner].name].append((previous + 1, point))
            previous = point
        if previous < CONSISTENT_HASH_MAX:
            spans[self._consumers[owners[0]].name].append((previous + 1, CONSISTENT_HASH_MAX))
        return {name: merge_adjacent(found) for name, found in spans.items()}


__all__ = ["DEFAULT_POINTS_PER_CONSUMER", "ConsistentHashingSelector", "ring_points"]
