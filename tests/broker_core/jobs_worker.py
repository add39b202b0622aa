"""Subprocess side of the jobs' kill tests: build a topic, run the jobs until killed, probe with deltalake.

Run as ``python jobs_worker.py <mode> '<json args>'``; lines are flushed at once so a SIGKILL loses
nothing that was printed.

- ``fork-server``: imports everything once and prints ``ready``; then, for each JSON line on stdin
  (``root``, ``seed``, ``steps``, ``rows``), forks a child that opens the topic (``started <next
  offset>``) and loops: append a segment (``appended <end offset>`` once it is committed), move one
  subscription's cursor forward, run retention, and every few steps TTL, a checkpoint, vacuum and
  log cleanup (the destructive ones with no minimum age), printing ``step <i>`` after each step and
  ``done`` at the end.  The server prints ``pid <child>`` right after the fork (the test SIGKILLs
  that process at a random instant) and ``exit <status>`` once the child is gone.  Forking a warm
  interpreter makes a trial cost milliseconds instead of a second of imports.
- ``probe``: open each given table directory with ``deltalake`` and print one JSON line per table
  (rows, version, ``txn`` versions, or the error), then leave with ``os._exit(0)`` because delta-rs
  can abort at interpreter exit (``reference/delta-log-notes.md`` section 6).

Imported as a module it holds the helpers the ``test_jobs_*.py`` files share: building topics one
segment at a time with chosen publish times, setting cursors, snapshotting a root's files, probing.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
from log_helpers import producer_table

from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig
from broker_core.jobs import checkpoint, cleanup_logs, run_retention, run_ttl, vacuum
from broker_core.log.segment import TIMESTAMP
from broker_core.log.segment_ref import SegmentRef
from broker_core.naming import TopicName
from broker_core.subscription.cursor import ConsumerType, Cursor, new_cursor
from broker_core.subscription.ranges import RangeSet
from broker_core.topic.topic_log import TopicLog

TOPIC = "persistent://public/default/kill"
NOW_MS = 1_800_000_000_000
OLD_MS = NOW_MS - 2 * 3600_000  # outside the 30-minute retention
RECENT_MS = NOW_MS - 60_000  # inside it
SUBSCRIPTIONS = ("a", "b", "c")


T = "persistent://public/default/t"
WORKER = Path(__file__)


# --- helpers shared by the test modules ---------------------------------------------------------------


def make_broker(root: Path | str, **config: Any) -> Broker:
    """The broker of ``root``: a folder, or an ``s3://`` URL reached through the ``AWS_*`` environment."""
    return Broker.for_url(str(root), BrokerConfig(fsync_enabled=False, **config), create_root=True)


def log_of(broker: Broker, topic: str = T) -> TopicLog:
    return broker.topic_log(TopicName.parse(topic))


def append(
    broker: Broker,
    rows: int = 5,
    *,
    publish_ms: int = NOW_MS,
    topic: str = T,
    deliver_at_ms: int | None = None,
    value_bytes: int = 0,
) -> SegmentRef:
    """One segment of ``rows`` messages valued ``p:<offset>`` (or random bytes of ``value_bytes``)."""
    log = log_of(broker, topic)
    start = log.snapshot().next_offset
    table = producer_table("p", range(start, start + rows), publish_ms=publish_ms)
    if deliver_at_ms is not None:
        column = pa.array([deliver_at_ms * 1000] * rows, pa.int64()).cast(TIMESTAMP)
        table = table.set_column(table.schema.get_field_index("deliver_at"), "deliver_at", column)
    if value_bytes:
        blobs = pa.array([os.urandom(value_bytes) for _ in range(rows)], pa.binary())
        table = table.set_column(0, "value", blobs)
    result = log.append(table, layout=[-rows])
    assert result.segment is not None
    return result.segment


def set_cursor(
    broker: Broker, sub: str, mark_delete: int, acked: Iterable[Iterable[int]] = (), topic: str = T
) -> None:
    """Create or overwrite a subscription's cursor position (a test may move it anywhere)."""

    def fn(cursor: Cursor | None) -> Cursor:
        cursor = cursor or new_cursor(sub, ConsumerType.Shared, 0)
        cursor.mark_delete = mark_delete
        cursor.acked = RangeSet(acked)
        return cursor

    broker.cursor_store(TopicName.parse(topic), sub).update(fn)


def live_values(log: TopicLog) -> dict[int, bytes]:
    """Offset -> value of every live message at the latest version."""
    snap = log.snapshot()
    table, offsets = log.read(snap.first_offset, snap.next_offset, snapshot=snap)
    return dict(zip(offsets.tolist(), table.column("value").to_pylist(), strict=True))


def files_of(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes: equal before and after means nothing changed."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def topic_path(root: Path, topic: str = T) -> Path:
    return root.joinpath(*TopicName.parse(topic).relative_path())


def probe(*paths: Path | str, app_ids: Iterable[str] = (),
          storage_options: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """What deltalake reads in each table directory (run in a subprocess, see ``probe`` mode)."""
    args = {"paths": [str(p) for p in paths], "app_ids": list(app_ids), "storage_options": storage_options or None}
    out = subprocess.run(
        [sys.executable, str(WORKER), "probe", json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert len(lines) == len(paths), out.stderr[-2000:]
    return lines


# --- the kill test's topic and worker -----------------------------------------------------------------


def config() -> BrokerConfig:
    return BrokerConfig(fsync_enabled=False, checkpoint_interval=7)


def expected_value(offset: int) -> bytes:
    return f"p:{offset}".encode()


def build_topic(root: str, *, old_segments: int, recent_segments: int, rows: int) -> Broker:
    """A topic of ``old + recent`` segments of ``rows`` messages (value ``p:<offset>``), three
    subscriptions at the start, and a 30-minute retention policy on the topic."""
    broker = Broker.for_url(root, config(), create_root=True)
    topic = TopicName.parse(TOPIC)
    log = broker.topic_log(topic)
    offset = 0
    for i in range(old_segments + recent_segments):
        publish = OLD_MS + i if i < old_segments else RECENT_MS + i
        log.append(producer_table("p", range(offset, offset + rows), publish_ms=publish), layout=[-rows])
        offset += rows
    for sub in SUBSCRIPTIONS:
        broker.create_subscription(topic, sub)
    broker.policies.set_topic_policies(
        TOPIC, {"retentionTimeInMinutes": 30, "retentionSizeInMB": -1, "messageTTLInSeconds": 3 * 3600}
    )
    return broker


def _advance(broker: Broker, sub: str, by: int) -> None:
    def fn(cursor: Cursor | None) -> Cursor | None:
        if cursor is None:
            return None
        cursor.ack_cumulative(cursor.mark_delete + by - 1)
        return cursor

    broker.cursor_store(TopicName.parse(TOPIC), sub).update(fn)


def maintain(args: dict[str, Any]) -> None:
    broker = Broker.for_url(args["root"], config())
    topic = TopicName.parse(TOPIC)
    log = broker.topic_log(topic)
    rng = random.Random(args["seed"])
    rows = args["rows"]
    print(f"started {log.snapshot().next_offset}", flush=True)
    for step in range(args["steps"]):
        start = log.snapshot().next_offset  # a producer keeps appending (inside the retention window)
        log.append(
            producer_table("p", range(start, start + rows), publish_ms=RECENT_MS + step), layout=[-rows]
        )
        print(f"appended {start + rows}", flush=True)
        _advance(broker, SUBSCRIPTIONS[step % len(SUBSCRIPTIONS)], rng.randint(0, 2 * rows))
        run_retention(broker, TOPIC, now_ms=NOW_MS)
        if step % 4 == 1:
            run_ttl(broker, TOPIC, now_ms=NOW_MS)
        if step % 5 == 2:
            checkpoint(broker, TOPIC)
        if step % 6 == 3:
            vacuum(broker, TOPIC, min_age_ms=0, enforce_min_age=False, dry_run=False)
        if step % 7 == 4:
            cleanup_logs(broker, TOPIC, retention_ms=0, enforce_min_age=False, dry_run=False)
        print(f"step {step}", flush=True)
    print("done", flush=True)


def fork_server(_: dict[str, Any]) -> None:
    import pyarrow.dataset  # noqa: F401 - parquet reads import it lazily (0.6 s); children inherit it

    print("ready", flush=True)
    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:  # the child: no threads were started before the fork
            try:
                maintain(json.loads(line))
            finally:
                os._exit(0)
        print(f"pid {pid}", flush=True)
        _, status = os.waitpid(pid, 0)
        # on a line of its own: a child killed in the middle of a line leaves it unterminated
        print(f"\nexit {status}", flush=True)


def probe_main(args: dict[str, Any]) -> None:
    from deltalake import DeltaTable

    for path in args["paths"]:
        try:
            dt = DeltaTable(path, storage_options=args.get("storage_options"))
            table = dt.to_pyarrow_table()
            values = sorted(v.decode() for v in table.column("value").to_pylist())
            out: dict[str, Any] = {
                "path": path,
                "num_rows": table.num_rows,
                "values": values,
                "version": dt.version(),
                "txns": {a: dt.transaction_version(a) for a in args.get("app_ids", [])},
            }
        except Exception as exc:  # reported to the test, which fails with it
            out = {"path": path, "error": repr(exc)}
        sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    mode, raw = sys.argv[1], json.loads(sys.argv[2])
    {"fork-server": fork_server, "probe": probe_main}[mode](raw)
