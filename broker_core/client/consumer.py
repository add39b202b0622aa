"""The consumer: a member of a subscription, shaped like the official ``pulsar.Consumer``.

Each consumer runs a daemon dispatch thread that keeps its registration alive, runs the negative-ack
and ack-timeout timers, and fills the receiver queue: Shared and Key_Shared consumers *claim*
messages in the cursor (one commit per claim), Exclusive and the active Failover consumer read in
order.  ``receive`` only takes from that queue, so it never touches storage.  A second daemon
thread commits acknowledgments, grouped for at most ``ack_group_time`` (100 ms, like Pulsar's ack
grouping): on its own thread, so a slow dispatch round (a long backlog of small segments) never holds
acknowledgments back, and a killed consumer redelivers at most that much acknowledged work.

The dispatch thread sleeps until woken (a commit of this process, or of another one where the root
can notify: ``broker_core.topic.watch``) or until its next poll, which backs off while nothing changes up
to ``newEntriesCheckMaxDelayMillis``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

import numpy as np

from broker_core.client.args import check_type, check_type_or_none
from broker_core.client.consumer_base import ConsumerBase
from broker_core.client.context import HandleOwner
from broker_core.client.dead_letters import DeadLetters
from broker_core.client.policies import ConsumerBatchReceivePolicy
from broker_core.client.subscription_part import SubscriptionPart
from broker_core.client.topic_gone import GONE_ERRORS, deleted_error
from broker_core.clock import SystemClock
from broker_core.crypto import ENCRYPTION_PROPERTY, MessageDecryptor, Outcome
from broker_core.errors import (
    ConsumerBusy,
    InvalidConfiguration,
    LogCorrupted,
    NotAllowedError,
    OperationNotSupported,
    PulsarException,
    SegmentCorrupted,
    Timeout,
)
from broker_core.message import Message
from broker_core.message_id import MessageId
from broker_core.subscription.backoff import MultiplierRedeliveryBackoff
from broker_core.subscription.cursor import ConsumerType, Cursor
from broker_core.topic.watch import PollSchedule

_LOG = logging.getLogger(__name__)


class Consumer(ConsumerBase):
    """Receives messages of a subscription. Create with ``Client.subscribe``."""

    _log = _LOG

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
        message_listener: Callable[[Consumer, Message], None] | None,
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
        self._ack_group_s = 0.1
        self._clock = client._clock
        self._real_clock = isinstance(self._clock, SystemClock)
        self._lock = threading.RLock()  # hot paths enter the lock directly: Condition's __enter__ is Python
        self._cv = threading.Condition(self._lock)
        self._queue: deque[Message] = deque()
        self._unacked: dict[tuple[int, int], tuple[Message, float | None]] = {}
        self._pending_acks: dict[int, list[int]] = {}
        self._pending_cumulative: dict[int, int] = {}
        self._redeliveries: dict[int, list[int]] = {}
        self._nacks: list[tuple[float, Message]] = []
        self._wake = threading.Event()
        self._tick_lock = threading.Lock()  # one dispatch round at a time; seek waits for it
        self._flush_lock = threading.RLock()  # one ack flush at a time; in-order reads see it whole
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

    def _attach(self, part: SubscriptionPart) -> None:
        part.log.add_waiter(self._wake)
        part.store.add_waiter(self._wake)

    # -- receiving ----------------------------------------------------------------------------------

    def _take(self) -> Message:
        msg = self._queue.popleft()
        deadline = None if self._ack_timeout_s is None else time.monotonic() + self._ack_timeout_s
        self._unacked[(msg._source, msg._offset)] = (msg, deadline)
        if len(self._queue) < self._refill_below and not self._wake.is_set():
            self._wake.set()  # (setting a set Event again only costs a lock round trip per message)
        return msg

    def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; ``Timeout`` if none arrives within ``timeout_millis`` (None: wait forever)."""
        if self._listener is not None:
            raise InvalidConfiguration("receive() cannot be used on a consumer with a message_listener")
        deadline = None
        if timeout_millis is not None:
            check_type_or_none(int, timeout_millis, "timeout_millis")
            deadline = time.monotonic() + timeout_millis / 1000
        with self._lock:
            while True:
                if self._closed:
                    self._check_open()
                if self._queue:
                    return self._take()
                if self._damage is not None:  # every good message before it was delivered first
                    damage, self._damage = self._damage, None
                    raise damage
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise Timeout(
                        f"no message on {self._topic_label} within {timeout_millis} ms", topic=self._topic_label
                    )
                if self._queue_size:
                    self._cv.wait(timeout=remaining)
                    continue
                self._receiving += 1  # a zero queue: ask the dispatcher for one message now
                self._wake.set()
                try:
                    self._cv.wait(timeout=remaining)
                finally:
                    self._receiving -= 1

    def batch_receive(self) -> list[Message]:
        """As ``ConsumerBase.batch_receive``; refused on a zero queue, as the official clients do."""
        if not self._queue_size:
            raise InvalidConfiguration(
                "batch_receive cannot be used with receiver_queue_size=0 (nothing is fetched ahead); "
                "subscribe with a receiver queue of at least 1", argument="receiver_queue_size",
            )
        return super().batch_receive()

    # -- acknowledgment ---------------------------------------------------------------------------

    def _locate(self, message: Message | MessageId) -> tuple[int, list[int]]:
        if isinstance(message, Message):
            return message._source, message._chunk_offsets or [message._offset]
        if not isinstance(message, MessageId):
            raise InvalidConfiguration(f"expected a Message or MessageId, got {type(message).__name__}")
        topic = message._topic
        if topic is None and len(self._parts) > 1:  # as the official client's multi-topics consumer
            raise OperationNotSupported(
                f"message id {message} carries no topic, and {self._topic_label} spans several topics or "
                "partitions; acknowledge the Message, its message_id(), or "
                "MessageId.deserialize(data, topic=...)", topic=self._topic_label,
            )
        for (source, _), (msg, _) in list(self._unacked.items()):
            if msg.message_id() == message and (topic is None or msg._topic == topic):
                return source, msg._chunk_offsets or [msg._offset]
        for index, part in enumerate(self._parts):
            if topic is not None and part.display_topic != topic and len(self._parts) > 1:
                continue
            if part.partition == message.partition() and part.log.snapshot().ledger_id == message.ledger_id():
                return index, [part.log.offset_for_message_id(message, inclusive=True)]
        raise InvalidConfiguration(f"message id {message} does not belong to {self._topic_label}")

    def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message (grouped and committed within ``ack_group_time``)."""
        self._check_open()
        if type(message) is Message and message._chunk_offsets is None:  # the common case, kept cheap
            source, offset = message._source, message._offset
            with self._lock:
                self._unacked.pop((source, offset), None)
                pending = self._pending_acks.get(source)
                if pending is None:
                    self._pending_acks[source] = [offset]
                    self._acks_due.set()  # once per group: the ack thread commits it in ack_group_time
                else:
                    pending.append(offset)
            return
        source, offsets = self._locate(message)
        with self._lock:
            for off in offsets:
                self._unacked.pop((source, off), None)
            self._pending_acks.setdefault(source, []).extend(offsets)
        self._acks_due.set()

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge every message up to this one (Exclusive and Failover only)."""
        self._check_open()
        self._check_cumulative_allowed()
        source, offsets = self._locate(message)
        last = max(offsets)
        with self._cv:
            for key in [k for k in self._unacked if k[0] == source and k[1] <= last]:
                del self._unacked[key]
            self._pending_cumulative[source] = max(self._pending_cumulative.get(source, -1), last)
        self._acks_due.set()

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Ask for redelivery after the negative-ack delay (or the backoff for its redelivery count)."""
        self._check_open()
        source, offsets = self._locate(message)
        with self._cv:
            entry = self._unacked.pop((source, max(offsets)), None) or self._unacked.pop((source, offsets[0]), None)
            msg = entry[0] if entry else message if isinstance(message, Message) else None
            if msg is None:
                return
            self._schedule_nack(msg)
        self._wake.set()

    def _redeliver(self, msgs: list[Message]) -> None:
        keep: list[Message] = []
        for msg in msgs:
            if self._dead_letters is not None and self._dead_letters.should_dead_letter(msg):
                self._dead_letters.send_to_dlq(msg, self._parts[msg._source])
                self.acknowledge(msg)
            else:
                keep.append(msg)
        with self._cv:
            for msg in keep:
                self._redeliveries.setdefault(msg._source, []).extend(msg._chunk_offsets or [msg._offset])
        self._wake.set()

    # -- other API ----------------------------------------------------------------------------------

    def reconsume_later(self, message: Message, delay_millis: int, properties: dict[str, str] | None = None) -> None:
        """Send the message to the retry letter topic with a delay, and acknowledge it here."""
        self._check_open()
        if self._dead_letters is None or not self._dead_letters.retry_enabled:
            raise NotAllowedError("reconsume_later needs a consumer subscribed with retry_enable=True")
        check_type(int, delay_millis, "delay_millis")
        self._dead_letters.reconsume_later(message, self._parts[message._source], delay_millis, properties)
        self.acknowledge(message)

    def seek(self, messageid: MessageId | int) -> None:
        """Reset the subscription to a message id or a publish timestamp (ms, inclusive)."""
        self._check_open()
        if isinstance(messageid, bool) or not isinstance(messageid, MessageId | int):
            raise InvalidConfiguration(f"seek takes a MessageId or a timestamp in ms, got {messageid!r}")
        targets = list(range(len(self._parts)))
        if isinstance(messageid, MessageId) and messageid not in (MessageId.earliest, MessageId.latest):
            targets = [i for i in targets if messageid.partition() in (-1, self._parts[i].partition)]
            if len(targets) > 1:
                # several topics: ids carry no topic name, but the ledger id tells the topics apart
                ledger = messageid.ledger_id()
                same = [i for i in targets if self._parts[i].log.snapshot().ledger_id == ledger]
                targets = same or targets
        chosen = set(targets)
        # under the tick lock, so the background thread cannot deliver (or advance a read position)
        # from the old position between the cursor reset and the clearing of local state
        with self._tick_lock:
            self._flush_acks()
            for index in targets:
                part = self._parts[index]
                if isinstance(messageid, int):
                    offset = part.log.offset_for_publish_time(messageid)
                else:
                    offset = part.log.offset_for_message_id(messageid, inclusive=self._inclusive)

                def fn(cursor: Cursor | None, offset: int = offset) -> Cursor | None:
                    if cursor is None:
                        return None
                    cursor.seek(offset)
                    return cursor

                part.store.update(fn)
                part.read_pos = -1
                part.chunks.clear()
            with self._cv:
                self._queue = deque(m for m in self._queue if m._source not in chosen)
                self._unacked = {k: v for k, v in self._unacked.items() if k[0] not in chosen}
                self._nacks = [(t, m) for t, m in self._nacks if m._source not in chosen]
                for index in targets:
                    self._redeliveries.pop(index, None)
            self._seen.clear()
        self._wake.set()

    def get_last_message_id(self) -> MessageId:
        """The id of the last message of the (first) topic, ``MessageId.earliest`` if empty."""
        part = self._parts[0]
        snap = part.log.snapshot()
        if snap.next_offset <= snap.first_offset:
            return MessageId.earliest
        return part.log.message_id(snap.next_offset - 1, part.partition, snapshot=snap)

    def unsubscribe(self) -> None:
        """Delete the subscription (refused while other consumers are connected)."""
        self._check_open()
        now = self._clock.now_ms()

        def fn(cursor: Cursor | None) -> Cursor | None:
            if cursor is None:
                return None
            others = [n for n in cursor.live_consumers(now) if n != self._name]
            if others:
                raise ConsumerBusy(
                    f"cannot unsubscribe {self._subscription!r}: consumers {others} are still connected",
                    subscription=self._subscription,
                )
            cursor.deleted = True
            cursor.consumers.clear()
            return cursor

        with self._tick_lock:  # the background thread must not renew (so re-create) what is deleted here
            for part in self._parts:
                part.store.update(fn)
            self._closed = True
        self._shutdown(leave=False)

    def close(self) -> None:
        """Flush acknowledgments and leave the subscription; a blocked ``receive`` raises AlreadyClosed."""
        if self._closed:
            return
        self._shutdown(leave=True)

    def _shutdown(self, *, leave: bool) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._wake.set()
        self._stopping.set()
        self._acks_due.set()
        self._thread.join(timeout=30)
        self._ack_thread.join(timeout=30)
        with contextlib.suppress(PulsarException):
            self._flush_acks()
        for part in self._parts:
            part.log.remove_waiter(self._wake)
            part.store.remove_waiter(self._wake)
            if leave:
                with contextlib.suppress(PulsarException):
                    part.leave()
        if self._dead_letters is not None:
            self._dead_letters.close()
        self._client._forget(self)

    # -- the background thread --------------------------------------------------------------------

    def _run(self) -> None:
        while not self._closed:
            try:
                with self._tick_lock:
                    if self._closed:
                        break
                    self._tick()
            except GONE_ERRORS as exc:
                if self._discover is None and self._stop_if_deleted():
                    return
                self._errors.append(exc)
                time.sleep(self._poll_s)
            except LogCorrupted as exc:  # damage does not heal by itself: tell the application, once
                self._report_damage(exc)
                time.sleep(self._poll_s)
            except PulsarException as exc:  # keep going: storage hiccups must not kill the consumer
                self._errors.append(exc)
                time.sleep(self._poll_s)
            except Exception:  # a bug: say so loudly, but keep the consumer alive
                _LOG.exception(
                    "consumer %s on %s: unexpected error in the dispatch loop", self._name, self._topic_label
                )
                time.sleep(self._poll_s)
            self._wake.wait(self._next_wait_s())
            self._wake.clear()

    def _report_damage(self, exc: LogCorrupted) -> None:
        """Hand damaged storage (a corrupt segment, a log gap) to the next ``receive`` and log it, once
        per distinct error: the dispatch loop keeps retrying quietly (a repair may fix it), it never
        prints a traceback per poll."""
        if str(exc) in self._damage_seen:
            return
        self._damage_seen.add(str(exc))
        _LOG.error("consumer %s on %s cannot read on: %s", self._name, self._topic_label, exc)
        with self._cv:
            self._damage = exc
            self._cv.notify_all()

    def _stop_if_deleted(self) -> bool:
        """From the dispatch thread: if the topic was deleted, close (without leaving: the cursor went
        with the topic) so that the next ``receive`` raises ``TopicDeleted`` once.  False: a hiccup."""
        gone = deleted_error((p.log for p in self._parts), topic=self._topic_label,
                             what=f"consumer {self._name!r}")
        if gone is None:
            return False
        with self._cv:
            self._gone = gone
            self._closed = True
            self._cv.notify_all()
        for part in self._parts:
            part.log.remove_waiter(self._wake)
            part.store.remove_waiter(self._wake)
        if self._dead_letters is not None:
            with contextlib.suppress(PulsarException):
                self._dead_letters.close()
        self._client._forget(self)
        return True

    def _next_wait_s(self) -> float:
        """How long the dispatch thread may sleep unless woken: the poll schedule (backing off while
        idle), but never past a timer it runs (lease renewal, negative acks, ack timeouts, the
        delayed-delivery tick, topic discovery)."""
        wait = self._schedule.interval_s
        now_s = time.monotonic()
        wait = min(wait, self._last_renew + self._lease_ms / 3000 - now_s)
        if self._delayed:
            # delivery times are on the consumer's clock; an injected one may jump at any moment
            wait = min(wait, self._tick_ms / 1000 if self._real_clock else self._poll_s)
        if self._ack_timeout_s is not None:
            wait = min(wait, self._poll_s)
        if self._discover is not None:
            wait = min(wait, self._last_discovery + self._discovery_period_s - now_s)
        nacks = self._nacks
        if nacks:
            wait = min(wait, min(t for t, _ in nacks) - now_s)
        return max(wait, 0.0005)

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

    def _tick(self) -> None:
        now_s = time.monotonic()
        now_ms = self._clock.now_ms()
        if (now_s - self._last_renew) * 1000 >= self._lease_ms / 3:
            self._last_renew = now_s
            for part in self._parts:
                if not part.renew(now_ms=now_ms, lease_ms=self._lease_ms):
                    part.join(now_ms=now_ms, lease_ms=self._lease_ms, initial_offset=lambda: 0, auto_create=True)
        if self._discover is not None and now_s - self._last_discovery >= self._discovery_period_s:
            self._last_discovery = now_s
            for part in self._discover():
                self._parts.append(part)
                self._attach(part)
        self._run_timers(now_s)
        self._commit_redeliveries()
        if self._fill(now_ms):
            self._schedule.active()
        else:
            self._schedule.idle()

    def _run_timers(self, now_s: float) -> None:
        due: list[Message] = []
        with self._cv:
            if self._nacks:
                ready = [m for t, m in self._nacks if t <= now_s]
                self._nacks = [(t, m) for t, m in self._nacks if t > now_s]
                due.extend(ready)
            if self._ack_timeout_s is not None:
                expired = [
                    k for k, (_, deadline) in self._unacked.items() if deadline is not None and deadline <= now_s
                ]
                for key in expired:
                    due.append(self._unacked.pop(key)[0])
        if due:
            self._redeliver(due)

    def _flush_acks(self) -> None:
        with self._flush_lock:
            with self._cv:
                acks, self._pending_acks = self._pending_acks, {}
                cumulative, self._pending_cumulative = self._pending_cumulative, {}
            try:
                self._commit_acks(acks, cumulative)
            except BaseException:
                with self._cv:  # not committed: put them back, so the next flush (or close) retries
                    for source, offsets in acks.items():
                        self._pending_acks.setdefault(source, []).extend(offsets)
                    for source, upto in cumulative.items():
                        self._pending_cumulative[source] = max(self._pending_cumulative.get(source, -1), upto)
                raise

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

    def _capacity(self) -> int:
        """The receiver queue's size; with ``receiver_queue_size=0``, one message per waiting
        ``receive`` (or one for the message listener), as Pulsar's zero-queue consumer asks."""
        if self._queue_size:
            return self._queue_size
        return 1 if self._listener is not None else self._receiving

    def _fill(self, now_ms: int) -> bool:
        """Fill the receiver queue; False when nothing changed since the last round (idle)."""
        changed = False
        claims = self._type in (ConsumerType.Shared, ConsumerType.KeyShared)
        for index, part in enumerate(self._parts):
            space = self._capacity() - len(self._queue)
            if space <= 0:  # (receive wakes this thread when the queue falls below half)
                return changed
            # in-order reads: an ack being flushed must be in the cursor or still pending, never neither
            with contextlib.nullcontext() if claims else self._flush_lock:
                version, cursor = part.store.load()
                if cursor is None:
                    part.log.snapshot()  # the cursor vanished: TopicDeleted here if the topic went with it
                    continue
                # skip a part when nothing it depends on changed since it was last found drained
                log_version = part.log.snapshot().version
                marker = (log_version, version, now_ms // self._tick_ms if self._delayed else 0)
                if self._versions.get(index) != (log_version, version):  # storage changed: not idle
                    self._versions[index] = (log_version, version)
                    changed = True
                if self._seen.get(index) == marker:
                    continue
                held = None if claims else self._held_locally(index)
            if held is None:
                offsets, cursor = part.claim(now_ms=now_ms, limit=space, delayed_enabled=self._delayed,
                                             deliver_ahead_ms=self._deliver_ahead_ms)
                drained = len(offsets) < space
            else:
                offsets, drained, cursor = self._read_in_order(part, cursor, now_ms, space, held)
            if drained:
                self._seen[index] = marker
            else:
                self._seen.pop(index, None)
            if offsets:
                changed = True
                try:
                    msgs = part.messages_for(offsets, cursor)
                except SegmentCorrupted as exc:  # in order: deliver what precedes the damage, stop there
                    damaged_from = int(exc.context.get("offset", offsets[0]))
                    part.read_pos = damaged_from
                    good = [o for o in offsets if o < damaged_from]
                    if good:
                        self._deliver(index, part, part.messages_for(good, cursor))
                    raise
                self._deliver(index, part, msgs)
        return changed

    def _held_locally(self, index: int) -> tuple[set[int], int]:
        """What this consumer holds of part ``index`` (see ``_read_in_order``): the offsets, and the
        highest cumulative acknowledgment not flushed yet (-1 if none)."""
        with self._cv:
            local: set[int] = set(self._pending_acks.get(index, ()))
            local.update(self._redeliveries.get(index, ()))
            held_msgs = [m for m, _ in self._unacked.values()] + list(self._queue)
            for msg in held_msgs + [m for _, m in self._nacks]:
                if msg._source == index:
                    local.update(msg._chunk_offsets or [msg._offset])
            return local, self._pending_cumulative.get(index, -1)

    def _read_in_order(
        self, part: SubscriptionPart, cursor: Cursor, now_ms: int, space: int, held_locally: tuple[set[int], int]
    ) -> tuple[list[int], bool, Cursor]:
        """Offsets the Exclusive (or active Failover) consumer reads next, whether it is drained, and
        the cursor whose redelivery counts the messages carry."""
        if not part.is_active(cursor, now_ms):
            part.active = False
            part.read_pos = -1
            return [], True, cursor
        snap = part.log.snapshot()
        if not part.active or part.read_pos < 0:
            part.active = True
            part.read_pos = cursor.mark_delete
        part.read_pos = max(part.read_pos, snap.first_offset)
        end = min(snap.next_offset, part.read_pos + space)
        if end <= part.read_pos:
            return [], True, cursor
        candidates = np.arange(part.read_pos, end, dtype=np.int64)
        part.read_pos = end
        fresh = ~cursor.is_acked(candidates)
        # After a rewind (nack, ack timeout) skip what this consumer still holds locally: received and
        # unacked, queued and not received yet, acknowledged but not flushed to the cursor yet, or
        # negatively acknowledged and not redelivered yet (its own rewind brings it back, counted).
        local, upto = held_locally
        for pieces in part.chunks.values():  # chunks buffered until their message is complete
            local.update(p._offset for p in pieces)
        held = np.fromiter((int(o) in local for o in candidates), dtype=bool, count=len(candidates))
        held |= candidates <= upto
        offsets = candidates[fresh & ~held].tolist()
        drained = end >= snap.next_offset
        if self._type == ConsumerType.Failover and offsets:
            try:
                taken, claimed = part.claim_in_order(offsets, now_ms=now_ms)
            except BaseException:
                part.read_pos = int(candidates[0])  # nothing was delivered: read these again next time
                raise
            if claimed is None:  # the subscription moved to another consumer since ``cursor`` was read
                part.active = False
                part.read_pos = -1
                return [], True, cursor
            return taken, drained, claimed
        return offsets, drained, cursor

    def _crypto_failed(self, index: int, msg: Message, outcome: Outcome) -> None:
        """DISCARD: acknowledge it unseen.  FAIL (HOLD): keep it from the application, unacknowledged
        (the subscription hands it out again once this consumer leaves), and say why."""
        assert self._decryptor.last_error is not None
        if outcome is Outcome.DISCARD:
            with self._cv:
                self._pending_acks.setdefault(index, []).extend(msg._chunk_offsets or [msg._offset])
            return
        self._errors.append(self._decryptor.last_error)
        _LOG.warning("consumer %s: %s (crypto_failure_action=FAIL)", self._name, self._decryptor.last_error)

    def _deliver(self, index: int, part: SubscriptionPart, msgs: list[Message]) -> None:
        ready: list[Message] = []
        for msg in msgs:
            msg._source = index
            if msg._properties and ENCRYPTION_PROPERTY in msg._properties:
                outcome = self._decryptor.open(msg)
                if outcome is not Outcome.DELIVER:
                    self._crypto_failed(index, msg, outcome)
                    continue
            if self._dead_letters is not None and self._dead_letters.over_limit(msg):
                self._dead_letters.send_to_dlq(msg, part)
                with self._cv:
                    self._pending_acks.setdefault(index, []).extend(msg._chunk_offsets or [msg._offset])
                continue
            ready.append(msg)
        if ready:
            with self._cv:
                self._queue.extend(ready)
                self._cv.notify_all()


__all__ = ["Consumer"]
