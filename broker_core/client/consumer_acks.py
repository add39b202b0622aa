"""A consumer's state (everything ``Consumer(...)`` sets up) and its acknowledgment thread.

Acknowledgments are grouped: ``acknowledge`` records them and the ack thread commits each group to
the cursor ``ack_group_time`` after its first one (``_flush_acks``); redeliveries are committed the
same way.  ``ConsumerDispatch`` (``consumer_dispatch.py``) adds the dispatcher thread that fills the
receiver queue, and ``Consumer`` (``consumer.py``) the public API, all under the one lock ``_cv``.
"""

from __future__ import annotations

import abc
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from broker_core.client import telemetry, telemetry_gauges
from broker_core.client.consumer_base import ConsumerBase
from broker_core.client.context import HandleOwner
from broker_core.client.dead_letters import DeadLetters
from broker_core.client.policies import ConsumerBatchReceivePolicy
from broker_core.client.subscription_part import SubscriptionPart
from broker_core.clock import SystemClock
from broker_core.crypto import MessageDecryptor
from broker_core.errors import (
    LogCorrupted,
    PulsarException,
)
from broker_core.message import Message
from broker_core.subscription.backoff import MultiplierRedeliveryBackoff
from broker_core.subscription.cursor import ConsumerType, Cursor
from broker_core.topic.watch import PollSchedule

_LOG = logging.getLogger(__name__)

CURSOR_POLL_MIN_S = 5.0
"""On object stores, a consumer re-reads its cursor from storage at most this often (or once per
``newEntriesCheckMaxDelayMillis`` if longer); what changes it between reads is another process's
release, nack, seek or membership, which a claim (that re-reads it) or the next read picks up."""


OFFSET_BITS = 64  # offsets are int64 and never negative in a received message's key


def unacked_key(source: int, offset: int) -> int:
    """The key of a received message in ``_unacked``: its part above its offset, one int (for part 0,
    the offset itself), so that a part's keys are one contiguous range ``[part << 64, part + 1 << 64)``."""
    return source << OFFSET_BITS | offset


class ConsumerAcks(ConsumerBase):
    """A consumer's state and its acknowledgment thread; the dispatcher and the public API build on it."""

    @abc.abstractmethod
    def _run(self) -> None:
        """The dispatcher thread's loop (``ConsumerDispatch._run``), started by ``__init__``."""

    def __init__(
        self,
        client: HandleOwner,
        parts: list[SubscriptionPart],
        *,
        topic_label: str,
        subscription: str,
        consumer_name: str,
        consumer_type: ConsumerType,
        receiver_queue_size: int,
        message_listener: Callable[[Any, Message], None] | None,
        unacked_messages_timeout_ms: int | None,
        negative_ack_redelivery_delay_ms: int,
        negative_ack_backoff: MultiplierRedeliveryBackoff | None,
        batch_receive_policy: ConsumerBatchReceivePolicy | None,
        dead_letters: DeadLetters | None,
        start_message_id_inclusive: bool,
        discover: Callable[[], list[SubscriptionPart]] | None = None,
        discovery_period_s: float = 60.0,
        decryptor: MessageDecryptor | None = None,
    ) -> None:
        self._client = client
        self._parts = parts
        self._topic_label = topic_label
        self._subscription = subscription
        self._name = consumer_name
        self._type = consumer_type
        self._queue_size = receiver_queue_size
        self._refill_below = receiver_queue_size // 2  # the dispatcher refills the queue below this
        # ... ahead of the application only where a read waits for the network (D117): a folder's reads
        # are CPU work under the GIL, done by the receiving thread when its queue runs dry
        self._read_ahead = not client._broker.io.is_local
        self._receiving = 0  # receive() calls waiting now: a zero queue fetches only for them
        self._listener = message_listener
        self._ack_timeout_s = None if not unacked_messages_timeout_ms else unacked_messages_timeout_ms / 1000
        self._nack_delay_ms = negative_ack_redelivery_delay_ms
        self._nack_backoff = negative_ack_backoff
        self._batch_policy = batch_receive_policy or ConsumerBatchReceivePolicy()
        self._dead_letters = dead_letters
        self._inclusive = start_message_id_inclusive
        self._discover = discover
        self._discovery_period_s = discovery_period_s
        self._decryptor = decryptor or MessageDecryptor(None, None)  # encrypted messages: broker_core/crypto.py
        self._telemetry = telemetry.topic_attributes(topic_label, subscription)
        telemetry.CONSUMER_OPENED.add(1, self._telemetry)
        if dead_letters is not None:
            dead_letters.metric_attributes = self._telemetry
        # messages taken by the application (``telemetry_gauges`` reports them), counted only while an
        # SDK is installed: each dispatch round looks again
        self._metered = telemetry._sdk_installed()
        self._received_count = 0
        self._received_bytes = 0
        config = client._broker.config
        self._lease_ms = config.consumer_lease_written_ms
        self._delayed = config.delayed_delivery_enabled and consumer_type in (
            ConsumerType.Shared,
            ConsumerType.KeyShared,
        )
        self._tick_ms = (
            10
            if config.is_delayed_delivery_deliver_at_time_strict
            else min(config.delayed_delivery_tick_time_millis, 1000)
        )
        self._deliver_ahead_ms = config.delayed_delivery_lookahead_ms  # Pulsar's non-strict tick cutoff
        self._poll_s = client._poll_ms / 1000
        self._schedule = PollSchedule(self._poll_s, config.new_entries_check_max_delay_millis / 1000)
        # a folder's cursor is re-read every round (a stat); an object store's at most every
        # CURSOR_POLL_MIN_S (or idle cap): each read is a billed GET, and an ack flush in flight would
        # make the round wait for its round trips.  The log's next version is what each poll reads.
        self._cursor_max_age_s = 0.0 if client._broker.io.is_local else max(CURSOR_POLL_MIN_S, self._schedule.max_s)
        self._ack_group_s = 0.1
        self._clock = client._clock
        self._real_clock = isinstance(self._clock, SystemClock)
        self._lock = threading.RLock()  # hot paths enter the lock directly: Condition's __enter__ is Python
        self._cv = threading.Condition(self._lock)
        self._queue: deque[Message] = deque()
        # received and not acknowledged, by ``unacked_key(part, offset)``; with an ack timeout, when each is
        # due again (a message alone, and a plain int key: no tuple per message, which the collector
        # would count and track while a big receiver queue's worth waits)
        self._unacked: dict[int, Message] = {}
        self._deadlines: dict[int, float] = {}
        self._pending_acks: dict[int, list[int]] = {}
        self._pending_cumulative: dict[int, int] = {}
        self._flushing: tuple[dict[int, list[int]], dict[int, int]] = ({}, {})  # being committed now
        self._redeliveries: dict[int, list[int]] = {}
        self._read_ends: dict[int, int] = {}  # per part: all this consumer holds lies below (_held_locally)
        self._nacks: list[tuple[float, Message]] = []
        self._wake = threading.Event()
        self._refill_asked = False  # ``_take`` set ``_wake`` for a refill since the dispatcher's last round
        self._tick_lock = threading.Lock()  # one dispatch round at a time; seek waits for it
        self._flush_lock = threading.RLock()  # one ack flush at a time (its group stays visible: _flushing)
        self._acks_due = threading.Event()  # set by the first acknowledgment of a group
        self._stopping = threading.Event()  # ends the ack thread's grouping wait at close
        self._closed = False
        self._paused = False
        self._errors: deque[PulsarException] = deque(maxlen=10)
        self._damage: LogCorrupted | None = None  # damaged storage: raised once by receive (see _run)
        self._damage_seen: set[str] = set()
        self._last_renew = time.monotonic()
        self._last_discovery = time.monotonic()
        self._seen: dict[int, tuple[int, int, int]] = {}
        self._versions: dict[int, tuple[int, int]] = {}  # (log, cursor) versions of each part's last round
        for part in parts:
            self._attach(part)
        telemetry_gauges.track_consumer(self)  # its receiver queue and received totals, observed by an SDK
        self._thread = threading.Thread(target=self._run, name=f"pubsub-consumer-{consumer_name}", daemon=True)
        self._thread.start()
        self._ack_thread = threading.Thread(target=self._ack_loop, name=f"pubsub-acks-{consumer_name}", daemon=True)
        self._ack_thread.start()
        self._listener_thread: threading.Thread | None = None
        if message_listener is not None:
            self._listener_thread = threading.Thread(
                target=self._listen, name=f"pubsub-listener-{consumer_name}", daemon=True
            )
            self._listener_thread.start()

    def _count_received(self, msgs: Sequence[Message]) -> None:
        """Messages the application took (``receive``, ``batch_receive``, the listener): the totals
        ``telemetry_gauges`` reports; callers count only while an SDK is installed (``_metered``)."""
        self._received_count += len(msgs)
        self._received_bytes += sum(len(m.data()) for m in msgs)

    def _attach(self, part: SubscriptionPart) -> None:
        part.log.add_waiter(self._wake)
        part.store.add_waiter(self._wake)

    def _ack_loop(self) -> None:
        """Commit each group of acknowledgments ``ack_group_time`` after its first one."""
        while True:
            self._acks_due.wait()
            if self._closed or self._stopping.wait(self._ack_group_s):  # the grouping window itself
                return  # (close flushes what is left)
            self._acks_due.clear()
            try:
                self._flush_acks()
            except PulsarException as exc:  # keep the acks for the next round rather than lose them
                self._errors.append(exc)
                self._acks_due.set()
                time.sleep(self._poll_s)
            except Exception:
                _LOG.exception("consumer %s on %s: unexpected error flushing acknowledgments", self._name,
                               self._topic_label)
                time.sleep(self._poll_s)

    def _flush_acks(self) -> None:
        """Commit the pending acknowledgments.  While they are in flight they stay visible to the
        dispatcher as ``_flushing`` (an in-order read must find each of them in the cursor or held
        locally, never neither), so the dispatcher never waits for the flush's round trips."""
        with self._flush_lock:
            with self._cv:
                acks, self._pending_acks = self._pending_acks, {}
                cumulative, self._pending_cumulative = self._pending_cumulative, {}
                self._flushing = (acks, cumulative)
            try:
                self._commit_acks(acks, cumulative)
            except BaseException:
                with self._cv:  # not committed: put them back, so the next flush (or close) retries
                    for source, offsets in acks.items():
                        self._pending_acks.setdefault(source, []).extend(offsets)
                    for source, upto in cumulative.items():
                        self._pending_cumulative[source] = max(self._pending_cumulative.get(source, -1), upto)
                raise
            finally:
                with self._cv:
                    self._flushing = ({}, {})

    def _commit_acks(self, acks: dict[int, list[int]], cumulative: dict[int, int]) -> None:
        for source in set(acks) | set(cumulative):
            offsets = acks.get(source, [])
            upto = cumulative.get(source)

            def fn(cursor: Cursor | None, offsets: list[int] = offsets, upto: int | None = upto) -> Cursor | None:
                if cursor is None:
                    return None
                if upto is not None:
                    cursor.ack_cumulative(upto)
                if offsets:
                    cursor.ack(offsets)
                return cursor

            self._parts[source].store.update(fn)
            telemetry.ACKS.add(len(offsets) + (upto is not None), self._telemetry)

    def _commit_redeliveries(self) -> None:
        with self._cv:
            pending, self._redeliveries = self._redeliveries, {}
        claimed = self._type in (ConsumerType.Shared, ConsumerType.KeyShared)
        for source, offsets in pending.items():
            part = self._parts[source]

            def fn(cursor: Cursor | None, offsets: list[int] = offsets) -> Cursor | None:
                if cursor is None:
                    return None
                if claimed:
                    cursor.release(self._name, offsets)
                else:
                    cursor.count_redelivery(offsets)
                return cursor

            # Failover: the rewind alone redelivers, and reading a claimed message again counts it
            # (``Cursor.claim_in_order``).  A consumer that is no longer active rewinds nothing, so its
            # request is ignored, as Pulsar ignores a resend asked by an inactive consumer: the
            # messages went to the new active consumer, counted once, at the switch.
            if self._type != ConsumerType.Failover:
                part.store.update(fn)
            if not claimed and part.read_pos >= 0:
                part.read_pos = min(part.read_pos, min(offsets))
            self._seen.pop(source, None)


__all__ = ["OFFSET_BITS", "ConsumerAcks", "unacked_key"]
