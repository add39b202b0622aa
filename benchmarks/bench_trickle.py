"""Consumers under a trickle of small commits, and the drain of a backlog of small segments.

Run from the repository root::

    .venv/bin/python benchmarks/bench_trickle.py [--seconds S] [--segments-per-s R] [--baseline REF] [--repeat N]
    .venv/bin/python benchmarks/bench_trickle.py --maintain-minutes 30 --segments-per-s 1   # issue #27

Workload (issue #10, "Also measured"): four producer processes each commit a tiny segment (3 messages
of 100 bytes, ``flush()`` after each) at a paced rate, 100 segments/s each by default, so about 400
segments and 1,200 messages a second reach one non-partitioned topic.  One consumer process on a
Shared subscription receives and acknowledges every message.

a. keeping up: the consumer's throughput while producers run against the producers' commit rate, its
   lag (receive time - publish time) p50/p99/max, and how long it takes to catch up once they stop.
   The lag includes the producers' own commit time, which grows when the machine cannot sustain the
   commit rate; "commit -> receive" (receive time - the moment the producer's ``flush`` returned) is
   the consumer's part alone;
b. draining: the same producers write a backlog of small segments with no consumer running; then a
   fresh consumer process drains it, receive + acknowledge per message and nothing else (no
   timestamps or fields read for the benchmark, unlike scenario a); the figure is msg/s, and
   msg/s per CPU-second of the consumer process (what an idle core would reach; on a busy machine
   the wall-clock figure mostly measures the scheduler).

Every figure is measured twice in the same run: on this checkout and on a baseline checkout
(``--baseline``, default ``HEAD~0`` of the branch point given by ``git merge-base HEAD main``),
extracted with ``git archive`` into a temporary directory and put first on ``PYTHONPATH`` of its
worker processes, so the ratio compares code on one machine under one load.  Goals (issue #10): lag
under 1 s while producers run, and a drain of >= 20,000 msg/s per consumer process.

``--maintain-minutes M`` (issue #27) measures something else: one producer trickles tiny segments for M
minutes (a consumer acknowledging them) while only ``pubsub maintain --every 1m --execute`` maintains the
root, and the topic's live segment count and the root's bytes are sampled over time, beside the same
workload on a root nothing maintains (the baseline of the same run).

This is a benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent

TOPIC = "persistent://public/default/trickle"
SUBSCRIPTION = "trickle"
VALUE_BYTES = 100
MESSAGES_PER_SEGMENT = 3
PRODUCERS = 4


# --- workers (run in their own processes, against whichever checkout is on sys.path) ---------------


def producer_worker(args: dict[str, Any]) -> None:
    """Commit ``segments`` tiny segments, paced at ``rate`` segments/s (0: as fast as possible)."""
    import numpy as np

    from broker_core import Client

    client = Client(args["root"])
    producer = client.create_producer(TOPIC, producer_name=f"trickle-{args['index']}", batching_enabled=True,
                                      batching_max_publish_delay_ms=1000)
    payload = b"x" * VALUE_BYTES
    committed = np.empty(args["segments"], dtype=np.float64)
    print("ready", flush=True)
    assert sys.stdin.readline().strip() == "go"
    start = time.time()
    rate = args["rate"]
    for i in range(args["segments"]):
        if rate:
            wait = start + i / rate - time.time()
            if wait > 0:
                time.sleep(wait)
        for _ in range(MESSAGES_PER_SEGMENT):
            producer.send_async(payload, None)
        producer.flush()
        committed[i] = time.time()  # sequence ids 3i .. 3i+2 are durable (and visible) from here on
    np.save(args["out"], committed)
    print(json.dumps({"start": start, "end": time.time()}), flush=True)
    client.close()


def consumer_worker(args: dict[str, Any]) -> None:
    """Receive and acknowledge ``count`` messages; report receive times and lags."""
    import numpy as np

    from broker_core import Client, ConsumerType, InitialPosition

    if not args.get("readahead", True):
        # ``--no-readahead``: every segment decoded on the dispatch thread (a measurement knob, not an
        # option of the library: the threshold is a private constant of every version measured)
        import broker_core.topic.topic_log as topic_log

        topic_log._READAHEAD_MIN_SEGMENTS = 1 << 62
    client = Client(args["root"])
    consumer = client.subscribe(TOPIC, SUBSCRIPTION, consumer_type=ConsumerType[args.get("type", "Shared")],
                                initial_position=InitialPosition.Earliest)
    print("ready", flush=True)
    count = args["count"]
    received = np.empty(count, dtype=np.float64)
    lag_ms = np.empty(count, dtype=np.float64)
    producer = np.empty(count, dtype=np.float64)
    sequence = np.empty(count, dtype=np.float64)
    if args.get("wait_go"):
        assert sys.stdin.readline().strip() == "go"
    start = time.time()
    cpu = time.process_time()
    if args.get("drain"):
        # scenario b's figure is the span and the CPU alone: the consumer does what an application that
        # drains does, receive + acknowledge, and no per-message bookkeeping of the benchmark's own
        # (reading three fields and storing four floats cost ~12% of the drain's CPU)
        receive, acknowledge = consumer.receive, consumer.acknowledge
        for _ in range(count):
            acknowledge(receive(timeout_millis=120_000))
    else:
        for i in range(count):
            msg = consumer.receive(timeout_millis=120_000)
            now = time.time()
            received[i] = now
            lag_ms[i] = now * 1000 - msg.publish_timestamp()
            producer[i] = int(msg.producer_name().rsplit("-", 1)[1])
            sequence[i] = msg.sequence_id()
            consumer.acknowledge(msg)
        np.save(args["out"], np.stack([received, lag_ms, producer, sequence]))
    print(json.dumps({"start": start, "end": time.time(), "cpu": time.process_time() - cpu}), flush=True)
    consumer.close()
    client.close()


# --- maintenance under a trickle (issue #27) -------------------------------------------------------------


def tree_bytes(root: str) -> int:
    """Bytes of every file under ``root`` (what the root costs on storage)."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root) for f in files
               if not f.endswith(".npy"))


def live_segments(root: str) -> int:
    sys.path.insert(0, str(_REPO))
    from broker_core.broker.broker import Broker
    from broker_core.naming import TopicName

    log = Broker.for_url(root).topic_log(TopicName.parse(TOPIC), create=False)
    return len(log.snapshot().segments) if log.exists() else 0


def storage_breakdown(root: str) -> dict[str, int]:
    """The root's bytes by what they are: segment files, log commits, checkpoints, cursors, producer
    state, maintenance state, the rest (what grows, if storage grows)."""
    out = {"segments": 0, "log_commits": 0, "log_checkpoints": 0, "log_other": 0, "cursors": 0, "producers": 0,
           "maintenance": 0, "other": 0}
    for d, _, files in os.walk(root):
        rel = os.path.relpath(d, root)
        for f in files:
            if f.endswith(".npy"):
                continue
            size = os.path.getsize(os.path.join(d, f))
            if "_delta_log" in rel:
                key = ("log_checkpoints" if ".checkpoint." in f else "log_commits" if f.endswith(".json")
                       else "log_other")
            elif "_cursors" in rel:
                key = "cursors"
            elif "_producers" in rel:
                key = "producers"
            elif rel.startswith("_pubsub"):
                key = "maintenance"
            elif f.startswith("part-"):
                key = "segments"
            else:
                key = "other"
            out[key] += size
    return out


def maintain_beside_trickle(base: str | None, minutes: float, rate: float, sample_s: float,
                            consumer: bool, broker_toml: str | None = None) -> dict[str, Any]:
    """One producer commits a tiny segment ``rate`` times a second for ``minutes`` (a consumer acknowledges
    everything unless ``consumer`` is False) while only ``pubsub maintain --every 1m --execute`` maintains
    the root; every ``sample_s`` seconds print the topic's live segments and the root's bytes.  The same
    workload runs on a second root that nothing maintains: its figures are the baseline of the same run.
    ``broker_toml``: settings written to the maintained root's ``_pubsub/broker.toml`` (a smoke run's
    shorter grace); by default none, so the command runs with its defaults."""
    root = tempfile.mkdtemp(prefix="bench-trickle-maintain-", dir=base)
    bare = tempfile.mkdtemp(prefix="bench-trickle-unmaintained-", dir=base)
    if broker_toml is not None:
        os.makedirs(os.path.join(root, "_pubsub"), exist_ok=True)
        shutil.copyfile(broker_toml, os.path.join(root, "_pubsub", "broker.toml"))
    segments = int(minutes * 60 * rate)
    procs: list[subprocess.Popen[str]] = []
    try:
        producers = []
        for where in (root, bare):
            producers.append(spawn("producer", {"root": where, "segments": segments, "rate": rate, "index": 0,
                                                "out": os.path.join(where, "producer-0.npy")}, str(_REPO)))
            procs.append(producers[-1])
            if consumer:
                procs.append(spawn("consumer", {"root": where, "count": segments * MESSAGES_PER_SEGMENT,
                                                "out": os.path.join(where, "consumer.npy")}, str(_REPO)))
        passes_log = root + ".maintain.jsonl"  # beside the root: a stray file in it is not a tenant
        command = [sys.executable, "-m", "broker_core.cli", "--root", root, "maintain", "--every", "1m", "--execute",
                   "--json"]  # the command (--json only shapes the output the benchmark parses)
        print("maintenance: " + " ".join(command[1:]), flush=True)
        with open(passes_log, "w") as out:
            maintain = subprocess.Popen(command, stdout=out, env={**os.environ, "PYTHONPATH": str(_REPO)},
                                        cwd=str(_REPO))
        for producer in producers:
            assert producer.stdin is not None
            producer.stdin.write("go\n")
            producer.stdin.flush()
        start = time.time()
        samples: list[tuple[float, int, int, int, int]] = []
        while any(p.poll() is None for p in producers) or not samples:
            time.sleep(sample_s)
            sample = (time.time() - start, live_segments(root), tree_bytes(root), live_segments(bare), tree_bytes(bare))
            samples.append(sample)
            print(f"  t={sample[0]:7.0f} s  live segments {sample[1]:6d}  storage {sample[2]:12,d} bytes   "
                  f"unmaintained: live segments {sample[3]:6d}  storage {sample[4]:12,d} bytes", flush=True)
        maintain.terminate()
        maintain.wait(60)
        with open(passes_log) as f:
            passes = [json.loads(line) for line in f if line.strip()]
        errors = sum(len(t["errors"]) for p in passes for t in p.get("topics", []))
        every_5_min = {f"storage_at_{m}_min_bytes": min(samples, key=lambda s, m=m: abs(s[0] - 60 * m))[2]
                       for m in range(5, int(minutes) + 1, 5)}
        return {"segments_committed": segments, "max_live_segments": max(s[1] for s in samples),
                "storage_start_bytes": samples[0][2], "storage_end_bytes": samples[-1][2],
                "storage_max_bytes": max(s[2] for s in samples), **every_5_min,
                "unmaintained_live_segments_end": samples[-1][3], "unmaintained_storage_end_bytes": samples[-1][4],
                "breakdown_end": storage_breakdown(root), "unmaintained_breakdown_end": storage_breakdown(bare),
                "passes": len(passes), "job_errors": errors}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(bare, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.remove(root + ".maintain.jsonl")


# --- driver --------------------------------------------------------------------------------------------


def spawn(role: str, args: dict[str, Any], pythonpath: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    proc = subprocess.Popen([sys.executable, __file__, "--worker", json.dumps({**args, "role": role})],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=pythonpath)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line == "ready", f"{role} did not start: {line!r}"
    return proc


def run_producers(root: str, segments: int, rate: float, pythonpath: str) -> tuple[float, float]:
    """Start the producers together; return (first start, last end)."""
    procs = [spawn("producer", {"root": root, "segments": segments, "rate": rate, "index": index,
                                "out": os.path.join(root, f"producer-{index}.npy")}, pythonpath)
             for index in range(PRODUCERS)]
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    spans = [json.loads(proc.stdout.readline()) for proc in procs if proc.stdout is not None]
    for proc in procs:
        proc.wait(60)
    return min(s["start"] for s in spans), max(s["end"] for s in spans)


def keep_up(base: str | None, seconds: float, rate: float, pythonpath: str) -> dict[str, float]:
    """Scenario a: the consumer runs while producers trickle."""
    import numpy as np

    root = tempfile.mkdtemp(prefix="bench-trickle-", dir=base)
    try:
        segments = int(seconds * rate)
        count = segments * MESSAGES_PER_SEGMENT * PRODUCERS
        out = os.path.join(root, "consumer.npy")
        consumer = spawn("consumer", {"root": root, "count": count, "out": out}, pythonpath)
        start, end = run_producers(root, segments, rate, pythonpath)
        assert consumer.stdout is not None
        json.loads(consumer.stdout.readline())
        consumer.wait(60)
        received, lag, producer, sequence = np.load(out)
        commits = np.stack([np.load(os.path.join(root, f"producer-{i}.npy")) for i in range(PRODUCERS)])
        # the consumer's own delay: from the moment the producer's flush returned to the receive
        visible_ms = (received - commits[producer.astype(int), sequence.astype(int) // MESSAGES_PER_SEGMENT]) * 1000
        during = received <= end
        return {
            "visible_p50_ms": float(np.percentile(visible_ms, 50)),
            "visible_p99_ms": float(np.percentile(visible_ms, 99)),
            "commit_rate": segments * PRODUCERS / (end - start),
            "produce_rate": count / (end - start),
            "consume_rate": int(during.sum()) / (end - start),
            "lag_p50_ms": float(np.percentile(lag, 50)),
            "lag_p99_ms": float(np.percentile(lag, 99)),
            "lag_max_ms": float(lag.max()),
            "catch_up_s": max(0.0, float(received.max()) - end),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def make_backlog(base: str | None, segments: int, pythonpath: str) -> str:
    """Scenario b's backlog: the four producers commit ``segments`` tiny segments as fast as they can,
    with no consumer running.  Built once (with this checkout) and copied for every drain."""
    root = tempfile.mkdtemp(prefix="bench-trickle-backlog-", dir=base)
    run_producers(root, segments // PRODUCERS, 0, pythonpath)
    return root


def merged_copy(backlog: str, base: str | None) -> str:
    """The same backlog with its segments merged into one (``merge_segments``): the same messages,
    ids and cursor, one Parquet file; what the drain costs without the per-segment part."""
    sys.path.insert(0, str(_REPO))
    from broker_core.broker.broker import Broker
    from broker_core.jobs.merge_segments import merge_segments

    root = tempfile.mkdtemp(prefix="bench-trickle-merged-", dir=base)
    shutil.copytree(backlog, root, dirs_exist_ok=True)
    merge_segments(Broker.for_url(root), TOPIC, min_age_ms=0, target_bytes=1 << 40, dry_run=False)
    return root


def drain(backlog: str, base: str | None, consumer_type: str, pythonpath: str, *,
          readahead: bool = True) -> dict[str, float]:
    """Scenario b: one fresh consumer process drains (a copy of) the backlog, receive + acknowledge."""
    import numpy as np

    root = tempfile.mkdtemp(prefix="bench-trickle-", dir=base)
    try:
        shutil.copytree(backlog, root, dirs_exist_ok=True)
        count = sum(len(np.load(os.path.join(backlog, f"producer-{i}.npy"))) for i in range(PRODUCERS))
        count *= MESSAGES_PER_SEGMENT
        out = os.path.join(root, "consumer.npy")
        consumer = spawn("consumer", {"root": root, "count": count, "out": out, "wait_go": True, "drain": True,
                                      "type": consumer_type, "readahead": readahead}, pythonpath)
        assert consumer.stdin is not None and consumer.stdout is not None
        consumer.stdin.write("go\n")
        consumer.stdin.flush()
        span = json.loads(consumer.stdout.readline())
        consumer.wait(60)
        return {"drain_rate": count / (span["end"] - span["start"]), "drain_cpu_rate": count / span["cpu"]}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def baseline_tree(ref: str) -> str:
    """Extract ``ref`` of this repository into a temporary directory (its ``broker_core`` is imported)."""
    target = tempfile.mkdtemp(prefix="bench-trickle-baseline-")
    archive = subprocess.run(["git", "archive", ref, "broker_core"], cwd=_REPO, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", target], input=archive.stdout, check=True)
    return target


def default_baseline() -> str:
    merge_base = subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=_REPO, capture_output=True, text=True)
    return merge_base.stdout.strip() or "HEAD"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="how long producers trickle")
    parser.add_argument("--segments-per-s", type=float, default=100.0, help="commit rate of each producer")
    parser.add_argument("--backlog", type=int, default=4000, help="segments in the drain scenario")
    parser.add_argument("--baseline", default=None, help="git ref to compare with (default: merge-base with main)")
    parser.add_argument("--no-baseline", action="store_true", help="measure this checkout only")
    parser.add_argument("--root", default=None, help="directory for the storage roots (default: temp)")
    parser.add_argument("--drain-only", action="store_true", help="skip scenario a (keeping up)")
    parser.add_argument("--keep-up-only", action="store_true", help="skip scenario b (draining)")
    parser.add_argument("--types", default="Shared,Exclusive", help="consumer types that drain (comma-separated)")
    parser.add_argument("--no-readahead", action="store_true",
                        help="drain without the readahead thread (both checkouts): one thread decodes every segment")
    parser.add_argument("--repeat", type=int, default=1,
                        help="drains per checkout and consumer type, interleaved; the report gives the median")
    parser.add_argument("--maintain-minutes", type=float, default=None,
                        help="instead: one producer trickles at --segments-per-s for this long while only "
                        "`pubsub maintain --every 1m --execute` runs; prints live segments and storage bytes")
    parser.add_argument("--sample-s", type=float, default=30.0, help="with --maintain-minutes: sampling period")
    parser.add_argument("--no-consumer", action="store_true", help="with --maintain-minutes: no consumer")
    parser.add_argument("--maintain-config", default=None, metavar="TOML",
                        help="with --maintain-minutes: broker settings for the maintained root (a smoke run's shorter "
                        "removedSegmentGracePeriodInSeconds); by default the command's defaults")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.worker:
        args = json.loads(opts.worker)
        (producer_worker if args["role"] == "producer" else consumer_worker)(args)
        return
    if opts.maintain_minutes is not None:
        print(f"maintain beside a trickle: 1 producer x {opts.segments_per_s:g} segments/s of "
              f"{MESSAGES_PER_SEGMENT} x {VALUE_BYTES} B for {opts.maintain_minutes:g} min"
              f"{'' if opts.no_consumer else ', one consumer acknowledging'}", flush=True)
        figures = maintain_beside_trickle(opts.root, opts.maintain_minutes, opts.segments_per_s, opts.sample_s,
                                          not opts.no_consumer, opts.maintain_config)
        print(json.dumps(figures))
        return
    variants = [("this checkout", str(_REPO))]
    base_dir = None
    if not opts.no_baseline:
        ref = opts.baseline or default_baseline()
        base_dir = baseline_tree(ref)
        variants.append((f"baseline {ref[:10]}", base_dir))
    results: dict[str, dict[str, float]] = {label: {} for label, _ in variants}
    load_before = os.getloadavg()[0]
    backlogs: list[str] = []
    try:
        if not opts.drain_only:
            for label, path in variants:  # interleaved per scenario so background load hits both alike
                results[label] = keep_up(opts.root, opts.seconds, opts.segments_per_s, path)
        if not opts.keep_up_only:
            backlog = make_backlog(opts.root, opts.backlog, str(_REPO))
            backlogs.append(backlog)
            backlogs.append(merged_copy(backlog, opts.root))
            for consumer_type in opts.types.split(","):
                runs: dict[str, list[dict[str, float]]] = {label: [] for label, _ in variants}
                for repeat in range(opts.repeat):  # interleaved, the order swapped each time
                    for label, path in variants[::-1] if repeat % 2 else variants:
                        runs[label].append(drain(backlog, opts.root, consumer_type, path,
                                                 readahead=not opts.no_readahead))
                for label, drained_runs in runs.items():
                    results[label].update({f"{key}_{consumer_type}": statistics.median(r[key] for r in drained_runs)
                                           for key in drained_runs[0]})
                merged = drain(backlogs[1], opts.root, consumer_type, str(_REPO), readahead=not opts.no_readahead)
                results[variants[0][0]].update({f"merged_{key}_{consumer_type}": v for key, v in merged.items()})
    finally:
        if base_dir is not None:
            shutil.rmtree(base_dir, ignore_errors=True)
        for backlog in backlogs:
            shutil.rmtree(backlog, ignore_errors=True)
    print_report(results, opts, (load_before, os.getloadavg()[0]))


def print_report(results: dict[str, dict[str, float]], opts: argparse.Namespace, load: tuple[float, float]) -> None:
    labels = list(results)
    rows = [
        ("producer commits/s (all 4)", "commit_rate", "{:,.0f}", None),
        ("messages produced/s", "produce_rate", "{:,.0f}", None),
        ("consumed/s while producing", "consume_rate", "{:,.0f}", None),
        ("commit -> receive p50 (ms)", "visible_p50_ms", "{:,.1f}", None),
        ("commit -> receive p99 (ms)", "visible_p99_ms", "{:,.1f}", None),
        ("lag (publish -> receive) p50 (ms)", "lag_p50_ms", "{:,.1f}", None),
        ("lag (publish -> receive) p99 (ms)", "lag_p99_ms", "{:,.1f}", ("< 1000", lambda v: v < 1000)),
        ("lag (publish -> receive) max (ms)", "lag_max_ms", "{:,.1f}", None),
        ("catch-up after producers stop (s)", "catch_up_s", "{:,.2f}", None),
    ]
    if opts.drain_only:
        rows = []
    for consumer_type in [] if opts.keep_up_only else opts.types.split(","):
        rows += [
            (f"drain, one {consumer_type} consumer (msg/s)", f"drain_rate_{consumer_type}", "{:,.0f}",
             (">= 20,000", lambda v: v >= 20_000)),
            ("  the same per CPU-second of the consumer", f"drain_cpu_rate_{consumer_type}", "{:,.0f}", None),
            ("  baseline: backlog merged, msg/s", f"merged_drain_rate_{consumer_type}", "{:,.0f}", None),
            ("  baseline: backlog merged, per CPU-s", f"merged_drain_cpu_rate_{consumer_type}", "{:,.0f}", None),
        ]
    print(f"trickle: {PRODUCERS} producers x {opts.segments_per_s:.0f} segments/s of {MESSAGES_PER_SEGMENT} x "
          f"{VALUE_BYTES} B for {opts.seconds:.0f} s; drain: {opts.backlog:,} segments"
          f"{' without readahead' if opts.no_readahead else ''}"
          f"{f' (median of {opts.repeat} interleaved drains)' if opts.repeat > 1 else ''}; {os.cpu_count()} CPUs, "
          f"load average {load[0]:.1f} before and {load[1]:.1f} after")
    header = f"{'measurement':<38}" + "".join(f"{label:>22}" for label in labels)
    if len(labels) == 2:
        header += f"{'ratio':>10}"
    print(header + f"{'goal':>12}{'verdict':>9}")
    for title, key, fmt, goal in rows:
        values = [results[label].get(key, float("nan")) for label in labels]
        line = f"{title:<38}" + "".join(f"{fmt.format(v):>22}" for v in values)
        if len(labels) == 2:
            line += f"{values[0] / values[1]:>9.2f}x" if values[1] == values[1] and values[1] else f"{'-':>10}"
        if goal is not None:
            line += f"{goal[0]:>12}{('MET' if goal[1](values[0]) else 'MISSED'):>9}"
        print(line)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
