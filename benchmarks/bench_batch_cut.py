"""Send -> durable latency of one producer at 2,000 msg/s with default batching, on the simulated
object-store profiles: when a batch cut by the publish delay goes (D79) against the rule before it,
in the same run, interleaved.

Run from the repository root::

    .venv/bin/python benchmarks/bench_batch_cut.py [--profiles standard,express] [--seconds 4] [--repeats 2]

The baseline ("hold") is the rule before D79, patched in here: a batch cut by the delay waits while
another such batch of its partition uploads.  "ride" is the current rule (``delay_cut_s``): while a
commit is in flight, a batch is cut at the last moment its upload can still make the next group
commit.  Latency is the send callback's time minus the ``send_async`` call's (the callback means
durable); the first second is warm-up.  Segment and commit PUTs per 1,000 messages are printed too
(the price of the extra uploads).  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
for extra in (_REPO, _REPO / "tests"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import numpy as np  # noqa: E402

from broker_core.client import producer_sender  # noqa: E402
from broker_core.client.client import Client  # noqa: E402
from broker_core.client.partition_queue import UPLOADING, PartitionQueue  # noqa: E402

RATE = 2000


def _hold_rule(self: Any, q: PartitionQueue, now: float) -> bool:
    """``ProducerSender._ready`` as it was before D79 (the baseline)."""
    if not q.queued:
        return False
    if self._room(q) < min(q.queued, self._batch_max_messages if self._batching else 10_000):
        return False
    if not self._batching or self._closed or q.taken < q.flush_target:
        return True
    if q.queued >= self._batch_max_messages or q.bytes >= self._batch_max_bytes:
        return True
    return now - q.batches[0].enqueued_s >= self._batch_delay_s and not any(
        item.partial and item.stage == UPLOADING for item in q.in_flight)


def run(url: str, options: dict[str, str], seconds: float) -> tuple[float, float, float]:
    """p50 and p99 of send -> durable (ms), and PUTs per 1,000 messages."""
    client = Client(url, storage_options=options)
    try:
        producer = client.create_producer("cut", batching_enabled=True, block_if_queue_full=True)
        count = int(seconds * RATE)
        sent = np.zeros(count)
        done = np.zeros(count)

        def done_at(index: int) -> Any:
            def callback(_result: Any, _msg_id: Any) -> None:
                done[index] = time.perf_counter()
            return callback

        before = dict(client._broker.io.request_counts)
        t0 = time.perf_counter()
        for i in range(count):
            delay = t0 + i / RATE - time.perf_counter()
            if delay > 0:
                time.sleep(delay)  # pacing at the offered rate, not synchronisation
            sent[i] = time.perf_counter()
            producer.send_async(b"x" * 100, done_at(i))
        producer.flush()
        puts = client._broker.io.request_counts.get("PUT", 0) - before.get("PUT", 0)
        latency = (done - sent)[RATE:] * 1000
        return float(np.percentile(latency, 50)), float(np.percentile(latency, 99)), puts * 1000 / count
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profiles", default="standard,express")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    from moto_s3 import start_moto, stop_moto

    moto = start_moto()
    os.environ.update(moto.environment)
    ride_rule = producer_sender.ProducerSender._ready
    try:
        print(f"send -> durable at {RATE:,} msg/s, default batching; load average {os.getloadavg()[0]:.1f}")
        for profile in args.profiles.split(","):
            figures: dict[str, list[tuple[float, float, float]]] = {"hold": [], "ride": []}
            for _ in range(args.repeats):
                for label, rule in (("hold", _hold_rule), ("ride", ride_rule)):
                    producer_sender.ProducerSender._ready = rule  # type: ignore[method-assign]
                    options = {**moto.storage_options, "pubsub_simulated_latency": profile}
                    figures[label].append(run(moto.fresh_root(), options, args.seconds))
            producer_sender.ProducerSender._ready = ride_rule  # type: ignore[method-assign]
            (h50, h99, hput), (r50, r99, rput) = (np.mean(figures[k], axis=0) for k in ("hold", "ride"))
            print(f"  {profile:9s} hold (before): p50 {h50:6.1f} ms  p99 {h99:6.1f} ms  PUT/1,000 {hput:5.1f}")
            print(f"  {profile:9s} ride (D79):    p50 {r50:6.1f} ms  p99 {r99:6.1f} ms  PUT/1,000 {rput:5.1f}"
                  f"   ratio p50 {r50 / h50:.2f}x  p99 {r99 / h99:.2f}x")
        print(f"load average after {os.getloadavg()[0]:.1f}")
    finally:
        stop_moto(moto)


if __name__ == "__main__":
    main()
