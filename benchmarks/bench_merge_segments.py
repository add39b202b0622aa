"""What segment merging buys: opening and reading a topic of many small segments, before and after.

Run from the repository root::

    .venv/bin/python benchmarks/bench_merge_segments.py [--segments 2000] [--rows 10] [--root DIR]

It appends ``--segments`` commits of ``--rows`` 100-byte messages (fsync off, checkpoint every 100
versions, as a busy producer leaves a topic), then times, each the best of ``--repeats`` with a fresh
``TopicLog`` handle (so no in-memory state or segment cache helps; the OS page cache does):

- **open**: load the latest snapshot (newest checkpoint plus the commits after it);
- **read all**: ``TopicLog.read`` of every message;

before the merge, right after it (the newest checkpoint still lists every small segment, and the
merge commit is replayed on top), after a checkpoint of the merged state (which still carries the
old files' tombstones), and after a vacuum (old files deleted, its checkpoint without tombstones).
It also prints how long the merge itself took.  This is a benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig
from broker_core.jobs import merge_segments, vacuum
from broker_core.log.segment import SEGMENT_SCHEMA, TIMESTAMP
from broker_core.naming import TopicName
from broker_core.storage import LocalFileIO
from broker_core.topic.topic_log import TopicLog

TOPIC = "persistent://public/default/bench-merge"


def table(start: int, rows: int) -> pa.Table:
    n = rows
    columns = {
        "value": pa.array([os.urandom(100) for _ in range(n)], pa.binary()),
        "key": pa.array([f"k{(start + i) % 64}" for i in range(n)], pa.string()),
        "sticky_key_hash": pa.array(np.zeros(n, dtype=np.int32)),
        "producer_name": pa.array(["bench"] * n, pa.string()),
        "sequence_id": pa.array(np.arange(start, start + n), pa.int64()),
        "publish_time": pa.array(np.full(n, time.time_ns() // 1000), pa.int64()).cast(TIMESTAMP),
    }
    return pa.Table.from_arrays([columns.get(f.name, pa.nulls(n, f.type)) for f in SEGMENT_SCHEMA],
                                schema=SEGMENT_SCHEMA)


def best_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return min(times)


def measure(root: str, path: str, repeats: int) -> tuple[float, float, int]:
    def open_log() -> TopicLog:
        log = TopicLog(LocalFileIO(root, fsync=False), path)
        log.snapshot()
        return log

    def read_all() -> int:
        log = open_log()
        snap = log.snapshot()
        rows, _ = log.read(snap.first_offset, snap.next_offset, snapshot=snap)
        return rows.num_rows

    segments = len(open_log().snapshot().segments)
    return best_ms(open_log, repeats), best_ms(read_all, repeats), segments


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--root", help="a directory to build the topic in (default: a temporary one)")
    args = parser.parse_args()
    root = args.root or tempfile.mkdtemp(prefix="bench-merge-")
    try:
        broker = Broker.for_url(root, BrokerConfig(fsync_enabled=False, checkpoint_interval=100))
        log = broker.topic_log(TopicName.parse(TOPIC))
        t0 = time.perf_counter()
        for i in range(args.segments):
            log.append(table(i * args.rows, args.rows), layout=[args.rows])
        log.log.wait_for_checkpoints()
        print(f"built {args.segments} segments of {args.rows} messages in {time.perf_counter() - t0:.1f} s")
        rows = [("before the merge", *measure(root, log.path, args.repeats))]
        t0 = time.perf_counter()
        summary = merge_segments(broker, TOPIC, min_age_ms=0, dry_run=False)
        merge_s = time.perf_counter() - t0
        rows.append(("after the merge", *measure(root, log.path, args.repeats)))
        log.log.checkpoint()
        rows.append(("after a checkpoint", *measure(root, log.path, args.repeats)))
        vacuum(broker, TOPIC, min_age_ms=0, enforce_min_age=False, dry_run=False)  # nothing else runs here
        rows.append(("after vacuum", *measure(root, log.path, args.repeats)))
        print(f"merge: {summary.results[0].describe()} in {merge_s * 1000:.0f} ms")
        print(f"{'state':<22}{'segments':>10}{'open ms':>10}{'read all ms':>13}")
        for label, open_ms, read_ms, segments in rows:
            print(f"{label:<22}{segments:>10}{open_ms:>10.1f}{read_ms:>13.1f}")
        size = sum(p.stat().st_size for p in Path(root).rglob("*") if p.is_file())
        print(f"topic directory after vacuum: {size} bytes")
    finally:
        if not args.root:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
