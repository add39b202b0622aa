"""Retention, checkpoint, log cleanup and vacuum over a topic of 10,000 segments.

Run from the repository root::

    .venv/bin/python benchmarks/bench_retention.py [--segments N] [--rows R] [--root DIR]

What it measures (fsync off for building, so the set-up takes seconds; the jobs run as configured):

a. retention planning (``run_retention(dry_run=True)``: read the cursors, decide) and the commit that
   removes 90% of the segments (one put-if-absent commit of N*0.9 ``remove`` actions);
b. what that commit costs readers: a fresh process opening the topic (replaying it), then after a
   checkpoint (which now carries the tombstones);
c. vacuum: planning (dry run) and deleting the removed files, against two baselines measured in the
   same run on identical copies of the topic: plain ``os.unlink`` of the same files, and
   ``deltalake``'s own ``vacuum`` (lite mode, run in a subprocess because delta-rs can abort at exit);
d. log cleanup (``cleanup_logs``) of the commits before the newest checkpoint.

This is a benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:  # run as a script from a checkout without installing the project
    sys.path.insert(0, str(_REPO))

import pyarrow as pa  # noqa: E402

from broker_core.broker.broker import Broker  # noqa: E402
from broker_core.config import BrokerConfig  # noqa: E402
from broker_core.jobs import checkpoint, cleanup_logs, run_retention, vacuum  # noqa: E402
from broker_core.log.segment import encode_segment  # noqa: E402
from broker_core.naming import TopicName  # noqa: E402
from broker_core.producer.bulk import to_segment_rows  # noqa: E402
from broker_core.subscription.cursor import ConsumerType, Cursor, new_cursor  # noqa: E402
from broker_core.topic.topic_log import StagedSegment, TopicLog  # noqa: E402

TOPIC = "persistent://public/default/bench"
DAY_MS = 86_400_000

_DELTA_VACUUM = """
import json, sys, time, os
from deltalake import DeltaTable
t = time.perf_counter()
dt = DeltaTable(sys.argv[1])
opened = time.perf_counter() - t
t = time.perf_counter()
files = dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
print(json.dumps({"open_s": opened, "vacuum_s": time.perf_counter() - t, "deleted": len(files)}), flush=True)
os._exit(0)
"""


def timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def build(root: Path, segments: int, rows: int) -> tuple[Broker, TopicLog]:
    """``segments`` segments of ``rows`` messages in 100 commits (the same encoded bytes in every file)."""
    broker = Broker.for_url(str(root), BrokerConfig(fsync_enabled=False))
    topic = TopicName.parse(TOPIC)
    log = broker.topic_log(topic)
    table = pa.table({"value": pa.array([b"x" * 100] * rows, pa.binary())})
    rows_table, _ = to_segment_rows(table, publish_time_ms=1_700_000_000_000, max_message_size=1 << 20)
    data = encode_segment(rows_table)
    per_commit = max(1, segments // 100)
    for start in range(0, segments, per_commit):
        staged = []
        for _ in range(min(per_commit, segments - start)):
            path = f"part-{os.urandom(16).hex()}.parquet"
            broker.io.write_new(f"{log.path}/{path}", data)
            staged.append(StagedSegment(path=path, size_bytes=len(data), num_records=rows,
                                        min_publish_ms=1_700_000_000_000, max_publish_ms=1_700_000_000_000))
        log.commit_staged(staged)
    log.log.wait_for_checkpoints()
    return broker, log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--root", default=None, help="work directory (default: a temporary one)")
    args = parser.parse_args()
    work = Path(args.root or tempfile.mkdtemp(prefix="bench-retention-"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    root = work / "ours"
    (broker, log), build_s = timed(lambda: build(root, args.segments, args.rows))
    snap = log.snapshot()
    print(f"built {len(snap.segments)} segments ({snap.next_offset} messages, log version {snap.version}) "
          f"in {build_s:.1f} s")

    keep_from = snap.segments[int(len(snap.segments) * 0.9)].base_offset

    def at(cursor: Cursor | None) -> Cursor:
        cursor = cursor or new_cursor("s", ConsumerType.Exclusive, 0)
        cursor.mark_delete = keep_from
        return cursor

    broker.cursor_store(TopicName.parse(TOPIC), "s").update(at)

    print("\na. retention")
    plan, plan_s = timed(lambda: run_retention(broker, TOPIC, dry_run=True))
    planned = len(plan.results[0].removed_paths)
    print(f"   plan (dry run): {plan_s * 1000:8.1f} ms  ({planned} segments to remove)")
    done, commit_s = timed(lambda: run_retention(broker, TOPIC))
    result = done.results[0]
    topic_dir = root.joinpath(*TopicName.parse(TOPIC).relative_path())
    commit_file = topic_dir / "_delta_log" / f"{result.version:020d}.json"
    print(f"   plan + commit:   {commit_s * 1000:8.1f} ms  (commit {result.version}: "
          f"{commit_file.stat().st_size / 1e6:.1f} MB of JSON, first offset {result.first_offset})")
    again, again_s = timed(lambda: run_retention(broker, TOPIC))
    print(f"   second run:      {again_s * 1000:8.1f} ms  (changed: {again.changed})")

    print("\nb. readers")
    _, open_s = timed(lambda: TopicLog(broker.io, log.path).snapshot())
    print(f"   fresh open, replaying the removal: {open_s * 1000:8.1f} ms")
    _, ckpt_s = timed(lambda: checkpoint(broker, TOPIC))
    print(f"   checkpoint with {len(log.snapshot().tombstones)} tombstones: {ckpt_s * 1000:8.1f} ms")
    _, open2_s = timed(lambda: TopicLog(broker.io, log.path).snapshot())
    print(f"   fresh open from that checkpoint:    {open2_s * 1000:8.1f} ms")

    print("\nc. vacuum of the removed files (same files, three ways)")
    plain_copy, delta_copy = work / "plain", work / "delta"
    shutil.copytree(topic_dir, plain_copy)
    shutil.copytree(topic_dir, delta_copy)
    later = time.time_ns() // 1_000_000 + DAY_MS
    dry, dry_s = timed(lambda: vacuum(broker, TOPIC, min_age_ms=DAY_MS // 2, now_ms=later))
    print(f"   ours, plan (dry run): {dry_s * 1000:8.1f} ms  ({len(dry.results[0].deleted_removed)} files)")
    real, vac_s = timed(lambda: vacuum(broker, TOPIC, min_age_ms=DAY_MS // 2, now_ms=later, dry_run=False))
    print(f"   ours, delete:         {vac_s * 1000:8.1f} ms  ({len(real.results[0].deleted_removed)} files, "
          f"{real.results[0].dropped_tombstones} tombstones dropped)")
    doomed = [plain_copy / p for p in real.results[0].deleted_removed]
    start = time.perf_counter()
    for path in doomed:
        os.unlink(path)
    print(f"   baseline os.unlink:   {(time.perf_counter() - start) * 1000:8.1f} ms  ({len(doomed)} files)")
    command = [sys.executable, "-c", _DELTA_VACUUM, str(delta_copy)]
    out = subprocess.run(command, capture_output=True, text=True)
    try:
        delta = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"   baseline deltalake:   {delta['vacuum_s'] * 1000:8.1f} ms  ({delta['deleted']} files; open "
              f"{delta['open_s'] * 1000:.0f} ms more)")
    except (IndexError, ValueError):
        print(f"   baseline deltalake:   failed ({out.stderr.strip()[-300:]})")

    print("\nd. log cleanup")
    cleaned, clean_s = timed(lambda: cleanup_logs(broker, TOPIC, retention_ms=0, enforce_min_age=False,
                                                  now_ms=later, dry_run=False))
    gone = cleaned.results[0]
    print(f"   cleanup_logs:         {clean_s * 1000:8.1f} ms  ({len(gone.deleted)} log files, kept "
          f"checkpoint {gone.kept_checkpoint})")
    _, open3_s = timed(lambda: TopicLog(broker.io, log.path).snapshot())
    print(f"   fresh open after:     {open3_s * 1000:8.1f} ms")
    if args.root is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
