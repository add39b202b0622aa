"""Per-message consume throughput and end-to-end latency, against Redis Streams on the same workload.

Run from the repository root (Redis is optional: ``apt-get install -y redis-server``)::

    .venv/bin/python benchmarks/bench_consume.py [--messages N] [--rate R] [--seconds S] [--profile]

Workload: 100-byte values, one non-partitioned topic, a Shared subscription; the producer batches
(``batching_enabled=True``), the consumer calls ``receive()`` then ``acknowledge()`` per message.

a. throughput, one process: a producer thread sends N messages with ``send_async`` while the main
   thread receives and acknowledges them; the figure is N / (last acknowledge - first send);
b. throughput, two processes: a producer process and a consumer process, same measure (both
   processes take their timestamps from the same system clock);
c. end-to-end latency, two processes (and one process for reference): the producer sends at a fixed
   moderate rate (default 2,000 msg/s, far from saturation); latency = receive time - publish time
   (the publish time is taken when ``send_async`` is called), p50 and p99.

Redis Streams, the issue's baseline ("redis-py XADD / XREADGROUP / XACK", about 17,000 msg/s for
the full cycle on this machine): the same per-message workload, one XADD per message, XREADGROUP
with COUNT 500 and BLOCK on a consumer group (the consumer's prefetch, like our receiver queue), one
XACK per message.  The 5x goal is judged against that.  A stronger Redis client is measured too and
printed beside it for reference: XADD pipelined 100 at a time (what our producer's batching does)
and the XACKs of each read pipelined in one round trip.  The server is started
here on a free port of 127.0.0.1 with persistence off (``--save '' --appendonly no``) and stopped at
the end.  Our side runs with the project's default configuration (fsync on); the two-process latency
is also measured with ``fsyncEnabled = false`` (Redis runs without persistence), and ``--no-fsync``
runs everything that way.  The header prints the machine's load average: wall-clock figures on a busy
machine measure the scheduler as much as the code.

CPU per message (all processes of a run, Redis server included; lower is better, the ratio is
Redis/ours like the throughput ratio) is printed under each throughput figure: it does not depend on
what else the machine is running, while wall-clock figures do.

Every run first sends and consumes 2,000 warm-up messages that are not timed (our first claim imports
pyarrow's Parquet reader, the first commit loads pandas through pyarrow, Redis opens connections).

This is a benchmark, not a test: nothing is asserted.  Goals are printed as MET or MISSED;
``--profile`` profiles the one-process throughput run with cProfile and prints where the time goes.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
if os.environ.get("BENCH_BASELINE"):  # a worker process of ``--baseline``: that checkout's code first
    sys.path.insert(0, os.environ["BENCH_BASELINE"])
elif str(_REPO) not in sys.path:  # run as a script from a checkout without installing the project
    sys.path.insert(0, str(_REPO))

import numpy as np  # noqa: E402

import broker_core  # noqa: E402
from broker_core import Client, ConsumerType, InitialPosition  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from disk_floor import DiskFloor  # noqa: E402
from wakeup_trace import ProducerTrace, breakdown  # noqa: E402
from wakeup_trace import load as load_trace  # noqa: E402

VALUE_BYTES = 100
TOPIC = "persistent://public/default/bench-consume"
SUBSCRIPTION = "bench"
REDIS_STREAM = "bench-consume"
REDIS_GROUP = "bench"
REDIS_PIPELINE = 100
REDIS_COUNT = 500
WARMUP = 2_000  # messages sent and consumed before anything is timed (imports, caches, connections)


# --- our side ----------------------------------------------------------------------------------------


def make_root(base: str | None, *, fsync: bool, notifications: bool = True) -> str:
    root = tempfile.mkdtemp(prefix="bench-consume-", dir=base)
    settings = ([] if fsync else ["fsyncEnabled = false"]) + ([] if notifications else
                                                             ["fileSystemNotificationsEnabled = false"])
    if settings:
        os.makedirs(os.path.join(root, "_pubsub"))
        with open(os.path.join(root, "_pubsub", "broker.toml"), "w") as handle:
            handle.write("\n".join(settings) + "\n")
    return root


def open_producer(client: Client, delay_ms: int = 10) -> Any:
    return client.create_producer(
        TOPIC, batching_enabled=True, batching_max_messages=1000, batching_max_publish_delay_ms=delay_ms,
        block_if_queue_full=True, max_pending_messages=20_000,
    )


def open_consumer(client: Client) -> Any:
    # ``--consumer-type`` reaches the worker processes through the environment they inherit
    consumer_type = ConsumerType[os.environ.get("BENCH_CONSUMER_TYPE", "Shared")]
    return client.subscribe(TOPIC, SUBSCRIPTION, consumer_type=consumer_type,
                            initial_position=InitialPosition.Earliest, receiver_queue_size=1000)


def produce(producer: Any, count: int, rate: float | None, committed: np.ndarray | None = None) -> float:
    """Send ``count`` messages (paced to ``rate`` msg/s if given); returns the first send time.

    With ``committed``, a callback records when each message's commit completed (``time.time()``).
    """
    payload = b"x" * VALUE_BYTES
    start = time.time()

    def callback(index: int) -> Any:
        if committed is None:
            return None

        def done(_result: Any, _msg_id: Any) -> None:
            committed[index] = time.time()

        return done

    if rate is None:
        for _ in range(count):
            producer.send_async(payload, None)
    else:
        step = max(1, int(rate // 1000))  # a few messages every millisecond
        for i in range(0, count, step):
            wait = start + i / rate - time.time()
            if wait > 0:
                time.sleep(wait)
            for j in range(i, min(i + step, count)):
                producer.send_async(payload, callback(j))
    producer.flush()
    return start


def consume(
    consumer: Any, count: int, *, latencies: bool, received: np.ndarray | None = None,
    sent: np.ndarray | None = None,
) -> tuple[float, np.ndarray]:
    """Receive and acknowledge ``count`` messages; returns the last ack time and latencies (ms).

    With ``received`` (and ``sent``), records each receive time (and publish time, seconds) at the
    message's index in the timed run (its sequence id minus the warm-up's)."""
    lat = np.empty(count if latencies else 0, dtype=np.float64)
    for i in range(count):
        msg = consumer.receive()
        if latencies:
            lat[i] = time.time() * 1000 - msg.publish_timestamp()
        if received is not None:
            received[msg.sequence_id() - WARMUP] = time.time()
        if sent is not None:
            sent[msg.sequence_id() - WARMUP] = msg.publish_timestamp() / 1000
        consumer.acknowledge(msg)
    return time.time(), lat


def ours_one_process(root: str, count: int, rate: float | None) -> dict[str, Any]:
    client = Client(root)
    consumer = open_consumer(client)
    producer = open_producer(client)
    produce(producer, WARMUP, None)  # first use imports and caches what the hot path needs
    consume(consumer, WARMUP, latencies=False)
    first: dict[str, float] = {}
    cpu = time.process_time()
    thread = threading.Thread(target=lambda: first.setdefault("t", produce(producer, count, rate)))
    thread.start()
    end, lat = consume(consumer, count, latencies=rate is not None)
    thread.join()
    cpu = time.process_time() - cpu
    client.close()
    return {"seconds": end - first["t"], "latencies": lat, "cpu": cpu}


def ours_worker(args: dict[str, Any]) -> None:
    """One side of the two-process run (``--role``); talks to the parent over stdin/stdout."""
    package = os.path.dirname(os.path.abspath(broker_core.__file__ or ""))
    if args.get("package") and package != args["package"]:  # this checkout's code, or --baseline's, or nothing
        raise SystemExit(f"expected broker_core from {args['package']}, imported {package}")
    client = Client(args["root"])
    if args["role"] == "consumer":
        consumer = open_consumer(client)
        print("ready", flush=True)
        consume(consumer, WARMUP, latencies=False)
        print("warm", flush=True)
        cpu = time.process_time()
        received = np.empty(args["count"], dtype=np.float64) if args.get("split") else None
        sent = np.empty(args["count"], dtype=np.float64) if args.get("trace") else None
        end, lat = consume(consumer, args["count"], latencies=args["rate"] is not None, received=received,
                           sent=sent)
        cpu = time.process_time() - cpu
        np.save(args["out"], lat)
        if received is not None:
            np.save(args["out"] + ".received.npy", received)
        if sent is not None:
            np.save(args["out"] + ".sent.npy", sent)
        print(json.dumps({"end": end, "cpu": cpu}), flush=True)
        consumer.close()
    else:
        producer = open_producer(client, args.get("delay_ms", 10))
        print("ready", flush=True)
        produce(producer, WARMUP, None)
        trace = ProducerTrace(args["count"], WARMUP) if args.get("trace") else None
        if trace is not None:
            trace.install()
        assert sys.stdin.readline().strip() == "go"
        cpu = time.process_time()
        committed = np.empty(args["count"], dtype=np.float64) if args.get("split") else None
        start = produce(producer, args["count"], args["rate"], committed)
        if committed is not None:
            np.save(args["out"] + ".committed.npy", committed)
        if trace is not None:
            trace.save(args["out"])
        print(json.dumps({"start": start, "cpu": time.process_time() - cpu}), flush=True)
    client.close()


def two_processes(
    kind: str, root: str, count: int, rate: float | None, *, pipelined: bool = False, delay_ms: int = 10,
    split: bool = False, trace: bool = False, baseline: str | None = None,
) -> dict[str, Any]:
    """Run ``--role consumer`` and ``--role producer`` (ours or redis) as two processes; with
    ``baseline`` (a checkout), both import ``broker_core`` from there."""
    out = os.path.join(root, f"latencies-{kind.replace(':', '-')}.npy")
    env = {key: value for key, value in os.environ.items() if key != "BENCH_BASELINE"}
    package = str(_REPO / "broker_core")
    if baseline is not None:
        package = os.path.join(os.path.abspath(baseline), "broker_core")
        env = dict(os.environ, BENCH_BASELINE=os.path.abspath(baseline))
    procs: dict[str, subprocess.Popen[str]] = {}
    for role in ("consumer", "producer"):
        args = {"kind": kind, "role": role, "root": root, "count": count, "rate": rate, "out": out,
                "pipelined": pipelined, "delay_ms": delay_ms, "split": split, "trace": trace, "package": package}
        proc = subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(args)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        procs[role] = proc
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line == "ready", f"{kind} {role} did not start: {line!r}"
    producer, consumer = procs["producer"], procs["consumer"]
    assert producer.stdin is not None and producer.stdout is not None and consumer.stdout is not None
    line = consumer.stdout.readline().strip()  # the producer sent WARMUP messages, the consumer took them
    assert line == "warm", f"{kind} consumer did not warm up: {line!r}"
    producer.stdin.write("go\n")
    producer.stdin.flush()
    sent = json.loads(producer.stdout.readline())
    done = json.loads(consumer.stdout.readline())
    for proc in procs.values():
        proc.wait(60)
    seconds = done["end"] - sent["start"]
    result = {"seconds": seconds, "latencies": np.load(out), "cpu": sent["cpu"] + done["cpu"]}
    if split:  # the consumer's part alone: from the end of the producer's commit to the receive
        result["visible"] = (np.load(out + ".received.npy") - np.load(out + ".committed.npy")) * 1000
    if trace:  # per-stage times of each message (wakeup_trace)
        result["trace"] = load_trace(out, np.load(out + ".sent.npy"), np.load(out + ".received.npy"),
                                     np.load(out + ".committed.npy"))
    return result


# --- Redis Streams -----------------------------------------------------------------------------------


@dataclass
class RedisServer:
    port: int
    proc: subprocess.Popen[bytes]

    @classmethod
    def start(cls) -> RedisServer | None:
        exe = shutil.which("redis-server")
        if exe is None:
            return None
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        proc = subprocess.Popen(
            [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        import redis

        deadline = time.time() + 10
        while True:
            try:
                redis.Redis(port=port).ping()
                return cls(port, proc)
            except redis.ConnectionError:
                if time.time() > deadline:
                    proc.kill()
                    raise
                time.sleep(0.05)

    def cpu(self) -> float:
        """CPU seconds the server has used so far (user + system, from /proc)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def redis_reset(port: int) -> None:
    import redis

    r = redis.Redis(port=port)
    r.delete(REDIS_STREAM)
    r.xgroup_create(REDIS_STREAM, REDIS_GROUP, id="0", mkstream=True)


def redis_produce(port: int, count: int, rate: float | None, *, pipelined: bool = False) -> float:
    import redis

    r = redis.Redis(port=port)
    payload = b"x" * VALUE_BYTES
    start = time.time()
    if rate is None and not pipelined:  # one round trip per message, as the baseline
        for _ in range(count):
            r.xadd(REDIS_STREAM, {"v": payload, "t": repr(time.time() * 1000)})
    elif rate is None:  # pipelined like a batching producer
        for i in range(0, count, REDIS_PIPELINE):
            pipe = r.pipeline(transaction=False)
            for _ in range(min(REDIS_PIPELINE, count - i)):
                pipe.xadd(REDIS_STREAM, {"v": payload, "t": repr(time.time() * 1000)})
            pipe.execute()
    else:  # each message on its own, as soon as it is due
        for i in range(count):
            wait = start + i / rate - time.time()
            if wait > 0:
                time.sleep(wait)
            r.xadd(REDIS_STREAM, {"v": payload, "t": repr(time.time() * 1000)})
    return start


def redis_consume(port: int, count: int, *, latencies: bool, pipelined: bool = False) -> tuple[float, np.ndarray]:
    import redis

    r = redis.Redis(port=port)
    lat = np.empty(count if latencies else 0, dtype=np.float64)
    got = 0
    while got < count:
        reply: Any = r.xreadgroup(REDIS_GROUP, "c1", {REDIS_STREAM: ">"}, count=REDIS_COUNT, block=100)
        if not reply:
            continue
        entries = reply[0][1]
        now = time.time() * 1000
        acker: Any = r.pipeline(transaction=False) if pipelined else r
        for entry_id, fields in entries:
            if latencies:
                lat[got] = now - float(fields[b"t"])
            got += 1
            acker.xack(REDIS_STREAM, REDIS_GROUP, entry_id)  # per message (pipelined: one round trip per read)
        if pipelined:
            acker.execute()
    return time.time(), lat


def redis_one_process(port: int, count: int, rate: float | None, *, pipelined: bool) -> dict[str, Any]:
    redis_reset(port)
    redis_produce(port, WARMUP, None)
    redis_consume(port, WARMUP, latencies=False)
    first: dict[str, float] = {}
    cpu = time.process_time()
    thread = threading.Thread(
        target=lambda: first.setdefault("t", redis_produce(port, count, rate, pipelined=pipelined))
    )
    thread.start()
    end, lat = redis_consume(port, count, latencies=rate is not None, pipelined=pipelined)
    thread.join()
    return {"seconds": end - first["t"], "latencies": lat, "cpu": time.process_time() - cpu}


def redis_worker(args: dict[str, Any]) -> None:
    port = args["port"]
    if args["role"] == "consumer":
        print("ready", flush=True)
        redis_consume(port, WARMUP, latencies=False)
        print("warm", flush=True)
        cpu = time.process_time()
        end, lat = redis_consume(
            port, args["count"], latencies=args["rate"] is not None, pipelined=args["pipelined"]
        )
        cpu = time.process_time() - cpu
        np.save(args["out"], lat)
        print(json.dumps({"end": end, "cpu": cpu}), flush=True)
    else:
        print("ready", flush=True)
        redis_produce(port, WARMUP, None)
        assert sys.stdin.readline().strip() == "go"
        cpu = time.process_time()
        start = redis_produce(port, args["count"], args["rate"], pipelined=args["pipelined"])
        print(json.dumps({"start": start, "cpu": time.process_time() - cpu}), flush=True)


# --- driver ------------------------------------------------------------------------------------------


@dataclass
class Row:
    label: str
    ours: str
    redis: str
    ratio: str
    goal: str = ""
    verdict: str = ""


def pct(lat: np.ndarray) -> tuple[float, float]:
    return float(np.percentile(lat, 50)), float(np.percentile(lat, 99))


def run(opts: argparse.Namespace) -> None:
    base = opts.root
    server = None if opts.no_redis else RedisServer.start()
    if server is None and not opts.no_redis:
        print("redis-server not found: Redis columns are skipped (apt-get install -y redis-server)")
    rows: list[Row] = []
    load_before = os.getloadavg()[0]
    try:
        n, rate, lat_n = opts.messages, opts.rate, int(opts.rate * opts.seconds)
        fsync = not opts.no_fsync

        def ours(mode: str, count: int, r: float | None, fsync: bool) -> dict[str, Any]:
            root = make_root(base, fsync=fsync)
            try:
                if mode == "one":
                    return ours_one_process(root, count, r)
                return two_processes("ours", root, count, r)
            finally:
                shutil.rmtree(root, ignore_errors=True)

        def theirs(mode: str, count: int, r: float | None, *, pipelined: bool = False) -> dict[str, Any] | None:
            if server is None:
                return None
            server_cpu = server.cpu()
            if mode == "one":
                result = redis_one_process(server.port, count, r, pipelined=pipelined)
            else:
                redis_reset(server.port)
                root = tempfile.mkdtemp(prefix="bench-consume-redis-", dir=base)
                try:
                    result = two_processes(f"redis:{server.port}", root, count, r, pipelined=pipelined)
                finally:
                    shutil.rmtree(root, ignore_errors=True)
            result["cpu"] += server.cpu() - server_cpu  # the server's work counts too (and its warm-up)
            return result

        sync = "fsync on" if fsync else "fsync off"
        for mode, label in (("one", "one process"), ("two", "two processes")):
            a = ours(mode, n, None, fsync)
            b = theirs(mode, n, None)
            ours_rate = n / a["seconds"]
            redis_rate = n / b["seconds"] if b else float("nan")
            ratio = ours_rate / redis_rate if b else float("nan")
            rows.append(Row(f"throughput, {label}, {sync} (msg/s)", f"{ours_rate:,.0f}",
                            f"{redis_rate:,.0f}" if b else "-", f"{ratio:.2f}x" if b else "-",
                            ">= 5x Redis", ("MET" if ratio >= 5 else "MISSED") if b else ""))
            ours_cpu = a["cpu"] / n * 1e6
            redis_cpu = b["cpu"] / n * 1e6 if b else float("nan")
            rows.append(Row("  CPU per message, all processes (us)", f"{ours_cpu:.1f}",
                            f"{redis_cpu:.1f}" if b else "-", f"{redis_cpu / ours_cpu:.2f}x" if b else "-"))
            c = theirs(mode, n, None, pipelined=True)
            if c:
                piped_rate = n / c["seconds"]
                rows.append(Row("  reference: Redis pipelined (XADD x100, XACKs per read)", f"{ours_rate:,.0f}",
                                f"{piped_rate:,.0f}", f"{ours_rate / piped_rate:.2f}x"))
        runs = [("two", "two processes", True), ("two", "two processes", False), ("one", "one process", True)]
        redis_latency: dict[str, dict[str, Any] | None] = {}
        for mode, label, with_fsync in runs:
            if opts.no_fsync and with_fsync:
                continue
            a = ours(mode, lat_n, rate, with_fsync)
            if mode not in redis_latency:
                redis_latency[mode] = theirs(mode, lat_n, rate)
            b = redis_latency[mode]
            p50, p99 = pct(a["latencies"])
            r50, r99 = pct(b["latencies"]) if b else (float("nan"), float("nan"))
            cross = mode == "two"
            sync = "fsync on" if with_fsync else "fsync off"
            rows.append(Row(f"latency p50 @ {rate:,.0f} msg/s, {label}, {sync} (ms)", f"{p50:.1f}",
                            f"{r50:.1f}" if b else "-", f"{p50 / r50:,.0f}x" if b else "-",
                            "< 25 ms" if cross else "", ("MET" if p50 < 25 else "MISSED") if cross else ""))
            rows.append(Row(f"latency p99 @ {rate:,.0f} msg/s, {label}, {sync} (ms)", f"{p99:.1f}",
                            f"{r99:.1f}" if b else "-", f"{p99 / r99:,.0f}x" if b else "-",
                            "< 100 ms" if cross else "", ("MET" if p99 < 100 else "MISSED") if cross else ""))
    finally:
        if server is not None:
            server.stop()
    print_table(rows, opts, load=(load_before, os.getloadavg()[0]))
    if opts.profile:
        profile(base, fsync=not opts.no_fsync, count=n)


def wakeup(opts: argparse.Namespace) -> None:
    """Cross-process latency on a local root with ``batching_max_publish_delay_ms=1`` (as
    latency-sensitive users set it): consumers woken by file-system notifications (inotify) against
    the polling baseline (``fileSystemNotificationsEnabled = false``), interleaved, same run; or,
    with ``--baseline CHECKOUT``, against another checkout's code with notifications (old vs new on a
    busy machine: only runs interleaved in the same minutes compare).
    Goal (issue #13): p50 <= 5 ms and p99 <= 20 ms with notifications.  Besides send -> receive, the
    consumer's own part is shown: from the moment the producer's commit completed (its callback) to
    the receive, which is what the wake-up mechanism decides.  Each run's own p50 is kept too: their
    median is steadier than the p50 of all runs pooled when the load changes between runs.  The two
    variants take turns at running first (A B B A ...).  Before each pair of runs the storage calls of
    one commit are timed alone (``disk_floor.py``): what the disk allows, in the same minutes."""
    count = int(opts.rate * opts.seconds)
    other = "baseline" if opts.baseline else "polling"
    variants = (("notifications", True, None), (other, bool(opts.baseline), opts.baseline))
    figures: dict[str, dict[str, list[Any]]] = {
        label: {"latencies": [], "visible": [], "cpu": []} for label, _, _ in variants}
    traces: list[dict[str, np.ndarray]] = []
    floor = DiskFloor()
    load_before = os.getloadavg()[0]
    # The runs' roots are removed only after the last run: removing one (thousands of files) just
    # before the next run started made that run's file creates walk over the freed inodes (ext4
    # without a journal skips inodes freed in the last ~30 s, one by one): 0.5-0.9 ms of CPU per
    # create instead of tens of us, two creates per batch, on both sides alike (D114).
    roots: list[str] = []
    try:
        for repeat in range(opts.repeats):
            scratch = make_root(opts.root, fsync=True)
            roots.append(scratch)
            floor.measure(scratch)  # what the disk allows, in the same minutes as the runs
            # ABBA: which variant runs first alternates, so neither always runs right after the other
            # (bfbb4a8 against itself, always first/second: 0.71x for the first, five runs; D110)
            for label, notifications, baseline in variants[:: -1 if repeat % 2 else 1]:
                root = make_root(opts.root, fsync=not opts.no_fsync, notifications=notifications)
                roots.append(root)
                result = two_processes("ours", root, count, opts.rate, delay_ms=1, split=True,
                                       trace=opts.trace and label == "notifications", baseline=baseline)
                for key in ("latencies", "visible"):
                    figures[label][key].append(result[key])
                figures[label]["cpu"].append(result["cpu"] / count * 1e6)
                if "trace" in result:
                    traces.append(result["trace"])
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
    sync = "fsync off" if opts.no_fsync else "fsync on"
    print(f"wake-up latency, two processes, {count:,} messages at {opts.rate:,.0f} msg/s, "
          f"batching_max_publish_delay_ms=1, {sync}, {opts.consumer_type} subscription, "
          f"{opts.repeats} run(s) each, interleaved; load average "
          f"{load_before:.1f} before and {os.getloadavg()[0]:.1f} after")
    if opts.baseline:
        print(f"baseline: {opts.baseline} (with notifications, its own broker_core)")
    print(f"{'(ms)':<28}{'notifications':>15}{other:>10}{'ratio':>8}{'goal':>10}{'verdict':>9}")
    for key, title in (("latencies", "send -> receive"), ("visible", "commit -> receive")):
        (n50, n99), (p50, p99) = (pct(np.concatenate(figures[k][key])) for k in ("notifications", other))
        for name, ours, theirs, goal in ((f"{title} p50", n50, p50, 5), (f"{title} p99", n99, p99, 20)):
            verdict = ("MET" if ours <= goal else "MISSED") if key == "latencies" else ""
            target = f"<= {goal}" if key == "latencies" else ""
            print(f"{name:<28}{ours:>15.1f}{theirs:>10.1f}{ours / theirs:>7.2f}x{target:>10}{verdict:>9}")
    per_run = {label: [pct(lat) for lat in figures[label]["latencies"]] for label, _, _ in variants}
    for index, title in ((0, "median of runs' p50"), (1, "median of runs' p99")):
        ours, theirs = (float(np.median([run[index] for run in per_run[k]])) for k in ("notifications", other))
        print(f"{title:<28}{ours:>15.1f}{theirs:>10.1f}{ours / theirs:>7.2f}x")
    ours, theirs = (float(np.median(figures[k]["cpu"])) for k in ("notifications", other))
    print(f"{'CPU per message (us)':<28}{ours:>15.0f}{theirs:>10.0f}{ours / theirs:>7.2f}x")
    print("runs' p50 (ms): " + "; ".join(
        f"{label} " + " ".join(f"{run[0]:.1f}" for run in per_run[label]) for label, _, _ in variants))
    print("\n".join(floor.lines()))
    if traces:
        print("where the time goes with notifications (--trace; each stage's own p50/p99, they do not add up):")
        print("\n".join(breakdown(traces, pct)))


def print_table(rows: list[Row], opts: argparse.Namespace, *, load: tuple[float, float]) -> None:
    headers = Row("measurement", "spark-pubsub", "Redis Streams", "ratio", "goal", "verdict")
    cols = ("label", "ours", "redis", "ratio", "goal", "verdict")
    widths = [max(len(getattr(r, c)) for r in [headers, *rows]) for c in cols]
    line = "-" * (sum(widths) + 2 * len(widths))
    print(line)
    print(f"{opts.messages:,} messages of {VALUE_BYTES} bytes for throughput, "
          f"{int(opts.rate * opts.seconds):,} at {opts.rate:,.0f} msg/s for latency; Shared subscription, "
          f"batching on; {os.cpu_count()} CPUs, load average {load[0]:.1f} before and {load[1]:.1f} after")
    print(line)
    for row in [headers, *rows]:
        print("  ".join(f"{getattr(row, c):<{w}}" for c, w in zip(cols, widths, strict=True)))
        if row is headers:
            print(line)
    print(line)


def profile(base: str | None, *, fsync: bool, count: int) -> None:
    """cProfile the one-process throughput run on every thread; print where the CPU time goes.

    Each thread is timed by its own CPU clock (``time.thread_time``), so time blocked in locks, waits,
    sleeps and fsync does not count: what remains is work, grouped by module and by function.
    """
    root = make_root(base, fsync=fsync)
    profilers: list[cProfile.Profile] = []
    original_run = threading.Thread.run

    def run_profiled(self: threading.Thread) -> None:
        p = cProfile.Profile(time.thread_time)  # CPU time of this thread: no double counting
        profilers.append(p)
        p.runcall(original_run, self)

    main_profiler = cProfile.Profile(time.thread_time)
    threading.Thread.run = run_profiled  # type: ignore[method-assign]
    try:
        main_profiler.runcall(ours_one_process, root, count, None)
    finally:
        threading.Thread.run = original_run  # type: ignore[method-assign]
        shutil.rmtree(root, ignore_errors=True)
    stats = pstats.Stats(main_profiler)
    for p in profilers:
        stats.add(p)
    waiting = ("acquire", "wait", "sleep", "select", "poll")
    by_func: dict[str, float] = {}
    by_module: dict[str, float] = {}
    for (filename, line, func), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if any(w in func for w in waiting):
            continue
        module = filename.split("/site-packages/")[-1].replace(f"{_REPO}/", "")
        module = "builtins" if filename == "~" else module
        name = func if filename == "~" else f"{module}:{line}({func})"
        by_func[name] = by_func.get(name, 0.0) + tottime
        top = module.split("/")[0] if "site-packages" in filename else module
        by_module[top] = by_module.get(top, 0.0) + tottime
    total = sum(by_func.values())
    print(f"\n==== profile of the one-process run, {count:,} messages: {total:.2f} s of work "
          f"({total / count * 1e6:.1f} us of CPU per message, profiler overhead included)")
    print("-- by module")
    for name, t in sorted(by_module.items(), key=lambda kv: -kv[1])[:16]:
        print(f"{t:8.3f} s  {t / total:6.1%}  {name}")
    print("-- by function")
    for name, t in sorted(by_func.items(), key=lambda kv: -kv[1])[:30]:
        print(f"{t:8.3f} s  {t / total:6.1%}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000, help="messages for the throughput runs")
    parser.add_argument("--rate", type=float, default=2000.0, help="send rate of the latency runs (msg/s)")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of the latency runs")
    parser.add_argument("--root", default=None, help="directory for the storage roots (default: temp)")
    parser.add_argument("--no-fsync", action="store_true", help="run our side with fsyncEnabled = false")
    parser.add_argument("--no-redis", action="store_true", help="skip the Redis Streams baseline")
    parser.add_argument("--profile", action="store_true", help="cProfile the one-process throughput run")
    parser.add_argument("--wakeup", action="store_true",
                        help="only the wake-up latency comparison: notifications vs polling, publish delay 1 ms")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each variant in --wakeup")
    parser.add_argument("--trace", action="store_true",
                        help="with --wakeup: per-stage timestamps of the notification runs (wakeup_trace.py)")
    parser.add_argument("--baseline", metavar="CHECKOUT", default=None,
                        help="with --wakeup: compare against this checkout's broker_core (notifications on) "
                             "instead of polling, interleaved (e.g. a `git worktree add` of main)")
    parser.add_argument("--consumer-type", choices=["Shared", "Exclusive"], default="Shared",
                        help="subscription type of our consumers (Shared claims in the cursor: a commit per round)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.baseline is not None and not (opts.wakeup and os.path.isdir(os.path.join(opts.baseline, "broker_core"))):
        parser.error(f"--baseline {opts.baseline!r}: give it with --wakeup and a checkout of this repository "
                     "(a directory holding broker_core/), e.g. `git worktree add /tmp/old main`")
    os.environ.setdefault("BENCH_CONSUMER_TYPE", opts.consumer_type)
    if opts.worker:
        args = json.loads(opts.worker)
        if args["kind"].startswith("redis:"):
            args["port"] = int(args["kind"].split(":")[1])
            redis_worker(args)
        else:
            ours_worker(args)
        return
    if opts.wakeup:
        wakeup(opts)
        return
    run(opts)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
