"""Throughput and latency of the topic log against plain Parquet and ``deltalake`` on the same data.

Run from the repository root::

    .venv/bin/python benchmarks/bench_log.py [--messages N] [--root DIR] [--profile]

What it measures (each against a baseline timed in the same run, on identical Arrow data):

a. bulk append of N messages (100-byte values, short string keys): ``Producer.send_table`` and
   ``TopicLog.append`` vs ``pyarrow.parquet.write_table`` of the same table to one file;
b. bulk read of those messages, each run in a fresh process so no segment cache helps:
   ``Reader.read_batch`` and ``TopicLog.read`` vs ``pyarrow.parquet.read_table`` of that file;
c. per-message publishing: ``send_async`` with batching, then ``flush``; synchronous ``send`` with
   batching off (reference: the same batches written as plain Parquet files);
d. commits per second, 100-row appends: ``TopicLog.append`` vs ``deltalake.write_deltalake``;
e. commit latency and topic open time at log version ~10 vs ~10,000.

This is a benchmark, not a test: nothing is asserted.  Each figure is the best of ``--repeats`` runs
where a run is short; goals are printed as MET or MISSED.  ``--profile`` re-runs every missed
measurement under cProfile and prints where the time goes.  Page caches are not dropped (that needs
root), so "from disk" means from a file the OS may hold in memory, for the baseline and for us alike.
Neither baseline fsyncs (delta-rs's local store does not), so goals are judged on our default
(fsync on) and the "fsync off" rows give the like-for-like comparison.  Variants are interleaved so
that background load hits them alike; on a busy machine, rerun before trusting a single figure.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:  # run as a script from a checkout without installing the project
    sys.path.insert(0, str(_REPO))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from broker_core.broker.tenancy import topic_dir  # noqa: E402
from broker_core.client.client import Client  # noqa: E402
from broker_core.log.segment import SEGMENT_SCHEMA  # noqa: E402
from broker_core.message_id import MessageId  # noqa: E402
from broker_core.naming import TopicName  # noqa: E402
from broker_core.producer.bulk import to_segment_rows  # noqa: E402
from broker_core.storage import LocalFileIO  # noqa: E402
from broker_core.topic.topic_log import TopicLog  # noqa: E402

VALUE_BYTES = 100
DISTINCT_KEYS = 10_000
MAX_MESSAGE_SIZE = 5 * 1024 * 1024


# --- reporting ---------------------------------------------------------------------------------------


@dataclass
class Row:
    section: str
    label: str
    figure: str
    ratio: str = ""
    goal: str = ""
    verdict: str = ""


@dataclass
class Goal:
    key: str
    description: str
    met: bool
    prepare_profile: Callable[[], Callable[[], object]] | None = None


class Report:
    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.goals: list[Goal] = []

    def add(self, section: str, label: str, figure: str, ratio: str = "") -> None:
        self.rows.append(Row(section, label, figure, ratio))

    def goal(
        self,
        section: str,
        label: str,
        figure: str,
        ratio: str,
        goal: str,
        met: bool,
        *,
        key: str,
        prepare_profile: Callable[[], Callable[[], object]] | None = None,
    ) -> None:
        """A figure with a goal; ``prepare_profile`` sets up and returns the action ``--profile`` times."""
        self.rows.append(Row(section, label, figure, ratio, goal, "MET" if met else "MISSED"))
        self.goals.append(Goal(key, f"{label.strip()}: {ratio} (goal {goal})", met, prepare_profile))

    def print(self) -> None:
        headers = Row("", "measurement", "figure", "ratio", "goal", "verdict")
        widths = [
            max(len(getattr(r, f)) for r in [headers, *self.rows])
            for f in ("label", "figure", "ratio", "goal")
        ]
        section = None
        line = "-" * (sum(widths) + 20)
        print(line)
        print(
            f"{headers.label:<{widths[0]}}  {headers.figure:<{widths[1]}}  {headers.ratio:<{widths[2]}}  "
            f"{headers.goal:<{widths[3]}}  {headers.verdict}"
        )
        for row in self.rows:
            if row.section != section:
                section = row.section
                print(line)
                print(section)
            print(
                f"{row.label:<{widths[0]}}  {row.figure:<{widths[1]}}  {row.ratio:<{widths[2]}}  "
                f"{row.goal:<{widths[3]}}  {row.verdict}"
            )
        print(line)
        met = [g for g in self.goals if g.met]
        missed = [g for g in self.goals if not g.met]
        print(f"goals met: {len(met)}/{len(self.goals)}")
        for g in met:
            print(f"  MET     {g.description}")
        for g in missed:
            print(f"  MISSED  {g.description}")


def progress(text: str) -> None:
    print(f"... {text}", file=sys.stderr, flush=True)


def rate(count: int, seconds: float) -> str:
    per_s = count / seconds if seconds > 0 else float("inf")
    if per_s >= 1e6:
        return f"{per_s / 1e6:.2f} M msg/s"
    if per_s >= 1e3:
        return f"{per_s / 1e3:.1f} k msg/s"
    return f"{per_s:.0f} msg/s"


def secs(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.3f} s"


def ms(value: float) -> str:
    return f"{value:.3f} ms"


def interleaved_best(repeats: int, runs: dict[str, Callable[[int], float]]) -> dict[str, float]:
    """Best seconds per variant over ``repeats`` rounds; each round runs every variant once.

    ``run(i)`` returns the seconds it measured itself (setup excluded).  Interleaving exposes every
    variant to the same background load.
    """
    best = dict.fromkeys(runs, float("inf"))
    for i in range(repeats):
        for name, run in runs.items():
            best[name] = min(best[name], run(i))
    return best


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def profile_and_print(title: str, prepare: Callable[[], Callable[[], object]], limit: int = 20) -> None:
    action = prepare()  # setup (e.g. building a long log) is not profiled
    profiler = cProfile.Profile()
    profiler.enable()
    action()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(limit)
    print(f"\n=== cProfile: {title} (top {limit} by cumulative time) ===")
    text = out.getvalue()
    start = text.find("   ncalls")
    print(text[start:] if start >= 0 else text)


# --- data ----------------------------------------------------------------------------------------------


def make_table(n: int, seed: int = 7) -> pa.Table:
    """``n`` messages: random 100-byte values and short string keys (10,000 distinct)."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=n * VALUE_BYTES, dtype=np.uint8)
    offsets = np.arange(0, n * VALUE_BYTES + 1, VALUE_BYTES, dtype=np.int32)
    values = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    key_ids = rng.integers(0, DISTINCT_KEYS, size=n)
    keys = pa.array([f"user-{k}" for k in key_ids.tolist()], pa.string())
    return pa.table({"value": values, "key": keys})


def segment_rows(table: pa.Table, producer: str = "bench") -> pa.Table:
    """The user table as segment rows (what ``send_table`` hands to ``TopicLog.append``)."""
    rows, _ = to_segment_rows(
        table,
        publish_time_ms=int(time.time() * 1000),
        max_message_size=MAX_MESSAGE_SIZE,
        default_producer=producer,
    )
    seq = pa.array(np.arange(rows.num_rows, dtype=np.int64))
    return rows.set_column(rows.schema.get_field_index("sequence_id"), "sequence_id", seq)


def tpath(name: str) -> str:
    """Directory of a short topic name, as the client lays it out."""
    return topic_dir(TopicName.parse(name))


def new_topic_log(root: str, name: str, *, fsync: bool = True, checkpoint_interval: int = 100) -> TopicLog:
    log = TopicLog(LocalFileIO(root, fsync=fsync), tpath(name), checkpoint_interval=checkpoint_interval)
    log.create(name=str(TopicName.parse(name)))
    return log


# --- a. bulk append -------------------------------------------------------------------------------------


def bench_bulk_append(
    root: str, table: pa.Table, rows: pa.Table, repeats: int, report: Report
) -> dict[str, str]:
    n = table.num_rows
    os.makedirs(f"{root}/baseline", exist_ok=True)
    section = f"a. bulk append, {n:,} messages ({VALUE_BYTES}-byte values + key), best of {repeats}"
    progress("a. bulk append")

    def baseline(i: int) -> float:
        return timed(lambda: pq.write_table(table, f"{root}/baseline/bulk-{i}.parquet"))

    def send_table(i: int) -> float:
        client = Client(root)
        producer = client.create_producer(f"bulk-client-{i}", batching_enabled=True)
        try:
            return timed(lambda: producer.send_table(table))
        finally:
            client.close()

    def direct(fsync: bool) -> Callable[[int], float]:
        def run(i: int) -> float:
            log = new_topic_log(root, f"bulk-direct-{'sync' if fsync else 'nosync'}-{i}", fsync=fsync)
            return timed(lambda: log.append(rows, layout=[n]))

        return run

    # interleaved, so that load from other processes hits every variant alike
    best = interleaved_best(
        repeats,
        {"baseline": baseline, "send_table": send_table, "direct": direct(True), "nosync": direct(False)},
    )
    base_s, client_s, direct_s, nosync_s = (best[k] for k in ("baseline", "send_table", "direct", "nosync"))
    report.add(
        section,
        "baseline: pyarrow.parquet.write_table (1 file, no fsync)",
        f"{secs(base_s)}  {rate(n, base_s)}",
    )

    def profile_send_table() -> Callable[[], object]:
        client = Client(root)
        producer = client.create_producer(
            f"bulk-client-profile-{uuid.uuid4().hex[:6]}", batching_enabled=True
        )
        return lambda: producer.send_table(table)

    report.goal(
        section,
        "Producer.send_table (batching, fsync on)",
        f"{secs(client_s)}  {rate(n, client_s)}",
        f"{base_s / client_s:.2f}x",
        ">= 0.5x",
        base_s / client_s >= 0.5,
        key="bulk append (send_table)",
        prepare_profile=profile_send_table,
    )

    def profile_direct() -> Callable[[], object]:
        log = new_topic_log(root, f"bulk-direct-profile-{uuid.uuid4().hex[:6]}")
        return lambda: log.append(rows, layout=[n])

    report.goal(
        section,
        "TopicLog.append (segment table, fsync on)",
        f"{secs(direct_s)}  {rate(n, direct_s)}",
        f"{base_s / direct_s:.2f}x",
        ">= 0.5x",
        base_s / direct_s >= 0.5,
        key="bulk append (TopicLog.append)",
        prepare_profile=profile_direct,
    )
    report.add(
        section,
        "TopicLog.append (segment table, fsync off)",
        f"{secs(nosync_s)}  {rate(n, nosync_s)}",
        f"{base_s / nosync_s:.2f}x",
    )
    return {"baseline_file": f"{root}/baseline/bulk-0.parquet", "client_topic": "bulk-client-0"}


# --- b. bulk read (child process) ------------------------------------------------------------------------


def child_read(spec: dict[str, Any]) -> dict[str, float]:
    """Runs in a fresh process: time each read once, in the order given."""
    root = str(spec["root"])
    n = int(spec["messages"])
    topic = str(spec["topic"])
    client = Client(root)  # broker setup is not part of the read

    def baseline() -> int:
        return pq.read_table(str(spec["baseline_file"])).num_rows

    def topic_log() -> int:
        log = TopicLog(LocalFileIO(root), tpath(topic))
        snap = log.snapshot()
        table, _ = log.read(snap.first_offset, snap.next_offset, snapshot=snap)
        return table.num_rows

    def reader() -> int:
        r = client.create_reader(topic, MessageId.earliest)
        got = 0
        while got < n:
            batch = r.read_batch(n - got)
            if not batch.num_rows:
                break
            got += batch.num_rows
        r.close()
        return got

    modes = {"baseline": baseline, "topic_log": topic_log, "reader": reader}
    out: dict[str, float] = {}
    for name in spec["order"]:
        start = time.perf_counter()
        count = modes[str(name)]()
        out[str(name)] = time.perf_counter() - start
        if count != n:
            out[f"{name}_rows"] = count
    client.close()
    return out


def bench_bulk_read(root: str, n: int, where: dict[str, str], repeats: int, report: Report) -> None:
    section = f"b. bulk read, {n:,} messages, fresh process per run, best of {repeats}"
    progress("b. bulk read (fresh processes)")
    names = ["baseline", "topic_log", "reader"]
    best: dict[str, float] = {m: float("inf") for m in names}
    for i in range(repeats):
        order = names[i % 3 :] + names[: i % 3]  # rotate so no mode always goes first
        spec = {
            "root": root,
            "messages": n,
            "topic": where["client_topic"],
            "baseline_file": where["baseline_file"],
            "order": order,
        }
        done = subprocess.run(
            [sys.executable, __file__, "--child-read", json.dumps(spec)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"read child failed:\n{done.stderr}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        for mode in names:
            if f"{mode}_rows" in result:
                raise RuntimeError(f"{mode} read {result[f'{mode}_rows']} rows, expected {n}")
            best[mode] = min(best[mode], result[mode])
    base_s = best["baseline"]
    report.add(section, "baseline: pyarrow.parquet.read_table (1 file)", f"{secs(base_s)}  {rate(n, base_s)}")

    def profile_reader() -> Callable[[], object]:
        client = Client(root)
        # a fresh handle so the segment is decoded from the file, not served from this process's cache
        from broker_core.broker.handles import forget_topic

        forget_topic(client._broker.io.root_uri, tpath(where["client_topic"]))
        return lambda: client.create_reader(where["client_topic"], MessageId.earliest).read_batch(n)

    def profile_topic_log() -> Callable[[], object]:
        return lambda: TopicLog(LocalFileIO(root), tpath(where["client_topic"])).read(0, n)

    for mode, label, profile in (
        ("reader", "Client.create_reader(earliest).read_batch", profile_reader),
        ("topic_log", "TopicLog.read (fresh TopicLog, incl. open)", profile_topic_log),
    ):
        took = best[mode]
        report.goal(
            section,
            label,
            f"{secs(took)}  {rate(n, took)}",
            f"{base_s / took:.2f}x",
            ">= 0.5x",
            base_s / took >= 0.5,
            key=f"bulk read ({mode})",
            prepare_profile=profile,
        )


# --- c. per-message publishing ----------------------------------------------------------------------------


def bench_per_message(root: str, table: pa.Table, n_async: int, n_sync: int, report: Report) -> None:
    section = f"c. per-message publishing ({VALUE_BYTES}-byte payloads)"
    progress("c. per-message send_async / send")
    payloads: list[bytes] = table.column("value").slice(0, max(n_async, n_sync)).to_pylist()
    client = Client(root)

    producer = client.create_producer(
        "per-msg-async", batching_enabled=True, batching_max_messages=1000, block_if_queue_full=True
    )

    def send_async() -> None:
        for value in payloads[:n_async]:
            producer.send_async(value, None)
        producer.flush()

    async_s = timed(send_async)

    def reference_batches() -> None:
        os.makedirs(f"{root}/baseline/per-msg", exist_ok=True)
        for start in range(0, n_async, 1000):
            batch = pa.table({"value": pa.array(payloads[start : start + 1000], pa.binary())})
            pq.write_table(batch, f"{root}/baseline/per-msg/b-{start}.parquet")

    ref_async_s = timed(reference_batches)
    report.add(
        section,
        f"reference: {n_async:,} msgs as 1,000-row Arrow tables -> Parquet files",
        f"{secs(ref_async_s)}  {rate(n_async, ref_async_s)}",
    )
    report.add(
        section,
        f"send_async x{n_async:,} + flush (batching 1,000, block_if_queue_full)",
        f"{secs(async_s)}  {rate(n_async, async_s)}",
        f"{ref_async_s / async_s:.2f}x",
    )

    sync_producer = client.create_producer("per-msg-sync", batching_enabled=False)

    def send_sync() -> None:
        for value in payloads[:n_sync]:
            sync_producer.send(value)

    sync_s = timed(send_sync)

    def reference_sync() -> None:
        for i in range(n_sync):
            path = f"{root}/baseline/per-msg/one-{i}.parquet"
            pq.write_table(pa.table({"value": pa.array([payloads[i]], pa.binary())}), path)
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    ref_sync_s = timed(reference_sync)
    report.add(
        section,
        f"reference: {n_sync:,} x (1-row Parquet file + fsync)",
        f"{secs(ref_sync_s)}  {rate(n_sync, ref_sync_s)}",
    )
    report.add(
        section,
        f"send x{n_sync:,} (batching off, one commit each)",
        f"{secs(sync_s)}  {rate(n_sync, sync_s)}",
        f"{ref_sync_s / sync_s:.2f}x",
    )
    client.close()


# --- d. commits per second ------------------------------------------------------------------------------


def bench_commits(root: str, rows: pa.Table, commits: int, batch: int, report: Report) -> bool:
    section = f"d. commits/s, {commits} appends of {batch} rows each"
    progress("d. commits per second vs deltalake")
    batches = [rows.slice((i * batch) % max(1, rows.num_rows - batch), batch) for i in range(commits)]
    try:
        from deltalake import DeltaTable, write_deltalake
    except ImportError:
        report.add(section, "deltalake is not installed: skipped", "")
        return False

    def ours(fsync: bool) -> Callable[[pa.Table], object]:
        log = new_topic_log(
            root, f"commits-{'sync' if fsync else 'nosync'}-{uuid.uuid4().hex[:6]}", fsync=fsync
        )
        return lambda b: log.append(b, layout=[b.num_rows])

    def delta_by_path() -> Callable[[pa.Table], object]:
        path = f"{root}/baseline/delta-path-{uuid.uuid4().hex[:6]}"
        write_deltalake(path, rows.slice(0, 0))  # version 0, like our topic's create
        return lambda b: write_deltalake(path, b, mode="append")

    def delta_by_table() -> Callable[[pa.Table], object]:
        path = f"{root}/baseline/delta-table-{uuid.uuid4().hex[:6]}"
        write_deltalake(path, rows.slice(0, 0))
        table = DeltaTable(path)
        return lambda b: write_deltalake(table, b, mode="append")

    # one commit of each variant in turn, so background load hits all of them alike
    variants = {"path": delta_by_path(), "table": delta_by_table(), "ours": ours(True), "nosync": ours(False)}
    totals = dict.fromkeys(variants, 0.0)
    for b in batches:
        for name, commit in variants.items():
            start = time.perf_counter()
            commit(b)
            totals[name] += time.perf_counter() - start
    base_s, table_s, ours_s, nosync_s = (totals[k] for k in ("path", "table", "ours", "nosync"))
    base_rate = commits / base_s
    report.add(
        section, "baseline: write_deltalake(path, mode='append'), no fsync", f"{base_rate:.0f} commits/s"
    )
    report.add(
        section,
        "info: write_deltalake(DeltaTable, mode='append'), no fsync",
        f"{commits / table_s:.0f} commits/s",
        f"{(commits / table_s) / base_rate:.2f}x",
    )

    def profile_commits() -> Callable[[], object]:
        log = new_topic_log(root, f"commits-profile-{uuid.uuid4().hex[:6]}")
        return lambda: [log.append(b, layout=[b.num_rows]) for b in batches]

    ours_rate = commits / ours_s
    report.goal(
        section,
        "TopicLog.append (fsync on)",
        f"{ours_rate:.0f} commits/s",
        f"{ours_rate / base_rate:.1f}x",
        ">= 5x",
        ours_rate / base_rate >= 5,
        key="commits/s",
        prepare_profile=profile_commits,
    )
    report.add(
        section,
        "TopicLog.append (fsync off)",
        f"{commits / nosync_s:.0f} commits/s",
        f"{(commits / nosync_s) / base_rate:.1f}x",
    )
    return True


# --- e. latency vs log length ------------------------------------------------------------------------------


def fill(root: str, name: str, versions: int, one: pa.Table, *, txn_only: bool = False) -> None:
    """Bring a new topic to log version ``versions`` quickly (fsync off; the default checkpoints).

    With ``txn_only`` the filler commits carry no segment (only a ``txn``), so the log grows long
    while the live state stays tiny: that separates log length from the number of live segments.
    """
    log = new_topic_log(root, name, fsync=False)
    empty = SEGMENT_SCHEMA.empty_table()
    for i in range(versions):
        if txn_only:
            log.append(empty, layout=[], txn=("bench-filler", i + 1))
        else:
            log.append(one, layout=[1])
    assert_version = log.snapshot().version
    if assert_version != versions:
        raise RuntimeError(f"filler reached version {assert_version}, wanted {versions}")


def open_times(root: str, names: list[str], tries: int = 5) -> list[float]:
    """Median seconds of a fresh ``TopicLog(...).snapshot()`` per topic, the topics taken in turn."""

    def open_one(name: str) -> float:
        return timed(lambda: TopicLog(LocalFileIO(root), tpath(name)).snapshot())

    samples: list[list[float]] = [[] for _ in names]
    for _ in range(tries):
        for i, name in enumerate(names):
            samples[i].append(open_one(name))
    return [float(np.median(s)) for s in samples]


def commit_latencies(root: str, names: list[str], one: pa.Table, count: int) -> list[np.ndarray]:
    """Milliseconds of ``count`` one-row commits per topic, one commit per topic in turn."""
    # fsync on, default interval, checkpoints written off the commit path as the Broker's topic logs do
    logs = [TopicLog(LocalFileIO(root), tpath(name), background_checkpoints=True) for name in names]
    for log in logs:
        log.snapshot()
    out = [np.empty(count) for _ in names]
    for i in range(count):
        for log, lat in zip(logs, out, strict=True):
            start = time.perf_counter()
            log.append(one, layout=[1])
            lat[i] = time.perf_counter() - start
    return [lat * 1e3 for lat in out]


def bench_latency(root: str, rows: pa.Table, versions: int, count: int, report: Report) -> None:
    section = (
        f"e. commit latency, {count} one-row commits (fsync on, topics taken in turn), at log version 10"
        f" vs {versions:,}; open = fresh TopicLog + snapshot(), median of 5"
    )
    one = rows.slice(0, 1)
    small, big, long_log = "latency-v10", f"latency-v{versions}", f"latency-txn-v{versions}"
    progress(f"e. building logs: 10 versions, {versions:,} one-row commits, {versions:,} txn-only commits")
    fill(root, small, 10, one)
    fill(root, big, versions, one)
    fill(root, long_log, versions, one, txn_only=True)
    progress("e. timing opens and commits")
    open_small, open_big, open_long = open_times(root, [small, big, long_log])
    lat_small, lat_big, lat_long = commit_latencies(root, [small, big, long_log], one, count)

    def stats(lat: np.ndarray) -> tuple[float, float, float]:
        return float(np.percentile(lat, 50)), float(lat.mean()), float(np.percentile(lat, 99))

    s_small, s_big, s_long = stats(lat_small), stats(lat_big), stats(lat_long)

    def fmt(s: tuple[float, float, float]) -> str:
        return f"p50 {ms(s[0])}  mean {ms(s[1])}  p99 {ms(s[2])}"

    report.add(section, "commit at version 10 (10 live segments)", fmt(s_small))
    report.add(
        section,
        f"commit at version {versions:,} ({versions:,} live segments)",
        fmt(s_big),
        f"p99 {s_big[2] / s_small[2]:.2f}x",
    )

    def profile_commits_big() -> Callable[[], object]:
        name = f"latency-profile-{uuid.uuid4().hex[:6]}"
        progress(f"profiling: building another {versions:,}-version log")
        fill(root, name, versions, one)
        log = TopicLog(LocalFileIO(root), tpath(name))
        log.snapshot()
        return lambda: [log.append(one, layout=[1]) for _ in range(count)]

    for label, i in (("p50", 0), ("mean", 1)):
        ratio = s_big[i] / s_small[i]
        report.goal(
            section,
            f"  commit latency {label}, v{versions:,} / v10",
            f"{ms(s_big[i])} vs {ms(s_small[i])}",
            f"{ratio:.2f}x",
            "<= 1.2x",
            ratio <= 1.2,
            key=f"commit latency {label}",
            prepare_profile=profile_commits_big if i == 1 else None,
        )
    report.add(
        section,
        f"commit at version {versions:,} (txn-only log, few live segments)",
        fmt(s_long),
        f"mean {s_long[1] / s_small[1]:.2f}x",
    )
    report.add(section, "open at version 10", secs(open_small))

    def profile_open() -> Callable[[], object]:
        return lambda: TopicLog(LocalFileIO(root), tpath(big)).snapshot()

    report.goal(
        section,
        f"open at version {versions:,} ({versions:,} live segments)",
        secs(open_big),
        f"{open_big / open_small:.2f}x",
        "<= 1.2x (DESIGN 3)",
        open_big / open_small <= 1.2,
        key="open time",
        prepare_profile=profile_open,
    )
    report.add(
        section,
        f"open at version {versions:,} (txn-only log, few live segments)",
        secs(open_long),
        f"{open_long / open_small:.2f}x",
    )


# --- main ---------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages for the bulk append/read")
    parser.add_argument("--root", help="storage root to write under (default: a temporary directory)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per short measurement (best is kept)")
    parser.add_argument("--async-messages", type=int, default=200_000)
    parser.add_argument("--sync-messages", type=int, default=2_000)
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--commit-rows", type=int, default=100)
    parser.add_argument("--log-versions", type=int, default=10_000)
    parser.add_argument("--latency-commits", type=int, default=200)
    parser.add_argument(
        "--profile", action="store_true", help="cProfile every measurement that missed its goal"
    )
    parser.add_argument("--keep", action="store_true", help="keep the data written (always kept with --root)")
    parser.add_argument("--child-read", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child_read:
        print(json.dumps(child_read(json.loads(args.child_read))))
        sys.stdout.flush()
        os._exit(0)

    if args.root:
        os.makedirs(args.root, exist_ok=True)
        root = tempfile.mkdtemp(prefix="bench-log-", dir=args.root)
        cleanup = False
    else:
        root = tempfile.mkdtemp(prefix="bench-log-")
        cleanup = not args.keep
    print(f"storage root: {root}  (cpus: {os.cpu_count()}, pyarrow {pa.__version__})")
    started = time.perf_counter()
    report = Report()
    try:
        progress(f"generating {args.messages:,} messages")
        table = make_table(args.messages)
        rows = segment_rows(table)
        where = bench_bulk_append(root, table, rows, args.repeats, report)
        bench_bulk_read(root, args.messages, where, args.repeats, report)
        bench_per_message(root, table, args.async_messages, args.sync_messages, report)
        bench_commits(root, rows, args.commits, args.commit_rows, report)
        bench_latency(root, rows, args.log_versions, args.latency_commits, report)
        print(f"total run time {time.perf_counter() - started:.0f} s")
        report.print()
        if args.profile:
            for goal in report.goals:
                if not goal.met and goal.prepare_profile is not None:
                    profile_and_print(goal.key, goal.prepare_profile)
    finally:
        if cleanup:
            shutil.rmtree(root, ignore_errors=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # deltalake (delta-rs) can abort at interpreter exit after correct output; skip the teardown.
    os._exit(0)


if __name__ == "__main__":
    main()
