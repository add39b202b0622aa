"""Failover subscriptions: which one of the connected consumers is active on a topic or partition.

Consumers in different processes must agree on the active consumer from the cursor's consumer list
alone, so the choice is a pure function of that list: it does not depend on the order the list
happens to be stored in, only on each consumer's priority, name and join order.

Pulsar's rules:

- Only consumers of the highest priority are candidates; a smaller ``priority_level`` is a higher
  priority (0 is the highest), as in the consumer builder's ``priority_level``.
- Partitioned topic: candidates are sorted by name and partition ``i`` goes to candidate
  ``i % len(candidates)``, which spreads the partitions evenly over them.
- Non-partitioned topic: the candidate that subscribed first (smallest ``join_order``) is active;
  the rest stand by in subscription order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from broker_core.errors import InvalidConfiguration


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class FailoverConsumer:
    """One connected consumer of a Failover subscription.

    Attributes:
        name: the consumer name; it orders the candidates of a partitioned topic.
        priority_level: smaller is preferred; only consumers at the smallest level are candidates.
        join_order: when it subscribed relative to the others (smaller = earlier); it picks the
            active consumer of a non-partitioned topic.
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


def _candidates(consumers: Iterable[FailoverConsumer]) -> list[FailoverConsumer]:
    """The consumers at the highest priority (smallest ``priority_level``)."""
    pool = list(consumers)
    for consumer in pool:
        if not isinstance(consumer, FailoverConsumer):
            raise InvalidConfiguration(
                f"expected FailoverConsumer, got {type(consumer).__name__} {consumer!r}"
            )
    if not pool:
        return []
    best = min(c.priority_level for c in pool)
    return [c for c in pool if c.priority_level == best]


def active_consumer(
    consumers: Iterable[FailoverConsumer], *, partition_index: int, partitioned: bool
) -> str | None:
    """Name of the consumer that receives the messages of one topic or partition.

    Args:
        consumers: the connected consumers, in any order.
        partition_index: the partition's index (ignored when ``partitioned`` is False).
        partitioned: whether the topic is partitioned; a non-partitioned topic always goes to the
            earliest subscriber among the highest-priority consumers.

    Returns:
        The active consumer's name, or None when no consumer is connected.

    Raises:
        InvalidConfiguration: ``partition_index`` is negative or not an int for a partitioned topic.
    """
    if partitioned and (not _is_int(partition_index) or partition_index < 0):
        raise InvalidConfiguration(f"partition_index must be an int >= 0, got {partition_index!r}")
    candidates = _candidates(consumers)
    if not candidates:
        return None
    if not partitioned:
        return min(candidates, key=lambda c: (c.join_order, c.name)).name
    # join_order only breaks ties between equal names, so the choice never depends on input order.
    ordered = sorted(candidates, key=lambda c: (c.name, c.join_order))
    return ordered[partition_index % len(ordered)].name


__all__ = ["FailoverConsumer", "active_consumer"]
