"""Failover subscriptions: which one of the connected consumers is active on a topic or partition.

Consumers in different processes must agree on the active consumer from the cursor's consumer list
alone, so the choice is a pure function of that list and the topic: it does not depend on the order
the list happens to be stored in.

Pulsar 4.x's rules:

- Consumers are sorted by priority level (0, the highest priority, first), then by name; only those
  at the best level are candidates.
- Partitioned topic: partition ``p`` goes to candidate ``p % len(candidates)``, which spreads the
  partitions evenly over them.
- Non-partitioned topic: each candidate ``name`` marks 100 points ``murmur3_32(name + str(j))``
  (31-bit, ``j`` in 0..99) on a ring, candidates in sorted order (a later one takes over a point an
  earlier one marked).  The active consumer owns the first point at or above
  ``murmur3_32(topic name)``, wrapping to the lowest point, so the non-partitioned topics a group of
  consumers share are spread over them by name.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable
from dataclasses import dataclass

from broker_core.errors import InvalidConfiguration
from broker_core.hashing.keys import murmur3_32_hash

RING_POINTS_PER_CONSUMER = 100


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class FailoverConsumer:
    """One connected consumer of a Failover subscription.

    Attributes:
        name: the consumer name; it orders the candidates and places them on the ring.
        priority_level: smaller is preferred; only consumers at the smallest level are candidates.
        join_order: when it subscribed relative to the others; it only breaks ties between equal
            names, which a cursor never has.
    """

    name: str
    priority_level: int
    join_order: int

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidConfiguration(f"failover consumer name must be a non-empty str, got {self.name!r}")
        if not _is_int(self.priority_level) or self.priority_level < 0:
            raise InvalidConfiguration(
                f"priority_level of consumer {self.name!r} must be an int >= 0, got {self.priority_level!r}"
            )
        if not _is_int(self.join_order):
            raise InvalidConfiguration(
                f"join_order of consumer {self.name!r} must be an int, got {self.join_order!r}"
            )


def candidates(consumers: Iterable[FailoverConsumer]) -> list[FailoverConsumer]:
    """The consumers at the best priority level, sorted by name (Pulsar's consumer order)."""
    pool = list(consumers)
    for consumer in pool:
        if not isinstance(consumer, FailoverConsumer):
            raise InvalidConfiguration(
                f"expected FailoverConsumer, got {type(consumer).__name__} {consumer!r}"
            )
    if not pool:
        return []
    best = min(c.priority_level for c in pool)
    return sorted((c for c in pool if c.priority_level == best), key=lambda c: (c.name, c.join_order))


@functools.lru_cache(maxsize=4096)
def _points(name: str) -> tuple[int, ...]:
    return tuple(murmur3_32_hash(f"{name}{j}") for j in range(RING_POINTS_PER_CONSUMER))


def ring_index(names: list[str], topic_name: str) -> int:
    """Index into ``names`` of the consumer owning ``topic_name`` on the failover hash ring."""
    ring: dict[int, int] = {}
    for index, name in enumerate(names):
        for point in _points(name):
            ring[point] = index  # a later consumer overwrites an earlier one's colliding point
    points = sorted(ring)
    at = bisect.bisect_left(points, murmur3_32_hash(topic_name))
    return ring[points[at % len(points)]]


def active_consumer(
    consumers: Iterable[FailoverConsumer],
    *,
    partition_index: int,
    partitioned: bool,
    topic_name: str = "",
) -> str | None:
    """Name of the consumer that receives the messages of one topic or partition.

    Args:
        consumers: the connected consumers, in any order.
        partition_index: the partition's index (ignored when ``partitioned`` is False).
        partitioned: whether the topic is partitioned.
        topic_name: the full topic name (``persistent://tenant/ns/topic``), hashed onto the ring
            for a non-partitioned topic.

    Returns:
        The active consumer's name, or None when no consumer is connected.

    Raises:
        InvalidConfiguration: ``partition_index`` is negative or not an int for a partitioned topic,
            or ``topic_name`` is not a str.
    """
    if partitioned and (not _is_int(partition_index) or partition_index < 0):
        raise InvalidConfiguration(f"partition_index must be an int >= 0, got {partition_index!r}")
    if not isinstance(topic_name, str):
        raise InvalidConfiguration(f"topic_name must be a str, got {type(topic_name).__name__} {topic_name!r}")
    ordered = candidates(consumers)
    if not ordered:
        return None
    if partitioned:
        return ordered[partition_index % len(ordered)].name
    return ordered[ring_index([c.name for c in ordered], topic_name)].name


__all__ = ["RING_POINTS_PER_CONSUMER", "FailoverConsumer", "active_consumer", "candidates", "ring_index"]
