"""Serve the collector over HTTP, or render it once (``pubsub metrics serve`` / ``dump``).

The server is ``prometheus_client``'s, on a registry of its own holding only this root's collector
(no process or platform collectors: the numbers describe the root, not the exporter's process).  It
binds 127.0.0.1 unless told otherwise: the metrics name every topic and subscription of the root.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, generate_latest, start_http_server

from broker_core.errors import InvalidConfiguration
from broker_core.metrics.collector import PulsarCollector


@dataclass
class RunningExporter:
    """A serving exporter: its address, and ``close`` to stop it."""

    host: str
    port: int
    server: WSGIServer
    thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def registry_for(collector: PulsarCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def exposition(collector: PulsarCollector) -> str:
    """One scrape, rendered in Prometheus's text format."""
    return generate_latest(registry_for(collector)).decode("utf-8")


def serve(collector: PulsarCollector, *, host: str = "127.0.0.1", port: int = 0) -> RunningExporter:
    """Start serving ``/metrics`` on a daemon thread (``port`` 0: any free port; see ``.port``).

    Raises:
        InvalidConfiguration: the port is not 0-65535, or it cannot be bound (in use, not allowed).
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InvalidConfiguration(f"metrics port {port!r} is not a TCP port: use 0-65535 (0: any free port)",
                                   port=port)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry_for(collector))
    except OSError as exc:
        raise InvalidConfiguration(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}; choose another --port or --host",
            port=port, host=host,
        ) from exc
    return RunningExporter(host, int(server.server_address[1]), server, thread)


__all__ = ["RunningExporter", "exposition", "registry_for", "serve"]
