"""Non-persistent topics: in-memory dispatch inside one process, with Pulsar's subscription rules.

A ``non-persistent://`` topic is never written to storage.  There is no broker process to relay
through either, so a non-persistent topic exists only inside the process that uses it: every
``Client`` of one storage root in a process shares one ``NonPersistentRegistry`` (keyed by the
root's URI), and a published message reaches the consumers and readers that are connected to the
topic *in this process at the moment it is published*.  Another process using the same topic name
has a different topic; the two never see each other's messages.

What a ``publish`` does, as a Pulsar broker does for a non-persistent topic:

- every subscription with connected consumers gets the message once, per its type:
  Exclusive (the one consumer), Failover (the active consumer of this partition, chosen by
  ``broker_core.failover.active_consumer``), Shared (round-robin over the connected consumers of
  the highest priority level that has room), Key_Shared (the owner of the message's sticky key
  hash, from ``broker_core.key_shared``: AUTO_SPLIT ranges split and merged as consumers join and
  leave, consistent hashing, or STICKY ranges);
- every connected reader gets it;
- a subscription without consumers, a consumer whose receiver queue is full, and a Key_Shared hash
  nobody owns all *drop* the message (counted in ``stats()``); nothing is kept for later.

Message ids are ``(ledger 0, entry n, partition, batch -1)``: ``n`` counts the messages published
to this internal topic in this process since it was first used (topic objects are never discarded,
so an id is never reused within a process).  Ids are not meaningful in another process.

This module is the "broker" half: it knows nothing about the client classes, which connect through
the ``Receiver`` protocol (``offer`` a message without blocking; refuse it when full).
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from broker_core.cursor import ConsumerType
from broker_core.errors import ConsumerBusy, InvalidConfiguration, ProducerBusy, ProducerFenced
from broker_core.failover import FailoverConsumer, active_consumer
from broker_core.hashing import sticky_key_hash
from broker_core.key_shared import (
    DEFAULT_POINTS_PER_CONSUMER,
    KeySharedConsumer,
    KeySharedMode,
    KeySharedSelector,
    selector_for,
)
from broker_core.message import Message
from broker_core.message_id import MessageId
from broker_core.naming import NamespaceName, TopicName
from broker_core.producer_registry import ProducerAccessMode

NON_PERSISTENT_LEDGER_ID = 0
"""The ledger id of every non-persistent message id (entry ids count messages per topic)."""

_WAIT_POLL_S = 0.05  # how often a WaitForExclusive producer re-checks whether it should give up


class Receiver(Protocol):
    """A connected consumer or reader, as the dispatcher sees it."""

    def offer(self, message: Message) -> bool:
        """Take ``message`` (a copy of its own) into the receiver queue without blocking.

        Returns False when the queue is full or the receiver is closing: the message is dropped.
        Called with the topic's lock held, so it must not call back into the topic.
        """
        ...


@dataclass(slots=True)
class ProducerToken:
    """A producer's registration on one non-persistent topic.

    Attributes:
        name: the producer name (unique per topic).
        access_mode: the mode it registered with.
        fenced: set when an ``ExclusiveWithFencing`` producer took the topic over; every later
            publish with this token fails with ``ProducerFenced``.
    """

    name: str
    access_mode: ProducerAccessMode
    fenced: bool = False


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
        topic: NonPersistentTopic,
        name: str,
        sub_type: ConsumerType,
        *,
        key_shared_mode: KeySharedMode,
        consistent_hashing: bool,
        points_per_consumer: int,
    ) -> None:
        self.topic = topic
        self.name = name
        self.sub_type = sub_type
        self.key_shared_mode = key_shared_mode
        self._consistent = consistent_hashing
        self._points = points_per_consumer
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
                                              points_per_consumer=self._points)
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


class NonPersistentTopic:
    """One non-persistent internal topic (a partition, or a non-partitioned topic) in this process."""

    def __init__(self, name: TopicName) -> None:
        if name.is_persistent:
            raise InvalidConfiguration(
                f"{name} is persistent; it has a log on storage, not an in-memory topic", topic=str(name)
            )
        self.name = name
        self.partition = name.partition_index  # -1 unless the internal topic is a partition
        self._cond = threading.Condition()
        self._next_entry = 0
        self._subscriptions: dict[str, NonPersistentSubscription] = {}
        self._readers: dict[int, Receiver] = {}
        self._reader_ids = itertools.count()
        self._producers: dict[str, ProducerToken] = {}
        self.published = 0
        self.reader_drops = 0

    # -- producers ---------------------------------------------------------------------------------

    def add_producer(
        self, name: str, access_mode: ProducerAccessMode, *, keep_waiting: Callable[[], bool] | None = None
    ) -> ProducerToken:
        """Register a producer under Pulsar's access-mode rules (within this process).

        Args:
            name: producer name, unique per topic.
            access_mode: Shared (refused while an exclusive producer holds the topic), Exclusive
                (refused while any other producer is connected), WaitForExclusive (waits for the
                others to leave while ``keep_waiting()`` is true) or ExclusiveWithFencing (fences
                every other producer).

        Raises:
            ProducerBusy: the name is taken, or the mode's rule refuses the registration.
        """
        with self._cond:
            while True:
                if name in self._producers:
                    raise ProducerBusy(
                        f"a producer named {name!r} is already connected to {self.name}; producer names "
                        "must be unique per topic",
                        topic=str(self.name),
                    )
                others = list(self._producers.values())
                holder = next((p for p in others if p.access_mode != ProducerAccessMode.Shared), None)
                if access_mode == ProducerAccessMode.ExclusiveWithFencing:
                    for other in others:
                        other.fenced = True
                    self._producers.clear()
                    break
                if access_mode == ProducerAccessMode.Shared and holder is None:
                    break
                if access_mode != ProducerAccessMode.Shared and not others:
                    break
                waiting = access_mode == ProducerAccessMode.WaitForExclusive
                if not waiting or keep_waiting is None or not keep_waiting():
                    who = holder.name if holder is not None else ", ".join(p.name for p in others)
                    raise ProducerBusy(
                        f"{self.name} is held by producer(s) {who}; a {access_mode.name} producer "
                        f"{name!r} cannot connect now",
                        topic=str(self.name),
                    )
                self._cond.wait(timeout=_WAIT_POLL_S)
            token = ProducerToken(name, access_mode)
            self._producers[name] = token
            return token

    def remove_producer(self, token: ProducerToken) -> None:
        with self._cond:
            if self._producers.get(token.name) is token:
                del self._producers[token.name]
                self._cond.notify_all()

    def publish(
        self,
        token: ProducerToken,
        *,
        value: bytes | None,
        key: str | None = None,
        ordering_key: bytes | None = None,
        properties: dict[str, str] | None = None,
        sequence_id: int,
        publish_time_ms: int,
        event_time_ms: int | None = None,
    ) -> MessageId:
        """Deliver one message to every connected subscription and reader; return its id.

        Raises:
            ProducerFenced: an ``ExclusiveWithFencing`` producer took the topic over.
        """
        with self._cond:
            if token.fenced:
                raise ProducerFenced(
                    f"producer {token.name!r} was fenced on {self.name} by an ExclusiveWithFencing producer",
                    topic=str(self.name),
                )
            entry = self._next_entry
            self._next_entry += 1
            msg_id = MessageId(partition=self.partition, ledger_id=NON_PERSISTENT_LEDGER_ID, entry_id=entry,
                               batch_index=-1)
            message = Message(
                _data=value, _key=key, _ordering_key=ordering_key, _properties=dict(properties or {}),
                _producer_name=token.name, _sequence_id=sequence_id, _publish_time_ms=publish_time_ms,
                _event_time_ms=event_time_ms or 0, _deliver_at_ms=None, _schema_version=None,
                _message_id=msg_id, _topic=str(self.name), _offset=entry,
                _sticky_key_hash=sticky_key_hash(ordering_key, key),
            )
            self.published += 1
            for subscription in self._subscriptions.values():
                subscription.dispatch(message)
            for receiver in self._readers.values():
                if not receiver.offer(copy.copy(message)):
                    self.reader_drops += 1
            return msg_id

    # -- subscriptions -----------------------------------------------------------------------------

    def subscribe(
        self,
        subscription: str,
        consumer_name: str,
        sub_type: ConsumerType,
        receiver: Receiver,
        *,
        priority_level: int = 0,
        key_shared_mode: KeySharedMode = KeySharedMode.AutoSplit,
        consistent_hashing: bool = False,
        points_per_consumer: int = DEFAULT_POINTS_PER_CONSUMER,
        sticky_ranges: Iterable[tuple[int, int]] = (),
    ) -> None:
        """Connect a consumer to ``subscription`` (created if it has no consumers yet).

        Raises:
            ConsumerBusy: Exclusive with a consumer connected, a type or Key_Shared mode mismatch
                with the connected consumers, a duplicate consumer name, or a STICKY range overlap.
        """
        with self._cond:
            sub = self._subscriptions.get(subscription)
            fresh = sub is None
            if sub is None:
                sub = NonPersistentSubscription(
                    self, subscription, sub_type, key_shared_mode=key_shared_mode,
                    consistent_hashing=consistent_hashing, points_per_consumer=points_per_consumer,
                )
            sub.join(consumer_name, sub_type, receiver, priority_level=priority_level,
                     key_shared_mode=key_shared_mode, sticky_ranges=tuple(tuple(r) for r in sticky_ranges))  # type: ignore[misc]
            if fresh:
                self._subscriptions[subscription] = sub

    def leave(self, subscription: str, consumer_name: str) -> None:
        """Disconnect a consumer; the subscription disappears with its last consumer."""
        with self._cond:
            sub = self._subscriptions.get(subscription)
            if sub is not None and sub.leave(consumer_name) and not sub.members:
                del self._subscriptions[subscription]

    def other_consumers(self, subscription: str, consumer_name: str) -> list[str]:
        """The consumers of ``subscription`` other than ``consumer_name``."""
        with self._cond:
            return self._others(subscription, consumer_name)

    def _others(self, subscription: str, consumer_name: str) -> list[str]:
        sub = self._subscriptions.get(subscription)
        return [] if sub is None else [n for n in sub.members if n != consumer_name]

    def unsubscribe(self, subscription: str, consumer_name: str) -> None:
        """Delete the subscription.

        Raises:
            ConsumerBusy: other consumers are still connected to it.
        """
        with self._cond:
            others = self._others(subscription, consumer_name)
            if others:
                raise ConsumerBusy(
                    f"cannot unsubscribe {subscription!r} on {self.name}: consumers {others} are still "
                    "connected",
                    subscription=subscription,
                )
            self._subscriptions.pop(subscription, None)

    def redeliver(self, subscription: str, messages: Iterable[Message]) -> int:
        """Dispatch messages again on one subscription (nack, ack timeout, redeliver), each with its
        redelivery count raised by one; returns how many found a consumer (the rest are dropped)."""
        delivered = 0
        with self._cond:
            sub = self._subscriptions.get(subscription)
            for msg in messages:
                again = copy.copy(msg)
                again._redelivery_count = msg._redelivery_count + 1
                again._source = -1
                again._schema = None
                if sub is None:
                    continue
                delivered += sub.dispatch(again)
        return delivered

    # -- readers -----------------------------------------------------------------------------------

    def add_reader(self, receiver: Receiver) -> int:
        """Connect a reader; it gets every message published from now on. Returns its token."""
        with self._cond:
            token = next(self._reader_ids)
            self._readers[token] = receiver
            return token

    def remove_reader(self, token: int) -> None:
        with self._cond:
            self._readers.pop(token, None)

    # -- introspection -----------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters and connections, shaped after Pulsar's non-persistent topic stats."""
        with self._cond:
            return {
                "msgInCounter": self.published,
                "producers": sorted(self._producers),
                "readers": len(self._readers),
                "readerMsgDropCount": self.reader_drops,
                "subscriptions": {
                    name: {
                        "type": sub.sub_type.name,
                        "consumers": list(sub.members),
                        "activeConsumer": sub.active_consumer_name(),
                        "msgOutCounter": sub.delivered,
                        "msgDropCount": sub.dropped,
                    }
                    for name, sub in self._subscriptions.items()
                },
            }


class NonPersistentRegistry:
    """The non-persistent topics of one storage root in this process."""

    def __init__(self, root_uri: str) -> None:
        self.root_uri = root_uri
        self._lock = threading.Lock()
        self._topics: dict[TopicName, NonPersistentTopic] = {}

    def topic(self, name: TopicName) -> NonPersistentTopic:
        """The topic object of an internal topic, created on first use and kept for the process."""
        with self._lock:
            topic = self._topics.get(name)
            if topic is None:
                topic = NonPersistentTopic(name)
                self._topics[name] = topic
            return topic

    def get(self, name: TopicName) -> NonPersistentTopic | None:
        """The topic object if it was used in this process, else None."""
        with self._lock:
            return self._topics.get(name)

    def topics(self, namespace: NamespaceName | None = None) -> list[TopicName]:
        """Internal topics used in this process (optionally of one namespace), sorted by name."""
        with self._lock:
            names = list(self._topics)
        if namespace is not None:
            names = [n for n in names if n.tenant == namespace.tenant and n.namespace == namespace.namespace]
        return sorted(names, key=str)


_REGISTRY_LOCK = threading.Lock()
_REGISTRIES: dict[str, NonPersistentRegistry] = {}


def registry_for(root_uri: str) -> NonPersistentRegistry:
    """The process's registry of non-persistent topics for the storage root ``root_uri``.

    Keyed by the root alone (not by broker configuration), so every ``Client`` of a root in this
    process reaches the same topics whatever configuration it was opened with.
    """
    with _REGISTRY_LOCK:
        registry = _REGISTRIES.get(root_uri)
        if registry is None:
            registry = NonPersistentRegistry(root_uri)
            _REGISTRIES[root_uri] = registry
        return registry


__all__ = [
    "NON_PERSISTENT_LEDGER_ID",
    "NonPersistentRegistry",
    "NonPersistentSubscription",
    "NonPersistentTopic",
    "ProducerToken",
    "Receiver",
    "registry_for",
]
