"""Per internal topic, the numbers the exporter publishes, re-read cheaply on every scrape.

A scrape must stay cheap on an object store, where every request is billed: for a topic nothing
happened to since the last scrape, it costs the poll of the next log version and of each
subscription's next cursor version (one GET each that answers 404), and nothing else; a
subscription that was caught up costs nothing while the log does not move.  What changes
only with a commit (sizes, backlogs, the oldest unacked message's publish time) is kept from the
previous scrape and recomputed only when the log or that cursor moved; what changes with the clock
(rates over the last minute, backlog ages) is recomputed from the kept state in memory
(``docs/DECISIONS.md`` D162).

The inventory costs a listing per namespace (which tenants, namespaces, topics and partitions exist),
refreshed every ``inventory_refresh_s``, and a listing of each topic's subscriptions, refreshed per
topic every ``subscription_refresh_s`` at a point of that interval the topic's name picks, so the
refreshes spread over the scrapes instead of all landing on one; the handles' staleness checks run
with a topic's subscription refresh (D185, D195).
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from broker_core.broker.broker import Broker
from broker_core.broker.stats_fields import (
    backlog_bytes,
    backlog_messages,
    bounded_publish_time_ms,
    first_unacked,
    in_rates,
    publish_time_ms,
)
from broker_core.broker.tenancy import topic_dir
from broker_core.errors import PulsarException, TopicNotFound
from broker_core.log.snapshot import Snapshot
from broker_core.log.state_store import VersionedState
from broker_core.log.transaction_log import TransactionLog
from broker_core.naming import NamespaceName, TopicName
from broker_core.subscription import activity
from broker_core.subscription.cursor import Cursor
from broker_core.subscription.cursor_store import cursor_state, list_subscriptions

_LOG = logging.getLogger(__name__)
_In = TypeVar("_In")
_Out = TypeVar("_Out")


@dataclass(slots=True)
class SubscriptionSample:
    """One subscription's numbers as of its cursor ``version`` and the log ``log_version``."""

    version: int
    log_version: int
    backlog: int
    unacked: int
    backlog_bytes: int
    earliest_ms: int  # publish time of the oldest unacked message, 0 when the backlog is empty
    first_unacked: int
    doc: dict[str, Any]

    def rates(self, now_ms: int) -> activity.Activity:
        return activity.read(self.doc, now_ms)


@dataclass(slots=True)
class TopicSample:
    """One internal topic's numbers at one scrape."""

    topic: TopicName
    snapshot: Snapshot
    storage_bytes: int
    subscriptions: dict[str, SubscriptionSample] = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        return self.topic.namespace_name


@dataclass(slots=True)
class _Known:
    subscriptions: list[str]
    listed_s: float
    samples: dict[str, SubscriptionSample] = field(default_factory=dict)
    cursors: dict[str, VersionedState] = field(default_factory=dict)


class Sampler:
    """Keeps what the previous scrape learned about each internal topic (see the module docstring).

    Args:
        broker: the root's broker (its storage and configuration; the sampler polls handles of its own).
        namespaces: only these (``tenant/namespace``); None: every namespace of every tenant.
        inventory_refresh_s: how old the list of topics may get.
        subscription_refresh_s: how old a topic's list of subscriptions may get (and how often an idle
            cursor's and log's cached versions are checked against cleanup).
        threads: how many topics are read at once on an object store (``map``).
    """

    def __init__(self, broker: Broker, *, namespaces: list[str] | None = None,
                 inventory_refresh_s: float = 60.0, subscription_refresh_s: float = 300.0,
                 threads: int = 8) -> None:
        self.broker = broker
        self.threads = threads
        self.namespaces = None if namespaces is None else [str(NamespaceName.parse(n)) for n in namespaces]
        self.inventory_refresh_s = inventory_refresh_s
        self.subscription_refresh_s = subscription_refresh_s
        self._topics: list[TopicName] = []
        self._listed_s: float | None = None
        self._known: dict[TopicName, _Known] = {}
        self._logs: dict[TopicName, TransactionLog] = {}

    def topics(self) -> list[TopicName]:
        """The persistent internal topics to sample (re-listed every ``inventory_refresh_s``)."""
        now = _now_s()
        if self._listed_s is None or now - self._listed_s >= self.inventory_refresh_s:
            self._topics = self._list_topics()
            self._listed_s = now
            listed = set(self._topics)
            self._known = {t: k for t, k in self._known.items() if t in listed}
            self._logs = {t: log for t, log in self._logs.items() if t in listed}
        return self._topics

    def _list_topics(self) -> list[TopicName]:
        admin = self.broker.admin
        namespaces = self.namespaces
        if namespaces is None:
            namespaces = [ns for tenant in admin.list_tenants() for ns in admin.list_namespaces(tenant)]
        out: list[TopicName] = []
        for ns in namespaces:
            out.extend(sorted((t for t in admin.list_internal_topics(ns) if t.is_persistent), key=str))
        return out

    def sample_all(self, now_ms: int) -> list[TopicSample]:
        """Every topic's sample; a topic that cannot be read now is logged and left out of this scrape."""
        return [s for s in self.map(lambda topic: self._sample_or_skip(topic, now_ms), self.topics())
                if s is not None]

    def map(self, fn: Callable[[_In], _Out], items: Sequence[_In]) -> list[_Out]:
        """``[fn(item) for item in items]``, on up to ``threads`` threads on an object store, where a
        topic's work is round trips that release the GIL (D188); in order on a folder, where it is
        Python code that threads would only make contend (measured)."""
        if self.broker.io.is_local or self.threads <= 1 or len(items) <= 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(min(self.threads, len(items)), thread_name_prefix="pubsub-metrics") as pool:
            return list(pool.map(fn, items))

    def _sample_or_skip(self, topic: TopicName, now_ms: int) -> TopicSample | None:
        try:
            return self.sample(topic, now_ms)
        except TopicNotFound:  # deleted since the inventory, or a partition nobody wrote yet
            return None
        except PulsarException as exc:
            _LOG.warning("metrics: skipping %s this scrape: %s", topic, exc)
            return None

    def sample(self, topic: TopicName, now_ms: int) -> TopicSample | None:
        """One internal topic's numbers; None when it has no log yet.

        The sampler polls handles of its own, a bare transaction log per topic and a versioned state
        per cursor: the process's shared ones carry a consumer's machinery (waiters, watchers, a
        segment cache, a read-ahead), which ten thousand topics pay for in time and memory (D187).
        Their idle staleness checks (a HEAD or two each on an object store, due every 10 s) run when
        the topic's subscriptions are re-listed, every ``subscription_refresh_s``, and on every scrape
        for a cursor that looks active (``_active``): a poll of an unchanged, idle topic is one read
        of the next version of its log and of each cursor, whatever the scrape interval (D185), and
        of its log alone when every subscription was caught up and the log did not move (D197)."""
        known = self._known.get(topic)
        now_s = _now_s()
        refresh = known is None or now_s - known.listed_s >= self.subscription_refresh_s
        checks = refresh and known is not None  # (a handle opened by this scrape has nothing to check)
        path = topic_dir(topic)
        log = self._logs.get(topic)
        if log is None:
            log = self._logs[topic] = TransactionLog(self.broker.io, path,
                                                     checkpoint_interval=self.broker.config.checkpoint_interval)
        try:  # (no ``exists`` probe first: opening the log finds out, and the probe would cost a HEAD)
            snap = log.snapshot(verify=checks)
        except TopicNotFound:
            return None
        if snap.deleted:
            return None
        if known is None or refresh:
            subs = list_subscriptions(self.broker.io, path)
            # a topic first seen is refreshed next at a point of the interval its name picks (then every
            # interval): topics listed by one scrape would otherwise all refresh on one later scrape
            listed_s = now_s - _phase(topic) * self.subscription_refresh_s if known is None else now_s
            previous = _Known([], now_s) if known is None else known
            known = _Known(subs, listed_s, {s: previous.samples[s] for s in subs if s in previous.samples},
                           {s: previous.cursors[s] for s in subs if s in previous.cursors})
            self._known[topic] = known
        out = TopicSample(topic, snap, sum(s.size_bytes for s in snap.segments))
        for sub in known.subscriptions:
            state = known.cursors.get(sub)
            if state is None:
                state = known.cursors[sub] = cursor_state(self.broker.io, path, sub)
            before = known.samples.get(sub)
            if not refresh and before is not None and before.backlog == 0 and before.log_version == snap.version:
                # caught up on a log that did not move: no ack, claim or delivery can change its numbers,
                # only a seek or a reset, which the subscription refresh picks up (D197)
                known.samples[sub] = out.subscriptions[sub] = before
                continue
            verify = checks or (before is not None and _active(before.doc, now_ms, self.subscription_refresh_s))
            sample = self._subscription(topic, state, snap, before, verify=verify)
            if sample is None:
                known.samples.pop(sub, None)
            else:
                known.samples[sub] = out.subscriptions[sub] = sample
        return out

    def _subscription(self, topic: TopicName, state: VersionedState, snap: Snapshot,
                      before: SubscriptionSample | None, *, verify: bool) -> SubscriptionSample | None:
        version, doc = state.latest(verify=verify)
        if doc is None or doc.get("deleted"):
            return None
        if before is not None and before.version == version and before.log_version == snap.version:
            return before
        cursor = Cursor.from_json(doc)
        backlog = backlog_messages(snap, cursor)
        first = first_unacked(snap, cursor)
        if not backlog:
            earliest = 0
        elif before is not None and before.first_unacked == first and before.earliest_ms:
            earliest = before.earliest_ms  # the same oldest message: no read
        else:  # from the segment's publish-time bounds, else one read through the shared handle
            earliest = bounded_publish_time_ms(snap, first) or 0
            if not earliest:
                earliest = publish_time_ms(self.broker.topic_log(topic, create=False), snap, first) or 0
        return SubscriptionSample(
            version=version,
            log_version=snap.version,
            backlog=backlog,
            unacked=sum(rs.count() for rs in cursor.claims.values()),
            backlog_bytes=backlog_bytes(snap, first, backlog),
            earliest_ms=earliest,
            first_unacked=first,
            doc=doc,
        )


def _now_s() -> float:
    """The clock the refresh intervals are measured on (a seam for tests and the benchmark)."""
    return time.monotonic()


def _phase(topic: TopicName) -> float:
    """Where in the refresh interval ``topic`` falls, in [0, 1): stable across processes and restarts."""
    return zlib.crc32(str(topic).encode()) / 2**32


def _active(doc: dict[str, Any], now_ms: int, window_s: float) -> bool:
    """Might the cursor commit 50 versions before the next scrape, so that cleanup takes the version
    after ours and a poll of it finds nothing?  It has a consumer whose lease is live, or it acked or
    delivered within the window: such a cursor gets its staleness check on every scrape."""
    window_ms = window_s * 1000
    try:
        recent = doc.get(activity.ACTIVITY_KEY) or {}
        if max(int(recent.get("lastAckedMs", 0)), int(recent.get("lastConsumedMs", 0))) >= now_ms - window_ms:
            return True
        return any(int(c.get("leaseExpiresMs", 0)) > now_ms for c in (doc.get("consumers") or {}).values())
    except (AttributeError, TypeError, ValueError):  # a record this version does not understand: check it
        return True


def topic_in_rates(sample: TopicSample, now_ms: int) -> tuple[float, float]:
    """(messages/s, bytes/s) published in the last minute."""
    rates = in_rates(sample.snapshot, now_ms)
    return rates.msg_rate_in, rates.msg_throughput_in


__all__ = ["Sampler", "SubscriptionSample", "TopicSample", "topic_in_rates"]
