"""Object-store roots against a local root, in one run: commits/s, end-to-end latency, producer
throughput and requests per 1,000 messages.

Run from the repository root::

    .venv/bin/python benchmarks/bench_object_store.py [--seconds S] [--quick] [--only a|b|c|d ...] [--kinds ...]

Roots (each measured in the same run, interleaved, so machine load hits them alike):

- ``local``: a temporary folder (fsync on, the default) - the baseline;
- ``moto``: S3 emulated by ``moto_server`` on 127.0.0.1 (about a millisecond per request);
- ``standard`` / ``express``: the emulator behind the ``pubsub_simulated_latency`` profiles
  (GET/HEAD/LIST 30 ms and PUT 80 ms; 10 ms each), the small-object times of S3 Standard and S3
  Express One Zone.

Measurements:

a. commits/s: ``TopicLog.append`` of 100 rows, one after another (requests per commit by type);
b. send -> receive -> ack latency (p50/p99): one producer (this process) sending 100-byte messages at
   2,000 msg/s with default batching, one consumer in another process acknowledging each message;
   the latency of a message is its receive time minus its publish time (one machine, one clock);
   the consumer's share is printed beside it: from the producer's callback for the commit that made
   the message visible (just after the commit's PUT and the deletion-tombstone HEAD that follows
   it, so a round trip after the object appeared) to the receive;
c. producer throughput on one partition and on 8, configured for throughput (``max_pending_messages``
   10,000, batches of 1,000), and with the default configuration;
d. requests per 1,000 messages produced (c) and consumed + acknowledged (b), per request type, and
   the requests per second of an idle subscription (the cost model in docs/PROTOCOL.md uses them).

Goals from issue #13 are printed as MET or MISSED.  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
for extra in (_REPO, _REPO / "tests", _REPO / "tests" / "broker_core"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import numpy as np  # noqa: E402

from broker_core.client.client import Client  # noqa: E402
from broker_core.storage import file_io_for  # noqa: E402
from broker_core.topic.topic_log import TopicLog  # noqa: E402

GOALS_MS = {"standard": (400, 800), "express": (150, 300)}
THROUGHPUT_GOAL = {"standard": 20_000}
VALUE = b"x" * 100


def _root(kind: str, tmp: str, moto: Any) -> tuple[str, dict[str, str]]:
    if kind == "local":
        path = os.path.join(tmp, f"local-{uuid.uuid4().hex[:8]}")
        os.makedirs(path)  # a missing local root is an error (RootNotFound), as a missing bucket is
        return path, {}
    options = dict(moto.storage_options)
    if kind in ("standard", "express"):
        options["pubsub_simulated_latency"] = kind
    return moto.fresh_root(), options


def _counts(client: Client) -> dict[str, int]:
    return dict(getattr(client._broker.io, "request_counts", {}))


def _delta(after: dict[str, int], before: dict[str, int], per: float) -> dict[str, float]:
    return {k: round((after[k] - before.get(k, 0)) * per, 1) for k in after if after[k] - before.get(k, 0)}


def commits_per_s(url: str, options: dict[str, str], commits: int) -> tuple[float, dict[str, float]]:
    io = file_io_for(url, storage_options=options)
    log = TopicLog(io, "public/default/persistent/bench-commits")
    log.create(name="persistent://public/default/bench-commits")
    rows = 100
    before = dict(getattr(io, "request_counts", {}))
    t0 = time.perf_counter()
    for _ in range(commits):
        _append(log, rows)
    elapsed = time.perf_counter() - t0
    after = dict(getattr(io, "request_counts", {}))
    return commits / elapsed, _delta(after, before, 1 / commits) if after else {}


def _append(log: TopicLog, rows: int) -> None:
    from log_helpers import producer_table

    log.append(producer_table("bench", list(range(rows))), layout=[rows], dedup=False)


def throughput(url: str, options: dict[str, str], messages: int, partitions: int,
               tuned: bool) -> tuple[float, dict[str, float]]:
    client = Client(url, storage_options=options)
    try:
        topic = f"tp-{uuid.uuid4().hex[:6]}"
        if partitions > 1:
            client._broker.admin.create_partitioned_topic(topic, partitions)
        config: dict[str, Any] = {"batching_enabled": True, "block_if_queue_full": True}
        if tuned:
            config.update(max_pending_messages=10_000, batching_max_messages=1_000,
                          batching_max_allowed_size_in_bytes=1 << 20)
        producer = client.create_producer(topic, **config)
        before = _counts(client)
        t0 = time.perf_counter()
        for i in range(messages):
            producer.send_async(VALUE, None, partition_key=str(i % 64) if partitions > 1 else None)
        producer.flush()
        elapsed = time.perf_counter() - t0
        after = _counts(client)
        producer.close()
        return messages / elapsed, _delta(after, before, 1000 / messages) if after else {}
    finally:
        client.close()


def consumer_main(args: dict[str, Any]) -> None:
    """The consumer process of (b): receive and ack ``count`` messages, print latencies and requests;
    each receive time goes to ``args["out"]`` by sequence id (for the commit -> receive split)."""
    client = Client(args["url"], storage_options=args["options"])
    consumer = client.subscribe("e2e", "bench")
    print("ready", flush=True)
    before = _counts(client)
    latencies = []
    received = np.zeros(args["count"], dtype=np.float64)
    for _ in range(args["count"]):
        msg = consumer.receive(timeout_millis=120_000)
        now_s = time.time()
        consumer.acknowledge(msg)
        latencies.append(now_s * 1000 - msg.publish_timestamp())
        if 0 <= msg.sequence_id() < args["count"]:
            received[msg.sequence_id()] = now_s
    after = _counts(client)
    np.save(args["out"], received)
    lat = np.array(latencies)
    print(json.dumps({"p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99)),
                      "requests": _delta(after, before, 1000 / args["count"]) if after else {}}), flush=True)
    client.close()
    os._exit(0)


def end_to_end(url: str, options: dict[str, str], seconds: float, rate: int, tmp: str) -> dict[str, Any]:
    """Send -> receive latency, and its consumer-side share: from the end of the commit that made a
    message visible (the producer's callback, after the commit's PUT returned) to its receive."""
    count = int(seconds * rate)
    out = os.path.join(tmp, f"received-{uuid.uuid4().hex[:8]}.npy")
    Client(url, storage_options=options).close()  # the root exists before the consumer opens it
    proc = subprocess.Popen([sys.executable, __file__, "--consumer",
                             json.dumps({"url": url, "options": options, "count": count, "out": out})],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    client = Client(url, storage_options=options)
    committed = np.zeros(count, dtype=np.float64)

    def done_at(index: int) -> Any:
        def done(_result: Any, _msg_id: Any) -> None:
            committed[index] = time.time()
        return done

    try:
        producer = client.create_producer("e2e", batching_enabled=True, block_if_queue_full=True)
        t0 = time.perf_counter()
        for i in range(count):
            target = t0 + i / rate
            delay = target - time.perf_counter()
            if delay > 0:
                time.sleep(delay)  # pacing at the offered rate, not synchronisation
            producer.send_async(VALUE, done_at(i))
        producer.flush()
        out_json = json.loads(proc.stdout.readline())
        proc.wait(timeout=60)
        visible = (np.load(out) - committed) * 1000
        out_json["visible_p50"] = float(np.percentile(visible, 50))
        out_json["visible_p99"] = float(np.percentile(visible, 99))
        return dict(out_json)
    finally:
        client.close()


def idle_requests_per_s(url: str, options: dict[str, str], seconds: float) -> dict[str, float]:
    """Requests an idle subscribed consumer makes per second, waiting in ``receive`` for nothing, once
    its polling has backed off (the first 2 s after subscribing, polling at the base interval for the
    grace and then backing off, are not counted)."""
    from broker_core.errors import Timeout

    client = Client(url, storage_options=options)
    try:
        consumer = client.subscribe("idle", "bench")
        with contextlib.suppress(Timeout):
            consumer.receive(timeout_millis=2000)
        before = _counts(client)
        t0 = time.perf_counter()
        with contextlib.suppress(Timeout):
            consumer.receive(timeout_millis=int(seconds * 1000))
        elapsed = time.perf_counter() - t0
        return _delta(_counts(client), before, 1 / elapsed)
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of the end-to-end run per root")
    parser.add_argument("--quick", action="store_true", help="smaller runs")
    parser.add_argument("--only", choices=["a", "b", "c", "d"], action="append",
                        help="run only these parts (repeatable); default: all")
    parser.add_argument("--kinds", default="local,moto,standard,express",
                        help="comma-separated roots to measure (default: all four)")
    parser.add_argument("--consumer", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.consumer:
        consumer_main(json.loads(args.consumer))
        return
    from moto_s3 import start_moto, stop_moto

    moto = start_moto()
    os.environ.update(moto.environment)
    kinds = args.kinds.split(",")
    parts = set(args.only or "abcd")
    scale = 0.4 if args.quick else 1.0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            print(f"load average {os.getloadavg()[0]:.1f}")
            print("a. commits/s (100-row appends)  [requests per commit]")
            base = None
            for kind in kinds if "a" in parts else []:
                url, options = _root(kind, tmp, moto)
                n = int((60 if kind in ("local", "moto") else 12) * scale) or 5
                rate, per = commits_per_s(url, options, n)
                base = base or rate
                print(f"   {kind:9s} {rate:8.1f} commits/s  ({rate / base:5.2f}x local)  {per}")
            print(f"b. send->receive->ack latency at 2,000 msg/s for {args.seconds * scale:.0f} s  "
                  "[requests / 1,000 msgs, consumer]")
            for kind in kinds if "b" in parts else []:
                url, options = _root(kind, tmp, moto)
                res = end_to_end(url, options, args.seconds * scale, 2000, tmp)
                goal = GOALS_MS.get(kind)
                verdict = ""
                if goal:
                    met = res["p50"] <= goal[0] and res["p99"] <= goal[1]
                    verdict = f"goal p50<={goal[0]} p99<={goal[1]}: {'MET' if met else 'MISSED'}"
                print(f"   {kind:9s} p50 {res['p50']:7.1f} ms  p99 {res['p99']:7.1f} ms  {verdict}  {res['requests']}")
                print(f"   {'':9s}   consumer side (commit visible -> receive): p50 {res['visible_p50']:7.1f} ms  "
                      f"p99 {res['visible_p99']:7.1f} ms")
            print("c. producer throughput, 100 B messages  [requests / 1,000 msgs, producer]")
            for kind in kinds if "c" in parts else []:
                for partitions, tuned in ((1, True), (8, True), (1, False)):
                    url, options = _root(kind, tmp, moto)
                    messages = int((40_000 if tuned else 10_000) * scale)
                    rate, per = throughput(url, options, messages, partitions, tuned)
                    label = f"{partitions} partition{'s' if partitions > 1 else ''}, {'tuned' if tuned else 'default'}"
                    goal = THROUGHPUT_GOAL.get(kind)
                    verdict = ""
                    if goal and tuned:
                        want = goal * (6 if partitions == 8 else 1)
                        verdict = f"goal >= {want}: {'MET' if rate >= want else 'MISSED'}"
                    print(f"   {kind:9s} {label:26s} {rate:9.0f} msg/s  {verdict}  {per}")
            print("d. an idle subscription: requests per second while a consumer waits in receive() (backed off)")
            for kind in ("moto", "standard") if "d" in parts else ():
                url, options = _root(kind, tmp, moto)
                print(f"   {kind:9s} {idle_requests_per_s(url, options, 5.0 * scale)}")
    finally:
        stop_moto(moto)


if __name__ == "__main__":
    main()
