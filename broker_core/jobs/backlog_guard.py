"""The producer's side of backlog quotas: a commit waits, fails or evicts while the backlog is over quota.

The policies (``backlogQuotaPolicy``) are ``jobs.backlog``'s: ``producer_request_hold`` holds the
send, re-checking, until the backlog is within quota or the send timeout runs out;
``producer_exception`` fails it at once; ``consumer_backlog_eviction`` evicts the slowest
subscriptions (``jobs.backlog.evict_partition``) and lets it go on.  A producer checks before every
commit, with the policies and the status each cached for at most a second.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from broker_core.broker.broker import Broker
from broker_core.clock import Clock
from broker_core.errors import (
    AlreadyClosed,
    ProducerBlockedQuotaExceededError,
    ProducerBlockedQuotaExceededException,
)
from broker_core.jobs.backlog import EVICTION, EXCEPTION, HOLD, BacklogStatus, evict_partition, partition_status
from broker_core.naming import TopicName
from broker_core.topic.policies import EffectivePolicies

_HOLD_MARGIN_S = 0.05  # a held send gives up this much before its timeout, so it reports the quota error


class BacklogQuotaGuard:
    """Checks a producer's partitions against the backlog quota before each commit.

    Args:
        broker: the producer's broker.
        topic: the producer's topic (policies are per topic).
        clock: the producer's clock (backlog age is measured against publish times it stamped).
        cache_s: how long a computed status is reused; the policies have their own one-second cache.
    """

    def __init__(self, broker: Broker, topic: TopicName, *, clock: Clock, cache_s: float = 1.0) -> None:
        self._broker = broker
        self._topic = topic
        self._clock = clock
        self._cache_s = cache_s
        self._cache: dict[TopicName, tuple[float, BacklogStatus]] = {}
        self._lock = threading.Lock()
        self._holding: dict[int, tuple[TopicName, BacklogStatus]] = {}  # admit call (its thread) -> what it holds

    def held_error(self) -> ProducerBlockedQuotaExceededError | None:
        """The error of a send of this producer that is being held right now, else None.

        A blocking ``send`` whose own wait runs out while its batch is held asks this, so that it
        reports the quota error as the hold would have, when the hold's thread (late on a busy
        machine) has not given up within ``_HOLD_MARGIN_S`` of the deadline yet."""
        with self._lock:
            held = next(iter(self._holding.values()), None)
        return None if held is None else _held_error(*held)

    def _status(self, partition: TopicName, policies: EffectivePolicies) -> tuple[float, BacklogStatus]:
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(partition)
        if hit is not None and now - hit[0] < self._cache_s:
            return hit
        status = partition_status(self._broker, partition, now_ms=self._clock.now_ms(), policies=policies)
        entry = (now, status)
        with self._lock:
            self._cache[partition] = entry
        return entry

    def admit(self, partition: TopicName, *, deadline_s: float | None,
              closed: Callable[[], bool] = lambda: False,
              policy_source: Callable[[], EffectivePolicies] | None = None) -> None:
        """Return when a commit to ``partition`` may go ahead under the topic's backlog quota.

        Args:
            partition: the internal topic about to be written.
            deadline_s: ``time.monotonic()`` when the send times out; a held send gives up just before
                it, so the caller gets the quota error rather than a bare timeout (None: wait as long
                as it takes).
            closed: tells a held send that its client closed.
            policy_source: where the topic's policies come from (default: the broker's policy store); a
                producer passes its own cache, which never makes a send wait for a re-read.

        Raises:
            ProducerBlockedQuotaExceededException: over quota under ``producer_exception``.
            ProducerBlockedQuotaExceededError: still over quota at the deadline (``producer_request_hold``).
            AlreadyClosed: the client closed while the send was held.
        """
        try:
            self._admit(partition, deadline_s, closed, policy_source)
        finally:
            with self._lock:
                self._holding.pop(threading.get_ident(), None)

    def _admit(self, partition: TopicName, deadline_s: float | None, closed: Callable[[], bool],
               policy_source: Callable[[], EffectivePolicies] | None) -> None:
        while True:
            policies = self._broker.policies.effective(self._topic) if policy_source is None else policy_source()
            if policies.backlog_quota_limit_size < 0 and policies.backlog_quota_limit_time < 0:
                return  # the default: no quota, no I/O
            checked_s, status = self._status(partition, policies)
            if not status.exceeded:
                return
            if policies.backlog_quota_policy == EXCEPTION:
                raise ProducerBlockedQuotaExceededException(
                    f"{partition} is over its backlog quota ({status.describe()}); the policy is "
                    f"{EXCEPTION}: consumers must acknowledge (or TTL or eviction free the backlog) before "
                    "producers may send",
                    topic=str(partition),
                )
            if policies.backlog_quota_policy == EVICTION:
                evict_partition(self._broker, partition, now_ms=self._clock.now_ms(), dry_run=False)
                with self._lock:
                    self._cache.pop(partition, None)
                return
            now = time.monotonic()
            give_up = None if deadline_s is None else deadline_s - _HOLD_MARGIN_S
            if give_up is not None and now >= give_up:
                raise _held_error(partition, status)
            if closed():
                raise AlreadyClosed(f"the client closed while a send to {partition} was held by the quota")
            with self._lock:
                self._holding[threading.get_ident()] = (partition, status)
            wake = checked_s + self._cache_s
            time.sleep(max(0.001, min(0.1, wake - now, (give_up - now) if give_up is not None else 0.1)))


def _held_error(partition: TopicName, status: BacklogStatus) -> ProducerBlockedQuotaExceededError:
    return ProducerBlockedQuotaExceededError(
        f"send to {partition} was held by the backlog quota ({status.describe()}) until the send "
        f"timeout ran out; the policy is {HOLD}: consumers must catch up",
        topic=str(partition),
    )


__all__ = ["BacklogQuotaGuard"]
