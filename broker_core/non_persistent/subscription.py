"""One subscription on a non-persistent internal topic: its connected consumers and the dispatch rule.

The subscription type decides which connected consumer gets each message (Exclusive and Failover:
the active one; Shared: round-robin by priority level; Key_Shared: the owner of the sticky key
hash).  Nothing is kept for a consumer that cannot take a message, so ``dispatch`` only counts
what it delivered and what it dropped.  It is called with the topic's lock held, so membership
and dispatch need no lock of their own.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from broker_core.errors import ConsumerBusy
from broker_core.message import Message
from broker_core.non_persistent.receiver import Receiver
from broker_core.subscription.cursor import ConsumerType
from broker_core.subscription.failover import FailoverConsumer, active_consumer
from broker_core.subscription.key_shared import (
    DEFAULT_RANGE_SIZE,
    KeySharedConsumer,
    KeySharedMode,
    KeySharedSelector,
    selector_for,
)

if TYPE_CHECKING:
    from broker_core.naming import TopicName


class SubscribedTopic(Protocol):
    """What a subscription knows of its topic (``NonPersistentTopic`` is one): its name and partition.

    The topic creates its subscriptions, so the subscription must not import the topic's module.
    """

    @property
    def name(self) -> TopicName:
        """The internal topic's name."""

    @property
    def partition(self) -> int:
        """The partition index, -1 unless the internal topic is a partition."""


@dataclass(slots=True)
class _Member:
    name: str
    join_order: int
    priority_level: int
    receiver: Receiver


class NonPersistentSubscription:
    """A subscription on one non-persistent internal topic: its connected consumers and dispatch.

    It exists while it has consumers: the last one leaving removes it (Pulsar's non-persistent
    subscriptions keep no state worth keeping), so the next consumer may choose another type.
    """

    def __init__(
        self,
        topic: SubscribedTopic,
        name: str,
        sub_type: ConsumerType,
        *,
        key_shared_mode: KeySharedMode,
        consistent_hashing: bool,
        points_per_consumer: int,
        range_size: int = DEFAULT_RANGE_SIZE,
    ) -> None:
        self.topic = topic
        self.name = name
        self.sub_type = sub_type
        self.key_shared_mode = key_shared_mode
        self._consistent = consistent_hashing
        self._points = points_per_consumer
        self._range_size = range_size
        self.members: dict[str, _Member] = {}
        self._next_join = 0
        self._selector: KeySharedSelector | None = None
        self._groups: list[list[_Member]] = []  # Shared: members by priority level, in join order
        self._round_robin: list[int] = []
        self._active: _Member | None = None  # Exclusive / Failover
        self.delivered = 0
        self.dropped = 0

    # -- membership (called with the topic lock held) ------------------------------------------------

    def join(
        self,
        consumer_name: str,
        sub_type: ConsumerType,
        receiver: Receiver,
        *,
        priority_level: int,
        key_shared_mode: KeySharedMode,
        sticky_ranges: tuple[tuple[int, int], ...],
    ) -> None:
        where = f"subscription {self.name!r} on {self.topic.name}"
        if consumer_name in self.members:
            raise ConsumerBusy(
                f"a consumer named {consumer_name!r} is already connected to {where}; consumer names "
                "must be unique per subscription",
                subscription=self.name,
            )
        if self.members and sub_type != self.sub_type:
            raise ConsumerBusy(
                f"{where} is {self.sub_type.name} with connected consumers; a {sub_type.name} consumer "
                "cannot join until they leave",
                subscription=self.name,
            )
        if self.members and sub_type == ConsumerType.Exclusive:
            raise ConsumerBusy(
                f"exclusive {where} already has consumer {next(iter(self.members))!r}",
                subscription=self.name,
            )
        if sub_type == ConsumerType.KeyShared and self.members and key_shared_mode != self.key_shared_mode:
            raise ConsumerBusy(
                f"Key_Shared {where} uses mode {self.key_shared_mode.name}; a consumer with mode "
                f"{key_shared_mode.name} cannot join",
                subscription=self.name,
            )
        member = _Member(consumer_name, self._next_join, priority_level, receiver)
        if sub_type == ConsumerType.KeyShared:
            joining = KeySharedConsumer(consumer_name, member.join_order, sticky_ranges)
            if self._selector is None:
                self._selector = selector_for(self.key_shared_mode, self._consistent, [joining],
                                              points_per_consumer=self._points, range_size=self._range_size)
            else:
                self._selector.add(joining)  # refuses (ConsumerBusy) without changing anything
        self._next_join += 1
        self.members[consumer_name] = member
        self._refresh()

    def leave(self, consumer_name: str) -> bool:
        """Disconnect a consumer; False if it was not connected."""
        if self.members.pop(consumer_name, None) is None:
            return False
        if self._selector is not None:
            self._selector.remove(consumer_name)  # AUTO_SPLIT: its range merges into a neighbour's
        self._refresh()
        return True

    def _refresh(self) -> None:
        members = list(self.members.values())  # insertion order is join order
        levels = sorted({m.priority_level for m in members})
        self._groups = [[m for m in members if m.priority_level == level] for level in levels]
        self._round_robin = [0] * len(self._groups)
        self._active = None
        if self.sub_type == ConsumerType.Exclusive and members:
            self._active = members[0]
        elif self.sub_type == ConsumerType.Failover and members:
            name = active_consumer(
                [FailoverConsumer(m.name, m.priority_level, m.join_order) for m in members],
                partition_index=max(self.topic.partition, 0),
                partitioned=self.topic.partition >= 0,
                topic_name=str(self.topic.name),
            )
            self._active = self.members.get(name) if name is not None else None

    def active_consumer_name(self) -> str | None:
        """Exclusive / Failover: the consumer that receives this topic's messages now."""
        return None if self._active is None else self._active.name

    # -- dispatch (called with the topic lock held) ------------------------------------------------

    def dispatch(self, message: Message) -> bool:
        """Hand ``message`` to the consumer the subscription type picks; False if it was dropped."""
        if self.sub_type in (ConsumerType.Exclusive, ConsumerType.Failover):
            ok = self._active is not None and self._offer(self._active, message)
        elif self.sub_type == ConsumerType.Shared:
            ok = self._dispatch_shared(message)
        else:
            owner = None if self._selector is None else self._selector.owner(message._sticky_key_hash)
            member = None if owner is None else self.members.get(owner)
            ok = member is not None and self._offer(member, message)
        if ok:
            self.delivered += 1
        else:
            self.dropped += 1
        return ok

    def _dispatch_shared(self, message: Message) -> bool:
        # Highest priority (smallest level) first; round-robin inside a level; a consumer without
        # room is skipped, as Pulsar skips consumers without permits.
        for level, group in enumerate(self._groups):
            start = self._round_robin[level]
            for step in range(len(group)):
                at = (start + step) % len(group)
                if self._offer(group[at], message):
                    self._round_robin[level] = (at + 1) % len(group)
                    return True
        return False

    @staticmethod
    def _offer(member: _Member, message: Message) -> bool:
        return member.receiver.offer(copy.copy(message))


__all__ = ["NonPersistentSubscription"]
