"""A consumer's dispatcher: the background thread that claims messages from the cursor, reads them in
order and fills the receiver queue, and runs the ack-timeout and negative-ack timers.

It builds on ``ConsumerAcks`` (``consumer_acks.py``: the consumer's state and its acknowledgment
thread); ``Consumer`` (``consumer.py``) is the public half (``receive``, ``acknowledge``, ``seek``
...).  All run under the consumer's one lock (``_cv``), so what the API changes the dispatcher sees
at its next round, and a round (``_tick``) runs alone (``_tick_lock``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from operator import attrgetter

import numpy as np

from broker_core.client import telemetry, telemetry_gauges
from broker_core.client.consumer_acks import ConsumerAcks
from broker_core.client.subscription_part import SubscriptionPart
from broker_core.client.topic_gone import GONE_ERRORS, deleted_error
from broker_core.crypto import ENCRYPTION_PROPERTY, Outcome
from broker_core.errors import (
    LogCorrupted,
    PulsarException,
    SegmentCorrupted,
)
from broker_core.message import Message
from broker_core.subscription.cursor import ConsumerType, Cursor

_LOG = logging.getLogger(__name__)
_PROPERTIES = attrgetter("_properties")


class ConsumerDispatch(ConsumerAcks):
    """A consumer's dispatcher thread; ``Consumer`` adds the public API on top."""

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
            self._refill_asked = False

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
        telemetry_gauges.untrack_consumer(self)
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

    def _tick(self) -> None:
        now_s = time.monotonic()
        now_ms = self._clock.now_ms()
        if (now_s - self._last_renew) * 1000 >= self._lease_ms / 3:
            self._last_renew = now_s
            for part in self._parts:
                if not part.renew(now_ms=now_ms, lease_ms=self._lease_ms):
                    part.join(now_ms=now_ms, lease_ms=self._lease_ms, initial_offset=lambda: 0, auto_create=True,
                              in_process=True)
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
            if self._ack_timeout_s is not None:  # (a deadline outlives a cumulative ack, nack or seek of its
                # message: it is dropped here when due, with no message left to hand back)
                deadlines = self._deadlines
                timed_out = len(due)
                for key in [k for k, deadline in deadlines.items() if deadline <= now_s]:
                    del deadlines[key]
                    msg = self._unacked.pop(key, None)
                    if msg is not None:
                        due.append(msg)
                if len(due) > timed_out:
                    telemetry.ACK_TIMEOUT.add(len(due) - timed_out, self._telemetry)
        if due:
            self._redeliver(due)

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
            # in-order reads: what this consumer holds, then the cursor.  An acknowledgment is pending,
            # being flushed (both held) or committed (in the cursor, which is read after): never neither
            held = None if claims else self._held_locally(index, part)
            version, cursor = part.store.load(max_age_s=self._cursor_max_age_s)
            if cursor is None:
                part.log.snapshot()  # the cursor vanished: TopicDeleted here if the topic went with it
                continue
            # skip a part when nothing it depends on changed since it was last found drained
            log_version = part.log.snapshot().version
            marker = (log_version, version, now_ms // self._tick_ms if self._delayed else 0)
            previous = self._versions.get(index)
            if previous != (log_version, version):  # storage changed: not idle
                self._versions[index] = (log_version, version)
                # ... unless only this process wrote the cursor (a lease renewal, an ack): no news, and
                # resetting the backoff for it would cost an object store a burst of polls each time
                if previous is None or previous[0] != log_version or not part.store.written_here(version):
                    changed = True
            if self._seen.get(index) == marker:
                continue
            if held is None:
                offsets, cursor = part.claim(now_ms=now_ms, limit=space, delayed_enabled=self._delayed,
                                             deliver_ahead_ms=self._deliver_ahead_ms,
                                             cursor_max_age_s=self._cursor_max_age_s,
                                             snapshot=part.log.log.cached_snapshot())
                drained = len(offsets) < space
            else:
                offsets, drained, cursor = self._read_in_order(part, cursor, now_ms, space, held)
                self._read_up_to(index, part.read_pos)
            if drained:
                self._seen[index] = marker
            else:
                self._seen.pop(index, None)
            if offsets:
                changed = True
                try:
                    msgs = part.messages_for(offsets, cursor, source=index)
                except SegmentCorrupted as exc:  # in order: deliver what precedes the damage, stop there
                    damaged_from = int(exc.context.get("offset", offsets[0]))
                    part.read_pos = damaged_from
                    good = [o for o in offsets if o < damaged_from]
                    if good:
                        self._deliver(index, part, part.messages_for(good, cursor, source=index))
                    raise
                except BaseException:
                    self._unread(index, part, offsets, claimed=held is None)
                    raise
                self._deliver(index, part, msgs)
        return changed

    def _unread(self, index: int, part: SubscriptionPart, offsets: list[int], *, claimed: bool) -> None:
        """Undo a read whose messages were never queued (a storage error, or an interrupt of a read on
        the application's thread: ``Consumer._fill_here``), so that they are read again, not skipped:
        an in-order read moves its position back; claimed offsets are given back to the subscription
        at the next round (counted as a redelivery, as a failed dispatch is)."""
        self._seen.pop(index, None)
        if claimed:
            with self._cv:
                self._redeliveries.setdefault(index, []).extend(offsets)
        elif part.read_pos >= 0:
            part.read_pos = min(part.read_pos, offsets[0])

    def _held_locally(self, index: int, part: SubscriptionPart) -> tuple[set[int], int]:
        """What this consumer holds of part ``index`` (see ``_read_in_order``): the offsets, and the
        highest cumulative acknowledgment not flushed yet (-1 if none).

        Everything it holds was read (or acknowledged by id) below ``_read_ends[index]``; a read that
        goes on at or past that point (reading a backlog forward, the common case) can meet none of
        it, so the offsets are not gathered: that would walk every queued and unacknowledged message
        at each round.  Only a read that starts lower (after a rewind, a seek, a failover) needs them.
        """
        with self._cv:
            upto = max(self._pending_cumulative.get(index, -1), self._flushing[1].get(index, -1))
            if part.active and self._read_ends.get(index, 0) <= part.read_pos:  # (never past a reset: -1)
                return set(), upto
            local: set[int] = set(self._pending_acks.get(index, ()))
            local.update(self._flushing[0].get(index, ()))
            local.update(self._redeliveries.get(index, ()))
            held_msgs = [*self._unacked.values(), *self._queue]
            for msg in held_msgs + [m for _, m in self._nacks]:
                if msg._source == index:
                    local.update(msg._chunk_offsets or [msg._offset])
            return local, upto

    def _read_up_to(self, index: int, end: int) -> None:
        """Note that this consumer has read (or acknowledged by id) part ``index`` below ``end``."""
        with self._cv:
            if end > self._read_ends.get(index, 0):
                self._read_ends[index] = end

    def _read_in_order(
        self, part: SubscriptionPart, cursor: Cursor, now_ms: int, space: int, held_locally: tuple[set[int], int]
    ) -> tuple[list[int], bool, Cursor]:
        """Offsets the Exclusive (or active Failover) consumer reads next, whether it is drained, and
        the cursor whose redelivery counts the messages carry."""
        if not part.is_active(cursor, now_ms):
            part.active = False
            part.read_pos = -1
            return [], True, cursor
        snap = part.log.log.cached_snapshot()  # this round's poll (``_fill``): a second would be a round trip
        if not part.active or part.read_pos < 0:
            part.active = True
            part.read_pos = cursor.mark_delete
        part.read_pos = max(part.read_pos, snap.first_offset)
        end = min(snap.next_offset, part.read_pos + space)
        if end <= part.read_pos:
            return [], True, cursor
        candidates = np.arange(part.read_pos, end, dtype=np.int64)
        lost = snap.holes(part.read_pos, end)
        if lost:  # segments ``topics check --repair`` set aside: skipped, as every other read skips them
            candidates = candidates[~np.logical_or.reduce([(candidates >= a) & (candidates < b) for a, b in lost])]
        part.read_pos = end
        fresh = ~cursor.is_acked(candidates)
        # After a rewind (nack, ack timeout) skip what this consumer still holds locally: received and
        # unacked, queued and not received yet, acknowledged but not flushed to the cursor yet, or
        # negatively acknowledged and not redelivered yet (its own rewind brings it back, counted).
        local, upto = held_locally
        for pieces in part.chunks.values():  # chunks buffered until their message is complete
            local.update(p._offset for p in pieces)
        held = np.isin(candidates, np.fromiter(local, dtype=np.int64, count=len(local))) if local else \
            np.zeros(len(candidates), dtype=bool)  # (held nothing, reading a backlog on: no pass at all)
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
        """Queue ``msgs`` of part ``index`` (built by ``messages_for(..., source=index)``, which set
        each one's ``_source``), decrypting or diverting to the dead letter topic those that need it."""
        if self._dead_letters is None and not any(map(_PROPERTIES, msgs)):  # nothing to decrypt or divert
            self._enqueue_ready(msgs)
            return
        ready: list[Message] = []
        for msg in msgs:
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
        self._enqueue_ready(ready)

    def _enqueue_ready(self, ready: list[Message]) -> None:
        if ready:
            self._metered = telemetry._sdk_installed()  # (once per round: ``receive`` counts only if so)
            with self._cv:
                self._queue.extend(ready)
                self._cv.notify_all()


__all__ = ["ConsumerDispatch"]
