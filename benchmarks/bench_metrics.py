"""How long a metrics scrape of many topics takes, and how many storage requests it makes.

Run from the repository root::

    .venv/bin/python benchmarks/bench_metrics.py [--topics 10000] [--s3] [--baseline-topics N]

It fills a root with N tiny topics (one message and one subscription each, written directly through the
topic logs and cursor stores so the set-up takes seconds), then times, in one run:

a. a cold scrape (a fresh exporter: lists the inventory, opens every log and cursor);
b. warm scrapes (nothing changed: one poll of each log's and cursor's next version);
c. one scrape that also refreshes the inventory (what every scrape is at intervals of
   ``--inventory-refresh``, 60 s, or more);
d. the baseline: a loop calling ``broker.stats.topic_stats`` (what ``pubsub topics stats`` runs) per
   topic, on its own fresh broker, for ``--baseline-topics`` topics (default all), scaled to N.

Before (a) and (d) the process's shared handles are dropped, as in a fresh process.  With ``--s3``
the root is on the moto S3 emulator (started here) and requests are counted per type; every handle's
idle staleness checks are then due at each poll, as they are at scrape intervals above their 10 s
period (Prometheus scrapes every 15-60 s), unless ``--checks-as-opened`` is given; ``--latency
express`` adds S3 Express's 10 ms to each of the scrapes' requests (the emulator answers in about one,
on the same cores), which is where the sampler's ``--threads`` show.
This is a benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
for extra in (_REPO, _REPO / "tests"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import pyarrow as pa  # noqa: E402

from broker_core.broker import handles  # noqa: E402
from broker_core.broker.admin import Admin  # noqa: E402
from broker_core.broker.broker import Broker  # noqa: E402
from broker_core.broker.root import resolve_root  # noqa: E402
from broker_core.broker.stats import topic_stats  # noqa: E402
from broker_core.config import BrokerConfig  # noqa: E402
from broker_core.log import state_store, transaction_log  # noqa: E402
from broker_core.metrics.collector import PulsarCollector  # noqa: E402
from broker_core.metrics.exporter import exposition  # noqa: E402
from broker_core.metrics.sampling import Sampler  # noqa: E402
from broker_core.naming import TopicName  # noqa: E402
from broker_core.producer.bulk import to_segment_rows  # noqa: E402
from broker_core.subscription.cursor import ConsumerType, new_cursor  # noqa: E402


def fill(broker: Broker, n: int, *, caught_up: bool = False) -> list[TopicName]:
    """``n`` topics of one message and one subscription, which has it in its backlog unless ``caught_up``."""
    broker.admin.list_tenants()  # creates public/default
    names = [TopicName.parse(f"persistent://public/default/t{i:05d}") for i in range(n)]
    rows, _ = to_segment_rows(pa.table({"value": [b"x"]}), publish_time_ms=int(time.time() * 1000),
                              max_message_size=1 << 20, default_producer="bench")
    for name in names:
        broker.topic_log(name).append(rows, layout=[1])
        broker.cursor_store(name, "s").update(lambda _c: new_cursor("s", ConsumerType.Shared, 1 if caught_up else 0))
    return names


def fresh_broker(url: str, options: dict[str, str]) -> Broker:
    """A broker of its own, with the process's shared handles dropped (as in a fresh process)."""
    handles._TOPIC_LOGS, handles._CURSOR_STORES = {}, {}
    gc.collect()  # the dropped handles' cycles: a fresh process would not have them to collect
    root = resolve_root(url, BrokerConfig(fsync_enabled=False), storage_options=options)
    return Broker(root.io, root.config, admin=Admin(root.io, root.config))


def requests(broker: Broker) -> dict[str, int]:
    io: Any = broker.io
    return dict(getattr(io, "request_counts", {}))


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}


def steady(collector: PulsarCollector, broker: Broker, n: int, interval_s: float = 60.0) -> None:
    """Scrapes ``interval_s`` apart on the sampler's refresh clock (Prometheus's default interval), over
    one subscription-refresh interval: the requests a topic costs per scrape on average, with each
    topic's refresh (subscription listing and staleness checks) falling on one of those scrapes.

    The sampler's clock is left running ahead of the real one afterwards: the refresh times it keeps
    are on it, and a clock that went back would make every refresh wait."""
    from broker_core.metrics import sampling

    real, offset = sampling._now_s, [0.0]
    sampling._now_s = lambda: real() + offset[0]
    scrapes = max(1, round(collector.sampler.subscription_refresh_s / interval_s))
    per_scrape = []
    for _ in range(scrapes):
        offset[0] += interval_s
        before = requests(broker)
        exposition(collector)
        per_scrape.append(sum(delta(requests(broker), before).values()) / n)
    if broker.io.is_local:
        print(f"  {scrapes} scrapes {interval_s:.0f} s apart: n/a (local)")
    else:
        print(f"  {scrapes} scrapes {interval_s:.0f} s apart (one subscription refresh): "
              f"{sum(per_scrape) / scrapes:.2f} requests per topic per scrape on average "
              f"(each scrape: {', '.join(f'{x:.2f}' for x in per_scrape)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=None, help="default 10,000 (1,000 with --s3)")
    parser.add_argument("--s3", action="store_true", help="on the moto S3 emulator, counting requests")
    parser.add_argument("--baseline-topics", type=int, default=None, help="topics the baseline loop covers")
    parser.add_argument("--warm", type=int, default=3, help="warm scrapes")
    parser.add_argument("--latency", choices=["standard", "express"], default=None,
                        help="on S3, the scrapes' simulated request latency (pubsub_simulated_latency)")
    parser.add_argument("--threads", type=int, default=8, help="the sampler's threads on S3")
    parser.add_argument("--caught-up", action="store_true",
                        help="subscriptions that have consumed the topic's message (no backlog)")
    parser.add_argument("--steady", action="store_true",
                        help="also scrape a simulated minute apart over one subscription refresh (requests on S3)")
    parser.add_argument("--checks-as-opened", action="store_true",
                        help="on S3, leave the handles' staleness checks on their 10 s period")
    args = parser.parse_args()
    n = args.topics or (1_000 if args.s3 else 10_000)
    if args.s3 and not args.checks_as_opened:  # as if every scrape came 10 s or more after the last
        transaction_log.verify_period_s = state_store.verify_period_s = lambda _io: 0.0
    moto = None
    if args.s3:
        from moto_s3 import start_moto

        moto = start_moto()
        os.environ.update(moto.environment)
        url, options = moto.fresh_root(), moto.storage_options
    else:
        url, options = tempfile.mkdtemp(prefix="bench-metrics-"), {}
    try:
        started = time.perf_counter()
        names = fill(fresh_broker(url, options), n, caught_up=args.caught_up)
        print(f"{n:,} topics on {'S3 (moto)' if args.s3 else 'a local folder'}, filled in "
              f"{time.perf_counter() - started:.1f} s; load average {os.getloadavg()[0]:.1f}")

        if args.latency:
            options = {**options, "pubsub_simulated_latency": args.latency}
        broker = fresh_broker(url, options)
        collector = PulsarCollector(Sampler(broker, threads=args.threads))
        before = requests(broker)
        started = time.perf_counter()
        text = exposition(collector)
        cold_s = time.perf_counter() - started
        got = delta(requests(broker), before)
        per_topic = f", {sum(got.values()) / n:.2f} per topic" if got else ""
        print(f"  cold scrape: {cold_s:6.2f} s  (storage part {collector.last_duration_s:.2f} s, "
              f"{len(text) / 1e6:.1f} MB of exposition) requests {got or 'n/a (local)'}{per_topic}")
        for i in range(args.warm):
            before = requests(broker)
            started = time.perf_counter()
            exposition(collector)
            warm_s = time.perf_counter() - started
            got = delta(requests(broker), before)
            per_topic = f", {sum(got.values()) / n:.2f} per topic" if got else ""
            print(f"  warm scrape {i + 1}: {warm_s:6.2f} s  (storage part {collector.last_duration_s:.2f} s) "
                  f"requests {got or 'n/a (local)'}{per_topic}")

        if args.steady:  # (the sampler's clock runs ahead of the real one from here on)
            steady(collector, broker, n)
        collector.sampler.inventory_refresh_s = collector.sampler.subscription_refresh_s = 0.0
        before = requests(broker)
        started = time.perf_counter()
        exposition(collector)
        got = delta(requests(broker), before)
        per_topic = f", {sum(got.values()) / n:.2f} per topic" if got else ""
        print(f"  scrape refreshing the inventory: {time.perf_counter() - started:6.2f} s  "
              f"requests {got or 'n/a (local)'}{per_topic}")

        m = min(n, args.baseline_topics or n)
        baseline = fresh_broker(url, options)
        before = requests(baseline)
        started = time.perf_counter()
        for name in names[:m]:
            topic_stats(baseline, name)
        base_s = time.perf_counter() - started
        got = delta(requests(baseline), before)
        print(f"  baseline, topic_stats per topic over {m:,} topics: {base_s:6.2f} s "
              f"(scaled to {n:,}: {base_s * n / m:.2f} s) requests {got or 'n/a (local)'}; "
              f"load average {os.getloadavg()[0]:.1f}")
    finally:
        if moto is not None:
            from moto_s3 import stop_moto

            stop_moto(moto)
        else:
            shutil.rmtree(url, ignore_errors=True)


if __name__ == "__main__":
    main()
