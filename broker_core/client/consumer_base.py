"""What a consumer does the same way whatever fills its receiver queue.

The persistent ``Consumer`` fills its queue from storage and the ``NonPersistentConsumer`` has it
filled in memory by the topic, but their user sees the same consumer: the same identity methods,
the same closed check, ``batch_receive`` over the queue, the message listener thread with pause
and resume, the rule that Shared and Key_Shared subscriptions refuse cumulative acks, and when a
negatively acknowledged or unacknowledged message is handed back.  One implementation keeps the
two from drifting apart.
"""

from __future__ import annotations

import abc
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from broker_core.client.policies import ConsumerBatchReceivePolicy
from broker_core.client.receive_batch import collect_batch
from broker_core.errors import AlreadyClosed, CumulativeAcknowledgementNotAllowedError, PulsarException
from broker_core.message import Message
from broker_core.storage.fork import created_before_fork
from broker_core.subscription.backoff import MultiplierRedeliveryBackoff
from broker_core.subscription.cursor import ConsumerType


class ConsumerBase(abc.ABC):
    """The shared half of a consumer; a subclass sets the attributes below and defines ``_take`` and
    ``_redeliver``.

    ``_take`` pops the next message off ``_queue`` and does the subclass's bookkeeping; it is
    called with ``_cv`` held.  ``_redeliver`` hands messages back for delivery, the subclass's way
    (through the cursor, or dispatched again in memory).  ``_unacked`` maps a subclass's key of a
    received message to what it keeps of it (``_unacked_messages`` lists the messages); ``_nacks`` holds negatively
    acknowledged messages with the time they are due again.  ``_log`` is the logger a failing
    message listener is reported to.
    """

    _log: logging.Logger
    _topic_label: str
    _subscription: str
    _name: str
    _type: ConsumerType
    _closed: bool
    _paused: bool
    _cv: threading.Condition
    _queue: deque[Message]
    _batch_policy: ConsumerBatchReceivePolicy
    _listener: Callable[[Any, Message], None] | None
    _unacked: dict[Any, Any]  # see ``_unacked_messages``
    _nacks: list[tuple[float, Message]]
    _nack_delay_ms: int
    _nack_backoff: MultiplierRedeliveryBackoff | None

    @abc.abstractmethod
    def _take(self) -> Message:
        """Pop the next queued message and track it as unacknowledged (call with ``_cv`` held)."""

    def _take_many(self, count: int) -> list[Message]:
        """Pop the next ``count`` queued messages (``_take`` each, unless a subclass does them at once)."""
        return [self._take() for _ in range(count)]

    def _unacked_messages(self) -> list[Message]:
        """The received and unacknowledged messages (``_unacked`` values here: message and deadline)."""
        return [m for m, _ in self._unacked.values()]

    @abc.abstractmethod
    def _redeliver(self, msgs: list[Message]) -> None:
        """Hand ``msgs`` back for redelivery now (or to the dead letter topic past the limit)."""

    # -- identity -----------------------------------------------------------------------------------

    def topic(self) -> str:
        return self._topic_label

    def subscription_name(self) -> str:
        return self._subscription

    def consumer_name(self) -> str:
        return self._name

    def is_connected(self) -> bool:
        return not self._closed

    _gone: PulsarException | None = None  # set when the consumer stopped because its topic was deleted

    _created_before_fork = False  # set in a forked child (``client_core``)

    def _check_open(self) -> None:
        if self._closed:
            if self._created_before_fork:
                raise created_before_fork(f"consumer {self._name!r} on {self._topic_label}")
            gone, self._gone = self._gone, None
            if gone is not None:  # raised once; from then on the consumer is simply closed
                raise gone
            raise AlreadyClosed(f"consumer {self._name!r} on {self._topic_label} is closed")

    # -- receiving ----------------------------------------------------------------------------------

    _damage: PulsarException | None = None  # damaged storage, handed to the application once

    def _pending_damage(self, clear: bool) -> PulsarException | None:
        """The damage not handed to the application yet (call with ``_cv`` held); ``clear``: now it is."""
        damage = self._damage
        if clear:
            self._damage = None
        return damage

    def batch_receive(self) -> list[Message]:
        """Messages up to the batch receive policy's limits, waiting at most its timeout; damaged
        storage is raised once, as by ``receive``, after every message before it."""
        if self._closed:
            self._check_open()
        return collect_batch(self._cv, self._queue, self._take_many, self._check_open, self._batch_policy,
                             self._pending_damage)

    def _listen(self) -> None:
        while not self._closed:
            damage = None
            with self._cv:
                # a queued message goes first (unless paused); damage once the queue before it is empty
                while not self._closed and not (
                        (self._queue and not self._paused) or (not self._queue and self._damage is not None)):
                    self._cv.wait(timeout=0.1)
                if self._closed:
                    return
                if self._queue:
                    msg = self._take()
                else:
                    damage = self._pending_damage(True)
            if damage is not None:
                self._report_to_application(damage)
                continue
            assert self._listener is not None
            try:
                self._listener(self, msg)
            except Exception:  # like the official client: log it, keep listening (the message stays unacked)
                self._log.exception("message listener of consumer %s on %s raised", self._name, self._topic_label)

    def _report_to_application(self, error: PulsarException) -> None:
        """Hand ``error`` to the application of a listener consumer, once: no call of the application's
        is there to raise it from, so it goes to ``threading.excepthook`` as this thread's exception
        (the application's hook if it installed one, else a traceback on stderr); the thread goes on."""
        threading.excepthook(threading.ExceptHookArgs(
            (type(error), error, error.__traceback__, threading.current_thread())))

    def pause_message_listener(self) -> None:
        self._paused = True

    def resume_message_listener(self) -> None:
        with self._cv:
            self._paused = False
            self._cv.notify_all()

    # -- acknowledgment -----------------------------------------------------------------------------

    def _check_cumulative_allowed(self) -> None:
        """Refuse a cumulative ack on a subscription whose messages go to more than one consumer."""
        if self._type in (ConsumerType.Shared, ConsumerType.KeyShared):
            raise CumulativeAcknowledgementNotAllowedError(
                f"cumulative acknowledgment is not allowed on {self._type.name} subscription "
                f"{self._subscription!r}; acknowledge messages one by one",
            )

    def _schedule_nack(self, msg: Message) -> None:
        """Hand ``msg`` back after the negative-ack delay, or the backoff for its redelivery count.

        Call with ``_cv`` held, then wake the thread that runs the timers.
        """
        delay_ms = (
            self._nack_backoff.next_delay_ms(msg.redelivery_count()) if self._nack_backoff else self._nack_delay_ms
        )
        self._nacks.append((time.monotonic() + delay_ms / 1000, msg))

    def redeliver_unacknowledged_messages(self) -> None:
        """Redeliver every message received and not acknowledged yet, now."""
        self._check_open()
        with self._cv:
            msgs = self._unacked_messages()
            self._unacked.clear()
        self._redeliver(msgs)


__all__ = ["ConsumerBase"]
