"""What the client's OpenTelemetry instrumentation costs on the produce and consume hot paths.

Run from the repository root::

    .venv/bin/python benchmarks/bench_client_telemetry.py [--messages 200000] [--repeats 3]

Three variants, alternated in one run on a local folder (fsync off): ``off`` (the telemetry hooks
replaced by empty functions: the code before instrumentation, plus a call), ``no SDK`` (as shipped,
no ``MeterProvider`` installed: the default for applications) and ``SDK`` (opentelemetry-sdk with an
in-memory reader). Each produces N small messages with ``send_async`` and consumes them with
``receive`` + ``acknowledge``; medians of the repeats are printed. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from broker_core import BrokerConfig, Client, InitialPosition  # noqa: E402
from broker_core.client import telemetry  # noqa: E402


def round_trip(n: int) -> tuple[float, float]:
    client = Client(tempfile.mkdtemp(prefix="bench-otel-"), broker_config=BrokerConfig(fsync_enabled=False))
    try:
        consumer = client.subscribe("t", "s", initial_position=InitialPosition.Earliest)
        producer = client.create_producer("t", block_if_queue_full=True, max_pending_messages=10_000)
        payload = b"x" * 64
        started = time.perf_counter()
        for _ in range(n):
            producer.send_async(payload, None)
        producer.flush()
        produce_s = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(n):
            consumer.acknowledge(consumer.receive(timeout_millis=30_000))
        consume_s = time.perf_counter() - started
        return n / produce_s, n / consume_s
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    shipped = {name: getattr(telemetry, name) for name in ("record_sent", "lookup", "_sdk_installed")}
    instruments = {name: getattr(telemetry, name) for name in dir(telemetry) if name.isupper() and name != "T"}

    def empty(*_args: Any, **_kwargs: Any) -> None:
        return None

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("bench")

    def variant(name: str) -> None:
        for key, fn in {**shipped, **instruments}.items():
            setattr(telemetry, key, fn)
        if name == "off":  # the hooks emptied (a consumer's received counting stays off, as without an SDK)
            telemetry.record_sent = empty  # type: ignore[assignment]
            telemetry.lookup = lambda _transport, _kind, fn: fn()  # type: ignore[assignment]
        elif name == "SDK":
            telemetry.create_instruments(meter)
            telemetry._sdk_installed = lambda: True  # type: ignore[assignment]

    figures: dict[str, list[tuple[float, float]]] = {"off": [], "no SDK": [], "SDK": []}
    round_trip(10_000)  # warm up imports and caches
    for _ in range(args.repeats):
        for name in figures:
            variant(name)
            figures[name].append(round_trip(args.messages))
            reader.get_metrics_data()  # a collection (the observed instruments' callbacks), untimed
    variant("no SDK")
    print(f"{args.messages:,} messages of 64 bytes, median of {args.repeats}")
    for name, runs in figures.items():
        produce = statistics.median(r[0] for r in runs)
        consume = statistics.median(r[1] for r in runs)
        print(f"  {name:7s} produce {produce:10,.0f} msg/s   consume (receive+ack) {consume:10,.0f} msg/s")


if __name__ == "__main__":
    main()
