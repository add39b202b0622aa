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
import time
from collections import deque
from itertools import repeat, starmap
from operator import attrgetter, lshift, or_

from broker_core.client import telemetry, telemetry_gauges
from broker_core.client.args import check_seek_target, check_type, check_type_or_none
from broker_core.client.consumer_acks import OFFSET_BITS, unacked_key
from broker_core.client.consumer_dispatch import ConsumerDispatch
from broker_core.errors import (
    ConsumerBusy,
    InvalidConfiguration,
    NotAllowedError,
    OperationNotSupported,
    PulsarException,
    Timeout,
)
from broker_core.message import Message
from broker_core.message_id import MessageId
from broker_core.subscription.cursor import Cursor

_LOG = logging.getLogger(__name__)
_SOURCE = attrgetter("_source")
_OFFSET = attrgetter("_offset")


class Consumer(ConsumerDispatch):
    """Receives messages of a subscription. Create with ``Client.subscribe``."""

    _log = _LOG

    # -- receiving ----------------------------------------------------------------------------------

    def _take(self) -> Message:
        queue = self._queue
        msg = queue.popleft()
        key = msg._source << OFFSET_BITS | msg._offset  # (``unacked_key`` inline)
        self._unacked[key] = msg
        if self._ack_timeout_s is not None:
            self._deadlines[key] = time.monotonic() + self._ack_timeout_s
        if self._metered:
            self._count_received((msg,))
        self._ask_refill()
        return msg

    def _ask_refill(self) -> None:
        """Wake the dispatcher once the queue runs low: once per dispatch round (``_run`` clears
        ``_refill_asked``), not an Event call per message taken."""
        if len(self._queue) < self._refill_below and not self._refill_asked:
            self._refill_asked = True
            self._wake.set()

    def _unacked_messages(self) -> list[Message]:
        return list(self._unacked.values())  # (messages alone: deadlines are kept apart)

    def _take_many(self, count: int) -> list[Message]:
        """``_take`` of the next ``count`` messages at once (``batch_receive``): C-level passes over
        the run, no Python call per message."""
        queue = self._queue
        if count >= len(queue):
            msgs = list(queue)
            queue.clear()
        else:
            msgs = list(starmap(queue.popleft, repeat((), count)))
        keys = list(map(or_, map(lshift, map(_SOURCE, msgs), repeat(OFFSET_BITS)), map(_OFFSET, msgs)))  # unacked_key
        self._unacked.update(zip(keys, msgs, strict=True))
        if self._ack_timeout_s is not None:
            self._deadlines.update(zip(keys, repeat(time.monotonic() + self._ack_timeout_s, len(keys)), strict=True))
        if self._metered:
            self._count_received(msgs)
        self._ask_refill()
        return msgs

    def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; ``Timeout`` if none arrives within ``timeout_millis`` (None: wait forever)."""
        if self._listener is None and not self._closed and (timeout_millis is None or type(timeout_millis) is int):
            with self._lock:  # a message already queued: taken at once (the per-message path of a backlog,
                queue = self._queue  # so ``_take`` and ``_ask_refill`` are inline: two calls less per message)
                if queue and not self._closed:
                    msg = queue.popleft()
                    key = msg._source << OFFSET_BITS | msg._offset  # (``unacked_key`` inline)
                    self._unacked[key] = msg
                    if self._ack_timeout_s is not None:
                        self._deadlines[key] = time.monotonic() + self._ack_timeout_s
                    if self._metered:
                        self._count_received((msg,))
                    if len(queue) < self._refill_below and not self._refill_asked and self._read_ahead:
                        self._refill_asked = True
                        self._wake.set()
                    return msg
        return self._receive_waiting(timeout_millis)

    def _fill_here(self) -> None:
        """Read into the empty receiver queue on the calling thread, unless the dispatcher is reading
        now (its messages then come through the queue).

        On a folder a read is CPU work under the GIL: the dispatcher doing it in parallel buys nothing,
        and the hand-offs between the two threads moved the messages' working set between cores, which
        made some processes' consumes a third dearer (D115, D117).  A failed round is left to the dispatcher,
        which meets the error again and handles it as always (retries, reports damage, stops on a
        deleted topic); an interrupt (``KeyboardInterrupt``) propagates, the read undone (``_unread``).
        """
        if not self._tick_lock.acquire(blocking=False):
            return
        try:
            if not self._closed:
                self._tick()
        except Exception:
            self._wake.set()
        finally:
            self._tick_lock.release()

    def _receive_waiting(self, timeout_millis: int | None) -> Message:
        if self._listener is not None:
            raise InvalidConfiguration("receive() cannot be used on a consumer with a message_listener")
        if self._closed:  # before any lock: one held at a fork stays held in the child
            self._check_open()
        deadline = None
        if timeout_millis is not None:
            check_type_or_none(int, timeout_millis, "timeout_millis")
            deadline = time.monotonic() + timeout_millis / 1000
        if self._queue_size and not self._queue:
            self._fill_here()
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
        for key, msg in list(self._unacked.items()):
            if msg.message_id() == message and (topic is None or msg._topic == topic):
                return key >> OFFSET_BITS, msg._chunk_offsets or [msg._offset]
        for index, part in enumerate(self._parts):
            if topic is not None and part.display_topic != topic and len(self._parts) > 1:
                continue
            if part.partition == message.partition() and part.log.snapshot().ledger_id == message.ledger_id():
                offset = part.log.offset_for_message_id(message, inclusive=True)
                self._read_up_to(index, offset + 1)  # may be ahead of the reads: an in-order read skips it
                return index, [offset]
        raise InvalidConfiguration(f"message id {message} does not belong to {self._topic_label}")

    def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message (grouped and committed within ``ack_group_time``)."""
        if self._closed:
            self._check_open()
        if type(message) is Message and message._chunk_offsets is None:  # the common case, kept cheap
            source, offset = message._source, message._offset
            with self._lock:
                key = source << OFFSET_BITS | offset  # (``unacked_key`` inline)
                self._unacked.pop(key, None)
                if self._ack_timeout_s is not None:
                    self._deadlines.pop(key, None)
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
                self._unacked.pop(unacked_key(source, off), None)
            self._pending_acks.setdefault(source, []).extend(offsets)
        self._acks_due.set()

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge every message up to this one (Exclusive and Failover only)."""
        self._check_open()
        self._check_cumulative_allowed()
        source, offsets = self._locate(message)
        last = max(offsets)
        with self._cv:
            unacked = self._unacked
            low, high = unacked_key(source, 0), unacked_key(source, last)  # the part's keys are one range
            if len(self._parts) == 1 and max(unacked, default=-1) <= high:
                unacked.clear()  # all it holds is covered (a batch acknowledged by its last message): one C-level
                # pass over the keys instead of a Python test and a delete per message
            else:
                for key in [k for k in unacked if low <= k <= high]:
                    del unacked[key]
            self._pending_cumulative[source] = max(self._pending_cumulative.get(source, -1), last)
        self._acks_due.set()

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Ask for redelivery after the negative-ack delay (or the backoff for its redelivery count)."""
        self._check_open()
        source, offsets = self._locate(message)
        with self._cv:
            held = self._unacked.pop(unacked_key(source, max(offsets)), None) or \
                self._unacked.pop(unacked_key(source, offsets[0]), None)
            msg = held if held is not None else message if isinstance(message, Message) else None
            if msg is None:
                return
            self._schedule_nack(msg)
        telemetry.NACKS.add(1, self._telemetry)
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
        check_seek_target(messageid, "messageid")
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
                self._unacked = {k: v for k, v in self._unacked.items() if k >> OFFSET_BITS not in chosen}
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
            others = [c for n, c in cursor.live_consumers(now).items() if n != self._name]
            if others:
                leases = "; ".join(c.lease_text(now) for c in others)
                raise ConsumerBusy(
                    f"cannot unsubscribe {self._subscription!r}: other consumers are still connected ({leases}); "
                    "close them first, or wait until their leases lapse",
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
        telemetry.CONSUMER_CLOSED.add(1, self._telemetry)

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
            else:
                part.closed_locally()
        if self._dead_letters is not None:
            self._dead_letters.close()
        self._client._forget(self)
        telemetry_gauges.untrack_consumer(self)

    # -- the background thread --------------------------------------------------------------------


__all__ = ["Consumer"]
