"""One non-persistent internal topic in this process: publish, producers and access modes, readers.

A publish builds the message once and hands it, under the topic's lock, to every subscription
(which picks one consumer by its type) and to every reader; whoever cannot take it misses it.
Producers register here so that Pulsar's access modes hold among the producers of this process,
which are all the producers a non-persistent topic has.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from broker_core.errors import ConsumerBusy, InvalidConfiguration, ProducerBusy, ProducerFenced
from broker_core.hashing.keys import sticky_key_hash
from broker_core.message import Message
from broker_core.message_id import MessageId
from broker_core.naming import TopicName
from broker_core.non_persistent.receiver import Receiver
from broker_core.non_persistent.subscription import NonPersistentSubscription
from broker_core.producer.registry import ProducerAccessMode
from broker_core.subscription.cursor import ConsumerType
from broker_core.subscription.key_shared import DEFAULT_POINTS_PER_CONSUMER, DEFAULT_RANGE_SIZE, KeySharedMode

NON_PERSISTENT_LEDGER_ID = 0
"""The ledger id of every non-persistent message id (entry ids count messages per topic)."""

_WAIT_POLL_S = 0.05  # how often a WaitForExclusive producer re-checks whether it should give up


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
            ProducerBusy: the name is taken, or a Shared producer meets an exclusive holder.
            ProducerFenced: an exclusive producer meets connected producers.
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
                    # as Pulsar's broker: an exclusive newcomer is fenced, a shared one is busy
                    error = ProducerBusy if access_mode == ProducerAccessMode.Shared else ProducerFenced
                    raise error(
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
        range_size: int = DEFAULT_RANGE_SIZE,
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
                    range_size=range_size,
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


__all__ = ["NON_PERSISTENT_LEDGER_ID", "NonPersistentTopic", "ProducerToken"]
