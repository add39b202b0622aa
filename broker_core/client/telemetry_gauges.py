"""The client metrics that describe a state, not an event: observed when the SDK collects.

PIP-342's ``pulsar.client.producer.message.pending.count``/``.size`` and
``pulsar.client.consumer.receive_queue.count``/``.size`` are up-down counters, and
``pulsar.client.consumer.message.received.count``/``.size`` counters.  Kept as synchronous instruments,
each would be an ``add`` on the send and receive paths for every message, twice (in and out of the
queue).  Instead they are *asynchronous* instruments of the same kinds (``ObservableUpDownCounter``,
``ObservableCounter``: exported as the same non-monotonic and monotonic sums): the SDK calls these
callbacks at each collection, and they read the live producers' and consumers' queues.  Without an
SDK nothing ever calls them, and the hot paths pay nothing (received messages are counted into two
ints of the consumer, and only while an SDK is installed: ``Consumer._metered``).

Several handles with the same attributes (two producers of one topic) are summed; an attribute set
whose handles have all closed is reported as 0 from then on (an up-down counter's value once its
queue is gone), and a closed consumer's received totals stay in the sum (a counter never goes down).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

_Key = frozenset[tuple[str, Any]]

_LOCK = threading.Lock()
_PRODUCERS: weakref.WeakSet[Any] = weakref.WeakSet()
_CONSUMERS: weakref.WeakSet[Any] = weakref.WeakSet()
_SEEN: dict[str, dict[_Key, dict[str, Any]]] = {}  # per instrument: every attribute set reported so far
_RECEIVED_CLOSED: dict[_Key, list[int]] = {}  # closed consumers' received [count, bytes], per attribute set


def _remember(names: tuple[str, ...], attrs: dict[str, Any]) -> None:
    """Report ``attrs`` under ``names`` from now on (0 once no handle has them). Call with ``_LOCK`` held."""
    for name in names:
        _SEEN.setdefault(name, {}).setdefault(frozenset(attrs.items()), attrs)


def track_producer(producer: Any) -> None:
    """Observe ``producer`` (its ``_telemetry`` attributes, ``_lock`` and ``_queues``) until it closes."""
    with _LOCK:
        _PRODUCERS.add(producer)
        _remember(("pending.count", "pending.size"), producer._telemetry)


def track_consumer(consumer: Any) -> None:
    """Observe ``consumer`` (its ``_telemetry``, ``_lock``, ``_queue`` and received totals) until it closes."""
    with _LOCK:
        _CONSUMERS.add(consumer)
        _remember(("receive_queue.count", "receive_queue.size", "received.count", "received.size"),
                  consumer._telemetry)


def untrack_producer(producer: Any) -> None:
    with _LOCK:
        _PRODUCERS.discard(producer)


def untrack_consumer(consumer: Any) -> None:
    """Stop observing ``consumer``; its received totals stay in the counters' sums."""
    with _LOCK:
        if consumer in _CONSUMERS:
            _CONSUMERS.discard(consumer)
            totals = _RECEIVED_CLOSED.setdefault(frozenset(consumer._telemetry.items()), [0, 0])
            totals[0] += consumer._received_count
            totals[1] += consumer._received_bytes


def _pending(producer: Any) -> tuple[int, int]:
    """Messages and bytes accepted by ``send``/``send_async`` and not yet resolved (queued or in flight)."""
    with producer._lock:
        count = size = 0
        for q in producer._queues:
            count += q.queued + q.in_flight_messages
            size += q.bytes + sum(item.batch.bytes for item in q.in_flight)
        return count, size


def _queued(consumer: Any) -> tuple[int, int]:
    """Messages and payload bytes in ``consumer``'s receiver queue."""
    with consumer._lock:
        msgs = list(consumer._queue)
    return len(msgs), sum(len(m.data()) for m in msgs)


def _observe(name: str, handles: Iterable[Any], value: Callable[[Any], int],
             base: dict[_Key, int] | None = None) -> list[Observation]:
    """One observation per attribute set: the sum over ``handles`` (plus ``base``), 0 for a set seen
    before whose handles are gone."""
    totals: dict[_Key, int] = dict(base or {})
    for handle in handles:
        key = frozenset(handle._telemetry.items())
        totals[key] = totals.get(key, 0) + value(handle)
    with _LOCK:
        seen = list(_SEEN.get(name, {}).items())
    return [Observation(totals.get(key, 0), attributes) for key, attributes in seen]


def _live(handles: weakref.WeakSet[Any]) -> list[Any]:
    with _LOCK:
        return list(handles)


def observe_pending_count(_options: CallbackOptions) -> Iterable[Observation]:
    return _observe("pending.count", _live(_PRODUCERS), lambda p: _pending(p)[0])


def observe_pending_size(_options: CallbackOptions) -> Iterable[Observation]:
    return _observe("pending.size", _live(_PRODUCERS), lambda p: _pending(p)[1])


def observe_queue_count(_options: CallbackOptions) -> Iterable[Observation]:
    return _observe("receive_queue.count", _live(_CONSUMERS), lambda c: _queued(c)[0])


def observe_queue_size(_options: CallbackOptions) -> Iterable[Observation]:
    return _observe("receive_queue.size", _live(_CONSUMERS), lambda c: _queued(c)[1])


def observe_received_count(_options: CallbackOptions) -> Iterable[Observation]:
    with _LOCK:
        base = {key: totals[0] for key, totals in _RECEIVED_CLOSED.items()}
    return _observe("received.count", _live(_CONSUMERS), lambda c: c._received_count, base)


def observe_received_size(_options: CallbackOptions) -> Iterable[Observation]:
    with _LOCK:
        base = {key: totals[1] for key, totals in _RECEIVED_CLOSED.items()}
    return _observe("received.size", _live(_CONSUMERS), lambda c: c._received_bytes, base)


__all__ = [
    "observe_pending_count", "observe_pending_size", "observe_queue_count", "observe_queue_size",
    "observe_received_count", "observe_received_size", "track_consumer", "track_producer", "untrack_consumer",
    "untrack_producer",
]
