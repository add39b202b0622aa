"""What ties a producer to its topic: registration, leases, fencing, deletion and policies.

A producer registers on every partition when it is created and renews the lease while it lives,
so a second exclusive producer is refused and an older epoch is fenced.  Losing the registration
means fencing, unless the topic itself was deleted: then the producer is disconnected for good
with ``TopicDeleted``, as Pulsar disconnects the producers of a deleted topic (``docs/DECISIONS.md``
D39).  It pins the topic's identity when it registers, so a topic re-created under the same name
is not mistaken for its own.  The topic's policies are re-read at most once a second, so a policy
change needs no restart.

This is the base of ``Producer``, kept apart so the send path and the sender thread read as what
they are; ``Producer.__init__`` sets the attributes declared here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker_core.client.context import HandleOwner
from broker_core.errors import (
    BrokerPersistenceError,
    DirectoryGone,
    ProducerBusy,
    ProducerFenced,
    PulsarException,
    TopicDeleted,
    TopicNotFound,
)
from broker_core.producer.registry import ProducerAccessMode

if TYPE_CHECKING:
    from broker_core.client.daemon_pool import DaemonPool
    from broker_core.client.partition_queue import PartitionQueue
    from broker_core.clock import Clock
    from broker_core.naming import TopicName
    from broker_core.topic.policies import EffectivePolicies, PolicyStore


class ProducerConnection:
    """The registration half of a producer; ``Producer.__init__`` sets the attributes below."""

    _client: HandleOwner
    _topic: TopicName
    _name: str
    _access_mode: ProducerAccessMode
    _clock: Clock
    _lease_ms: int
    _last_renew_s: float
    _queues: list[PartitionQueue]
    _failure: PulsarException | None
    _policies: PolicyStore
    _policy_expires: float
    _policy_cache: EffectivePolicies | None
    _pool: DaemonPool

    # -- policies (re-read at most once a second: a policy change needs no restart) ----------------

    def _effective(self) -> EffectivePolicies:
        """The topic's policies, re-read once they are a second old.  On an object store a re-read is
        several round trips, which neither the send path nor the sender thread may wait for: it runs
        on a pool worker while they go on with the old policies.  A local re-read is cheap and done
        at once, so a change applies to the very next send."""
        cache = self._policy_cache
        if cache is None or (self._policies.io.is_local and time.monotonic() >= self._policy_expires):
            cache = self._policy_cache = self._policies.effective(self._topic)
            self._policy_expires = time.monotonic() + 1.0
        elif time.monotonic() >= self._policy_expires:
            self._policy_expires = float("inf")  # one re-read at a time
            self._in_background(self._refresh_policies)
        return cache

    def _refresh_policies(self) -> None:
        try:
            self._policy_cache = self._policies.effective(self._topic)
        finally:
            self._policy_expires = time.monotonic() + 1.0

    def _in_background(self, task: Callable[[], None]) -> None:
        """Run ``task`` on the producer's pool (inline once the pool is shut down: a closing producer)."""
        try:
            self._pool.submit(task)
        except RuntimeError:
            task()

    @property
    def _dedup(self) -> bool:
        return self._effective().deduplication_enabled

    @property
    def _max_message_size(self) -> int:
        return self._effective().max_message_size

    # -- registration -------------------------------------------------------------------------------

    def _register(self) -> None:
        registered: list[PartitionQueue] = []
        try:
            for q in self._queues:
                while True:
                    try:
                        q.epoch = q.registry.register(
                            self._name, self._access_mode, now_ms=self._clock.now_ms(), lease_ms=self._lease_ms
                        )
                        break
                    except (ProducerBusy, ProducerFenced):
                        if self._access_mode != ProducerAccessMode.WaitForExclusive or self._client._closed:
                            raise
                        time.sleep(0.05)
                registered.append(q)
                q.log.bump_producer_epoch(to=q.epoch)  # fences whoever held an older epoch
                q.topic_id = q.log.live_snapshot().metadata.id
        except BaseException as exc:
            for q in registered:
                with contextlib.suppress(Exception):
                    q.registry.unregister(self._name)
            if isinstance(exc, TopicDeleted | DirectoryGone):
                raise self._disconnected(exc) from exc
            raise

    def _disconnected(self, cause: BaseException) -> TopicDeleted:
        """The error of a producer whose topic was deleted; it stays failed with it."""
        error = TopicDeleted(
            f"topic {self._topic} was deleted while producer {self._name!r} was connected to it: the producer "
            "is disconnected; create a new one (which re-creates the topic if auto-creation is on)",
            topic=str(self._topic),
        )
        error.__cause__ = cause
        return error

    def _renew_leases(self) -> None:
        """Every third of the lease, renew it on every partition, on a pool worker: a renewal is a
        state commit per partition, which the sender thread must not wait for."""
        now = time.monotonic()
        if self._failure is not None or (now - self._last_renew_s) * 1000 < self._lease_ms / 3:
            return  # a failed producer stays failed: it has nothing to renew
        self._last_renew_s = float("inf")  # one renewal at a time
        self._in_background(self._renew_now)

    def _renew_now(self) -> None:
        """A renewal that storage refuses for a while (a full disk, a store answering 5xx) is retried
        after a tenth of the lease instead of failing the producer for good: the registration is still
        its own, and once space is back the producer sends again (``docs/DECISIONS.md`` D171).  Losing
        the registration (fencing) or the topic still fails it."""
        retry_s = None
        try:
            for q in self._queues:
                try:
                    q.registry.renew(self._name, now_ms=self._clock.now_ms(), lease_ms=self._lease_ms)
                except BrokerPersistenceError as exc:
                    if isinstance(exc, DirectoryGone):
                        self._failure = self._failure or self._classify(q, exc)
                    else:
                        retry_s = self._lease_ms / 10_000
                except PulsarException as exc:
                    self._failure = self._failure or self._classify(q, exc)
        finally:
            self._last_renew_s = time.monotonic()
            if retry_s is not None:  # due again in ``retry_s`` (renewals are due a third of a lease apart)
                self._last_renew_s -= self._lease_ms / 3_000 - retry_s

    def _classify(self, q: PartitionQueue, exc: PulsarException) -> PulsarException:
        """A lost registration means fencing, unless the topic itself was deleted (and maybe re-created)."""
        if isinstance(exc, TopicDeleted | DirectoryGone):
            return self._disconnected(exc)
        if isinstance(exc, ProducerFenced):
            try:
                if q.log.live_snapshot().metadata.id != q.topic_id:
                    return self._disconnected(exc)
            except TopicNotFound as gone:
                return self._disconnected(gone)
            except PulsarException:
                return exc  # storage trouble while looking: report the fencing itself
        return exc


__all__ = ["ProducerConnection"]
