"""``Client``'s construction and the state its producers, consumers and readers share.

``Client(service_url, ...)`` takes the official client's arguments (type-checked, the network ones
otherwise ignored: ``docs/CLIENT.md``) and opens the process's ``Broker`` of the root.  What is here
is exactly what a handle may use of its client (``context.HandleOwner``): the broker, the clock, the
poll interval and the set of open handles that ``close`` closes.  ``Client`` (``client.py``) adds
``create_producer``, ``create_reader``, ``create_table_view`` and ``subscribe``.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Mapping
from typing import Any

from broker_core.authentication import check_authentication
from broker_core.broker.broker import Broker
from broker_core.client import telemetry
from broker_core.client.args import (
    check_positive,
    check_type,
    check_type_or_none,
)
from broker_core.client.loggers import check_logger
from broker_core.clock import SYSTEM_CLOCK, Clock
from broker_core.config.settings import BrokerConfig
from broker_core.errors import AlreadyClosed, InvalidConfiguration, OperationNotSupported, PulsarException
from broker_core.naming import TopicName
from broker_core.storage.fork import created_before_fork, on_fork_in_child
from broker_core.topic.topic_log import TopicLog


class ClientCore:
    """A client's construction and the state its handles share; ``Client`` adds the factories on top."""

    _created_before_fork = False  # set in a forked child on every client and handle of the parent

    def __init__(
        self,
        service_url: str,
        authentication: Any = None,
        operation_timeout_seconds: int = 30,
        io_threads: int = 1,
        message_listener_threads: int = 1,
        concurrent_lookup_requests: int = 50000,
        log_conf_file_path: str | None = None,
        stats_interval_in_seconds: int = 600,
        use_tls: bool = False,
        tls_trust_certs_file_path: str | None = None,
        tls_allow_insecure_connection: bool = False,
        tls_validate_hostname: bool = False,
        logger: Any = None,
        connection_timeout_ms: int = 10000,
        listener_name: str | None = None,
        tls_private_key_file_path: str | None = None,
        tls_certificate_file_path: str | None = None,
        *,
        broker_config: BrokerConfig | str | os.PathLike[str] | None = None,
        clock: Clock | None = None,
        reader_poll_interval_ms: int = 10,
        create_root: bool = False,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        check_type(str, service_url, "service_url")
        check_authentication(authentication)  # warns: nobody authenticates here
        check_logger(logger)
        check_positive(operation_timeout_seconds, "operation_timeout_seconds")
        check_positive(io_threads, "io_threads")
        check_positive(message_listener_threads, "message_listener_threads")
        check_positive(concurrent_lookup_requests, "concurrent_lookup_requests")
        check_type_or_none(str, log_conf_file_path, "log_conf_file_path")
        check_positive(stats_interval_in_seconds, "stats_interval_in_seconds", allow_zero=True)
        check_type(bool, use_tls, "use_tls")
        check_type_or_none(str, tls_trust_certs_file_path, "tls_trust_certs_file_path")
        check_type(bool, tls_allow_insecure_connection, "tls_allow_insecure_connection")
        check_type(bool, tls_validate_hostname, "tls_validate_hostname")
        check_positive(connection_timeout_ms, "connection_timeout_ms")
        check_type_or_none(str, listener_name, "listener_name")
        check_type_or_none(str, tls_private_key_file_path, "tls_private_key_file_path")
        check_type_or_none(str, tls_certificate_file_path, "tls_certificate_file_path")
        check_type_or_none((BrokerConfig, str, os.PathLike), broker_config, "broker_config")
        if clock is not None and not isinstance(clock, Clock):
            raise InvalidConfiguration(
                f"argument 'clock' must be a Clock (with now_ms() and monotonic_s()), got "
                f"{type(clock).__name__} {clock!r}",
                argument="clock",
            )
        check_positive(reader_poll_interval_ms, "reader_poll_interval_ms")
        check_type(bool, create_root, "create_root")
        try:
            self._broker = Broker.for_url(
                service_url, broker_config, create_root=create_root, storage_options=storage_options
            )
        except PulsarException as exc:  # the "connection" failed: the root could not be opened (D191)
            telemetry.CONNECTIONS_FAILED.add(1, {"pulsar.failure.type": telemetry.failure_type(exc)})
            raise
        telemetry.CONNECTIONS_OPENED.add(1)
        self._transport = telemetry.transport_type(self._broker.io)
        self._clock: Clock = clock or SYSTEM_CLOCK
        self._poll_ms = reader_poll_interval_ms
        self._closed = False
        self._lock = threading.Lock()
        self._handles: weakref.WeakSet[Any] = weakref.WeakSet()
        _CLIENTS.add(self)

    def _check_open(self) -> None:
        if self._closed:
            if self._created_before_fork:
                raise created_before_fork("this Client")
            raise AlreadyClosed("the client is closed; create a new Client")

    def _topic_dir(self, topic: TopicName) -> str:
        return "/".join(topic.relative_path())

    def _forget(self, handle: Any) -> None:
        with self._lock:
            self._handles.discard(handle)

    def _resolve(self, topic: str) -> tuple[TopicName, list[TopicName]]:
        check_type(str, topic, "topic")
        name = TopicName.parse(topic)
        if not name.is_persistent:
            raise OperationNotSupported(
                f"{name} is non-persistent: non-persistent topics arrive with subscriptions; use a persistent:// topic",
                topic=str(name),
            )
        return name, self._lookup_partitions(name)

    def _lookup_partitions(self, topic: TopicName) -> list[TopicName]:
        """A topic's internal topics (auto-creating per the broker config): a "metadata" lookup (D192)."""
        return telemetry.lookup(self._transport, "metadata", lambda: self._broker.partitions(topic))

    def _lookup_log(self, topic: TopicName) -> TopicLog:
        """The shared log of an internal topic, created if needed and allowed: a "topic" lookup (D192)."""
        return telemetry.lookup(self._transport, "topic", lambda: self._broker.topic_log(topic))

    def get_topic_partitions(self, topic: str) -> list[str]:
        """Partition names of a partitioned topic, or ``[topic]`` for a non-partitioned one."""
        self._check_open()
        if not TopicName.parse(check_type(str, topic, "topic")).is_persistent:
            return [str(p) for p in self._broker.partitions(TopicName.parse(topic))]
        _, partitions = self._resolve(topic)
        return [str(p) for p in partitions]

    def close(self) -> None:
        """Close every producer (flushing it) and reader of this client."""
        if self._closed:
            return
        with self._lock:
            handles = list(self._handles)
        for handle in handles:
            handle.close()
        self._closed = True
        telemetry.CONNECTIONS_CLOSED.add(1)

    def shutdown(self) -> None:
        """Close without waiting for more than the pending flushes (same as ``close`` here)."""
        self.close()


_CLIENTS: weakref.WeakSet[ClientCore] = weakref.WeakSet()


def _close_inherited() -> None:
    """In a forked child, every client and handle of the parent is closed by the fork: their threads
    are gone and their locks may be held for good, so each use raises ``CreatedBeforeFork`` at once
    (each public method checks ``_closed`` before it takes a lock), and ``close()`` returns at once,
    touching nothing the parent still owns (its producer registrations, its consumers' claims)."""
    for client in list(_CLIENTS):
        for thing in [*client._handles, client]:
            with contextlib.suppress(AttributeError):  # one that cannot be marked must not stop the others
                thing._created_before_fork = True
                thing._closed = True
    _CLIENTS.clear()


on_fork_in_child(_close_inherited)


__all__ = ["ClientCore"]
