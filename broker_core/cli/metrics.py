"""``pubsub metrics serve|dump``: Pulsar's Prometheus metrics of a root, computed from storage."""

from __future__ import annotations

import argparse
import contextlib
import threading
from typing import Any

from broker_core.cli.common import Context, Output, UsageError, add_command, add_group, seconds

_EPILOG = (
    "metrics: pulsar_rate_in/out, pulsar_throughput_in/out, pulsar_in_messages_total, pulsar_storage_size,\n"
    "pulsar_storage_backlog_size, pulsar_storage_backlog_age_seconds, pulsar_msg_backlog,\n"
    "pulsar_subscription_back_log, _unacked_messages, _msg_rate_out, _msg_throughput_out, _msg_rate_redeliver\n"
    "(labels cluster, namespace, topic[, subscription]); see docs/CLI.md \"Metrics\".\n\n"
    "examples:\n  pubsub metrics serve --port 9092\n  pubsub metrics dump --namespace public/default"
)


def register(commands: Any) -> None:
    group = add_group(commands, "metrics", help="Pulsar's Prometheus metrics of the root (serve, dump)")
    serve = add_command(
        group, "serve", help="serve /metrics over HTTP until interrupted", handler=_serve, epilog=_EPILOG,
        description="Serve Pulsar's topic and subscription metrics of the root on http://HOST:PORT/metrics, "
        "computed at each scrape from the logs and cursors (an unchanged topic costs one read of its next "
        "log version plus one per subscription). Runs until interrupted (Ctrl-C).",
    )
    serve.add_argument("--port", type=_port, required=True, metavar="P", help="TCP port (0: any free port)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    dump = add_command(group, "dump", help="print one scrape in Prometheus's text format", handler=_dump,
                       epilog=_EPILOG)
    for parser in (serve, dump):
        parser.add_argument("--namespace", action="append", metavar="TENANT/NAMESPACE",
                            help="only this namespace (repeatable; default: every namespace)")
        parser.add_argument("--cluster", help="the cluster label (default: the broker setting clusterName)")
        parser.add_argument("--inventory-refresh", type=seconds, default=60, metavar="SECONDS",
                            help="re-list topics this often, e.g. 30s or 5m (default 60s)")
        parser.add_argument("--subscription-refresh", type=seconds, default=300, metavar="SECONDS",
                            help="re-list each topic's subscriptions and check its cached versions this often, "
                                 "spread over the interval (default 5m)")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port: use 0-65535 (0: any free port)")
    return port


def _collector(ctx: Context, args: argparse.Namespace) -> Any:
    try:
        from broker_core.metrics.collector import PulsarCollector
        from broker_core.metrics.exporter import serve  # noqa: F401 (fails here, not later, without the extra)
        from broker_core.metrics.sampling import Sampler
    except ImportError as exc:  # prometheus_client is the ``metrics`` extra
        raise UsageError(f"pubsub metrics needs prometheus_client ({exc}): "
                         "pip install 'spark-pubsub[metrics]'") from exc
    broker = ctx.broker
    sampler = Sampler(broker, namespaces=args.namespace, inventory_refresh_s=float(args.inventory_refresh),
                      subscription_refresh_s=float(args.subscription_refresh))
    return PulsarCollector(sampler, cluster=args.cluster or broker.config.cluster_name)


def _dump(ctx: Context, args: argparse.Namespace) -> Output:
    collector = _collector(ctx, args)
    text = collector.render()
    return Output({"exposition": text, "scrapeSeconds": collector.last_duration_s,
                   "storageRequests": collector.last_requests}, text.rstrip("\n").splitlines())


def _serve(ctx: Context, args: argparse.Namespace) -> Output:
    collector = _collector(ctx, args)
    from broker_core.metrics.exporter import serve

    running = serve(collector, host=args.host, port=args.port)  # a port in use: InvalidConfiguration
    print(f"serving Pulsar metrics of {ctx.broker.io.root_uri} on {running.url} (Ctrl-C stops)", flush=True)
    try:
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how the server is stopped
            threading.Event().wait()
    finally:
        running.close()
    return Output({"url": running.url, "stopped": True}, ["stopped"])


__all__ = ["register"]
