"""Producer throughput and requests per commit on object stores, this checkout against an older one.

Run from the repository root::

    .venv/bin/python benchmarks/bench_producer_pipeline.py [--baseline-rev REV] [--seconds S] [--kinds ...]

Every figure is measured twice in the same run, interleaved: once with this checkout's
``broker_core`` and once with ``--baseline-rev``'s (default: ``7a8a44a``, the last commit before the
pipelined producer), extracted with ``git archive`` into a temporary folder and put first on
``PYTHONPATH`` of a child process.  Each measurement runs in a fresh child, so neither version
warms the other's caches.

Roots: ``local`` (a temporary folder, fsync on), and S3 on ``moto_server`` (127.0.0.1) behind the
``pubsub_simulated_latency`` profiles ``standard`` (GET/HEAD/LIST 30 ms, PUT 80 ms) and ``express``
(10 ms each).

a. requests per commit: ``TopicLog.append`` of 100 rows, one after another, per request type (and
   commits/s, on the local root too);
b. producer throughput on one partition with ``max_pending_messages=10000`` and batches of 1,000
   (``batching_max_messages=1000``), the same on 8 partitions (keys spread over them), and the
   default configuration (batching on, everything else default) on one partition: ``send_async``
   as fast as the producer takes messages; the rate is the acknowledged messages over ``--seconds``
   after a warm-up; with the requests per 1,000 messages, per type, and the producer process's CPU
   time per acknowledged message (all its threads: the figure that decides the rate where one
   process's Python is the limit, as on 8 partitions, and that a loaded machine disturbs least).

Goals from issue #13 (>= 20,000 msg/s on one partition under "standard", >= 6x that on 8) are
printed as MET or MISSED.  Nothing is asserted.
"""

from __future__ import annotations

import argparse
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
VALUE = b"x" * 100
GOAL_MSG_S = 20_000


def _counts(io: Any) -> dict[str, int]:
    return dict(getattr(io, "request_counts", {}))


def _per(after: dict[str, int], before: dict[str, int], scale: float) -> dict[str, float]:
    return {k: round((after[k] - before.get(k, 0)) * scale, 2) for k in sorted(after) if after[k] - before.get(k, 0)}


def child_commits(url: str, options: dict[str, str], commits: int) -> dict[str, Any]:
    sys.path[:0] = [str(_REPO / "tests"), str(_REPO / "tests" / "broker_core")]
    from log_helpers import producer_table

    from broker_core.storage import file_io_for
    from broker_core.topic.topic_log import TopicLog

    io = file_io_for(url, storage_options=options)
    log = TopicLog(io, "public/default/persistent/bench-commits")
    log.create(name="persistent://public/default/bench-commits")
    log.append(producer_table("bench", list(range(100))), layout=[100])  # the first commit loads the log
    before = _counts(io)
    t0 = time.perf_counter()
    for i in range(1, commits + 1):
        log.append(producer_table("bench", list(range(i * 100, i * 100 + 100))), layout=[100])
    elapsed = time.perf_counter() - t0
    return {"commits_s": commits / elapsed, "per_commit": _per(_counts(io), before, 1 / commits)}


def child_throughput(url: str, options: dict[str, str], seconds: float, partitions: int,
                     tuned: bool) -> dict[str, Any]:
    """Send as fast as the producer takes messages; measure the acknowledged rate over a window.

    The rate is the growth of ``last_sequence_id()`` (the highest acknowledged sequence id) between
    two samples ``seconds`` apart, after a warm-up: a steady state, and no flush of a long queue at
    the old code's pace.  The child then leaves without closing (``os._exit``).
    """
    import threading

    from broker_core.client.client import Client

    client = Client(url, storage_options=options)
    topic = f"tp-{uuid.uuid4().hex[:6]}"
    if partitions > 1:
        client._broker.admin.create_partitioned_topic(topic, partitions)
    config: dict[str, Any] = {"batching_enabled": True, "block_if_queue_full": True}
    if tuned:
        config.update(max_pending_messages=10_000, batching_max_messages=1_000,
                      batching_max_allowed_size_in_bytes=1 << 20)
        if partitions > 1:
            config.update(max_pending_messages_across_partitions=10_000 * partitions)
    producer = client.create_producer(topic, **config)
    producer.send(VALUE)  # registration and the first commit are not throughput
    samples: list[tuple[float, int, dict[str, int]]] = []

    def sample() -> None:
        time.sleep(min(1.0, seconds / 2))  # warm-up: the pipeline fills
        samples.append((time.perf_counter(), producer.last_sequence_id(), _counts(client._broker.io)))
        cpu0_s = time.process_time()
        time.sleep(seconds)
        deadline = time.perf_counter() + 30
        while producer.last_sequence_id() - samples[0][1] < 2000 and time.perf_counter() < deadline:
            time.sleep(0.5)  # a slow producer (the old one on 8 partitions) acknowledges in bursts
        samples.append((time.perf_counter(), producer.last_sequence_id(), _counts(client._broker.io)))
        cpu_s = time.process_time() - cpu0_s
        (t0, seq0, before), (t1, seq1, after) = samples
        acked = max(seq1 - seq0, 1)
        result = {"msg_s": acked / (t1 - t0), "cpu_us_msg": cpu_s / acked * 1e6,
                  "per_1000": _per(after, before, 1000 / acked) if after else {}}
        print(json.dumps(result), flush=True)
        os._exit(0)

    threading.Thread(target=sample, daemon=True).start()
    keys = [str(i) for i in range(64)]
    while True:
        for i in range(1000):
            producer.send_async(VALUE, None, partition_key=keys[i & 63] if partitions > 1 else None)


def _root(kind: str, tmp: str, moto: Any) -> tuple[str, dict[str, str]]:
    if kind == "local":
        path = os.path.join(tmp, f"local-{uuid.uuid4().hex[:8]}")
        os.makedirs(path)
        return path, {}
    options = dict(moto.storage_options)
    if kind != "moto":
        options["pubsub_simulated_latency"] = kind
    return moto.fresh_root(), options


def _run_child(src: str, spec: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=src)
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], env=env, capture_output=True,
                         text=True, timeout=600)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"child failed ({spec['what']} on {spec['kind']}): {out.stderr[-2000:]}")
    return dict(json.loads(lines[-1]))


def _baseline_source(rev: str, into: str) -> str:
    target = os.path.join(into, "baseline")
    os.makedirs(target)
    archive = subprocess.run(["git", "-C", str(_REPO), "archive", rev, "broker_core"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", target], input=archive, check=True)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-rev", default="7a8a44a", help="git revision measured as the baseline")
    parser.add_argument("--seconds", type=float, default=3.0, help="sending time per throughput figure")
    parser.add_argument("--commits", type=int, default=20, help="appends per requests-per-commit figure")
    parser.add_argument("--kinds", default="local,standard,express", help="roots, comma-separated")
    parser.add_argument("--no-baseline", action="store_true", help="measure this checkout only")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        spec = json.loads(args.child)
        if spec["what"] == "commits":
            result = child_commits(spec["url"], spec["options"], spec["commits"])
        else:
            result = child_throughput(spec["url"], spec["options"], spec["seconds"], spec["partitions"],
                                      spec["tuned"])
        print(json.dumps(result), flush=True)
        os._exit(0)  # deltalake/pyarrow threads may abort a normal interpreter exit
    sys.path[:0] = [str(_REPO / "tests")]
    from moto_s3 import start_moto, stop_moto

    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    moto = start_moto()
    os.environ.update(moto.environment)
    print(f"load average at start: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sources = {"new": str(_REPO)}
            if not args.no_baseline:
                sources["old"] = _baseline_source(args.baseline_rev, tmp)
            print(f"a. requests per commit, TopicLog.append of 100 rows ({args.commits} commits)")
            for kind in kinds:
                for label, src in sources.items():
                    url, options = _root(kind, tmp, moto)
                    res = _run_child(src, {"what": "commits", "kind": kind, "url": url, "options": options,
                                           "commits": args.commits})
                    total = sum(res["per_commit"].values())
                    print(f"   {kind:9s} {label}: {total:5.2f} requests/commit {res['per_commit']}  "
                          f"{res['commits_s']:7.1f} commits/s")
            print(f"b. producer throughput, 100 B messages, {args.seconds:.0f} s each  [requests / 1,000 msgs]")
            table: dict[tuple[str, str, str], float] = {}
            for kind in kinds:
                for partitions, tuned in ((1, True), (8, True), (1, False)):
                    label = f"{partitions} partition{'s' if partitions > 1 else ''}, {'tuned' if tuned else 'default'}"
                    rates: dict[str, float] = {}
                    cpu: dict[str, float] = {}
                    for version, src in sources.items():
                        url, options = _root(kind, tmp, moto)
                        res = _run_child(src, {"what": "throughput", "kind": kind, "url": url, "options": options,
                                               "seconds": args.seconds, "partitions": partitions, "tuned": tuned})
                        rates[version] = table[kind, label, version] = res["msg_s"]
                        cpu[version] = res["cpu_us_msg"]
                        verdict = ""
                        if kind == "standard" and tuned:
                            want = GOAL_MSG_S * (6 if partitions > 1 else 1)
                            verdict = f"goal >= {want}: {'MET' if res['msg_s'] >= want else 'MISSED'}"
                        print(f"   {kind:9s} {label:24s} {version}: {res['msg_s']:9.0f} msg/s  "
                              f"{res['cpu_us_msg']:5.1f} us CPU/msg  {verdict}  {res['per_1000']}", flush=True)
                    if "old" in rates:
                        print(f"   {'':9s} {label:24s} new/old: {rates['new'] / rates['old']:.2f}x msg/s, "
                              f"{cpu['new'] / cpu['old']:.2f}x CPU per message")
            if "local" in kinds:
                print("c. object store against the local root, this checkout (local: the CPU ceiling here)")
                for (kind, label, version), rate in table.items():
                    if kind != "local" and version == "new" and ("local", label, "new") in table:
                        print(f"   {kind:9s} {label:24s} {rate / table['local', label, 'new']:.2f}x local")
    finally:
        stop_moto(moto)
    print(f"load average at end: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
