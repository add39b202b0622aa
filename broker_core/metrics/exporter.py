"""Serve the collector over HTTP, or render it once (``pubsub metrics serve`` / ``dump``).

The server is a small threading HTTP server answering ``GET /metrics`` with the collector's own
rendering (``PulsarCollector.render``: ``prometheus_client``'s formatter takes seconds on ten
thousand topics).  Only this root's metrics are served (no process or platform collectors: the
numbers describe the root, not the exporter's process).  It binds 127.0.0.1 unless told otherwise:
the metrics name every topic and subscription of the root.  Scrapes are serialised: one storage
pass at a time, whatever the number of scrapers.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from broker_core.errors import InvalidConfiguration
from broker_core.metrics.collector import PulsarCollector

_LOG = logging.getLogger(__name__)


@dataclass
class RunningExporter:
    """A serving exporter: its address, and ``close`` to stop it."""

    host: str
    port: int
    server: ThreadingHTTPServer
    thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def registry_for(collector: PulsarCollector) -> CollectorRegistry:
    """A ``prometheus_client`` registry holding only ``collector`` (for ``generate_latest`` and friends)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def exposition(collector: PulsarCollector) -> str:
    """One scrape, rendered in Prometheus's text format."""
    return collector.render()


def _handler(collector: PulsarCollector, lock: threading.Lock) -> type[BaseHTTPRequestHandler]:
    class MetricsHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404, "only /metrics is served")
                return
            try:
                with lock:
                    body = collector.render().encode("utf-8")
            except Exception as exc:  # a scrape that fails says so; the server keeps serving
                _LOG.exception("metrics scrape failed")
                self.send_error(500, f"scrape failed: {type(exc).__name__}")
                return
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            _LOG.debug("metrics: " + format, *args)

    return MetricsHandler


def serve(collector: PulsarCollector, *, host: str = "127.0.0.1", port: int = 0) -> RunningExporter:
    """Start serving ``/metrics`` on a daemon thread (``port`` 0: any free port; see ``.port``).

    Raises:
        InvalidConfiguration: the port is not 0-65535, or it cannot be bound (in use, not allowed).
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InvalidConfiguration(f"metrics port {port!r} is not a TCP port: use 0-65535 (0: any free port)",
                                   port=port)
    try:
        server = ThreadingHTTPServer((host, port), _handler(collector, threading.Lock()))
    except OSError as exc:
        raise InvalidConfiguration(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}; choose another --port or --host",
            port=port, host=host,
        ) from exc
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="pubsub-metrics", daemon=True)
    thread.start()
    return RunningExporter(host, int(server.server_address[1]), server, thread)


__all__ = ["RunningExporter", "exposition", "registry_for", "serve"]
