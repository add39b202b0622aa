"""Checkpoints, old-log cleanup (the Delta rule) and vacuum: what goes, what stays, who can still read."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from jobs_worker import T, append, files_of, live_values, log_of, make_broker, probe, set_cursor, topic_path
from log_helpers import producer_table

from broker_core import InvalidConfiguration, TopicNotFound
from broker_core.broker.broker import Broker
from broker_core.jobs import MIN_SAFE_AGE_MS, checkpoint, cleanup_logs, run_retention, vacuum
from broker_core.log.checkpoint import LAST_CHECKPOINT, LOG_DIR
from broker_core.log.transaction_log import TransactionLog
from broker_core.naming import TopicName
from broker_core.producer.bulk import commit_staged_once, staged_manifest_path
from broker_core.topic.topic_log import TopicLog

DAY = 86_400_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def log_dir(root: Path) -> Path:
    return topic_path(root) / LOG_DIR


def age(path: Path, ms: int) -> None:
    """Make a file look ``ms`` old."""
    when = (now_ms() - ms) / 1000
    os.utime(path, (when, when))


def fresh_state(broker: Broker) -> tuple[int, dict[int, bytes], dict[str, int]]:
    """What a brand-new process sees: version, live messages, txn versions."""
    log = TopicLog(broker.io, log_of(broker).path)
    snap = log.snapshot()
    return snap.version, live_values(log), {k: t.version for k, t in snap.txns.items()}


# --- checkpoint --------------------------------------------------------------------------------------------


def test_checkpoint_is_idempotent(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    append(broker)
    broker.admin.create_partitioned_topic("persistent://public/default/p", 2)
    first = checkpoint(broker, T).result_for(T)
    assert first.created and first.version == 1
    before = files_of(tmp_path)
    again = checkpoint(broker, T)
    assert not again.changed and again.result_for(T).version == 1
    assert files_of(tmp_path) == before
    assert json.loads((log_dir(tmp_path) / LAST_CHECKPOINT).read_text())["version"] == 1
    parts = checkpoint(broker, "persistent://public/default/p")
    assert [r.version for r in parts.results] == [None, None]  # no partition has a log yet
    with pytest.raises(TopicNotFound):
        checkpoint(broker, "persistent://public/default/missing")


# --- cleanup_logs -----------------------------------------------------------------------------------------


def _history(tmp_path: Path, commits: int = 17) -> Broker:
    broker = make_broker(tmp_path, checkpoint_interval=5)
    for _ in range(commits):
        append(broker, 2)
    log_of(broker).log.wait_for_checkpoints()
    return broker


def test_cleanup_keeps_the_newest_checkpoint_before_the_cutoff_its_commit_and_everything_after(
    tmp_path: Path,
) -> None:
    broker = _history(tmp_path)  # versions 0..17, checkpoints at 5, 10, 15
    for version in range(18):
        for name in (f"{version:020d}.json", f"{version:020d}.checkpoint.parquet"):
            if (log_dir(tmp_path) / name).exists():
                age(log_dir(tmp_path) / name, 3 * DAY if version <= 12 else 0)
    state = fresh_state(broker)
    before = files_of(tmp_path)
    dry = cleanup_logs(broker, T, retention_ms=DAY).result_for(T)  # dry run by default
    assert dry.dry_run and dry.kept_checkpoint == 10 and not dry.changed
    expected = sorted(
        [f"{v:020d}.json" for v in range(10)] + [f"{5:020d}.checkpoint.parquet"]
    )  # oldest first
    assert list(dry.deleted) == expected
    assert files_of(tmp_path) == before
    done = cleanup_logs(broker, T, retention_ms=DAY, dry_run=False).result_for(T)
    assert done.changed and done.deleted == dry.deleted
    left = sorted(p.name for p in log_dir(tmp_path).iterdir())
    assert left == sorted(
        [f"{v:020d}.json" for v in range(10, 18)]
        + [f"{v:020d}.checkpoint.parquet" for v in (10, 15)]
        + [LAST_CHECKPOINT]
    )
    # our log, a new process, existence checks and deltalake all still read the table
    assert fresh_state(broker) == state
    assert TransactionLog(broker.io, log_of(broker).path).exists()
    assert broker.admin.internal_topic_exists(TopicName.parse(T))
    assert broker.partitions(T, auto_create=False) == [TopicName.parse(T)]
    (seen,) = probe(topic_path(tmp_path), app_ids=["pubsub.nextOffset"])
    assert seen["version"] == 17 and seen["num_rows"] == 34 and seen["txns"] == {"pubsub.nextOffset": 34}
    # and writers carry on
    append(broker, 2)
    assert fresh_state(broker)[0] == 18
    assert not cleanup_logs(broker, T, retention_ms=DAY, dry_run=False).changed  # idempotent


def test_cleanup_without_an_old_enough_checkpoint_deletes_nothing(tmp_path: Path) -> None:
    broker = _history(tmp_path, commits=4)  # no checkpoint at all
    result = cleanup_logs(broker, T, retention_ms=0, enforce_min_age=False, dry_run=False).result_for(T)
    assert result.kept_checkpoint is None and not result.deleted
    broker = _history(tmp_path / "young", commits=12)  # checkpoints, but all younger than the cutoff
    assert not cleanup_logs(broker, T, retention_ms=DAY, dry_run=False).changed


def test_cleanup_writes_the_hint_before_version_zero_goes(tmp_path: Path) -> None:
    broker = _history(tmp_path, commits=7)
    (log_dir(tmp_path) / LAST_CHECKPOINT).unlink()
    state = fresh_state(broker)
    cleanup_logs(broker, T, retention_ms=0, enforce_min_age=False, dry_run=False, now_ms=now_ms() + 1000)
    assert not (log_dir(tmp_path) / f"{0:020d}.json").exists()
    assert json.loads((log_dir(tmp_path) / LAST_CHECKPOINT).read_text())["version"] == 5
    assert TransactionLog(broker.io, log_of(broker).path).exists() and fresh_state(broker) == state


def test_a_stale_handle_reloads_instead_of_recreating_a_cleaned_version(tmp_path: Path) -> None:
    """A process whose cached log state predates the cleanup must neither stall nor commit a version
    number that was deleted (readers start from the newer checkpoint and would never see it)."""
    broker = _history(tmp_path, commits=2)
    stale = TopicLog(broker.io, log_of(broker).path, checkpoint_interval=5)
    assert stale.snapshot().version == 2
    for _ in range(12):
        append(broker, 2)  # through the broker's handle: versions 3..14, checkpoints 5, 10
    log_of(broker).log.wait_for_checkpoints()
    cleanup_logs(broker, T, retention_ms=0, enforce_min_age=False, dry_run=False, now_ms=now_ms() + 1000)
    assert not (log_dir(tmp_path) / f"{3:020d}.json").exists()
    time.sleep(1.05)  # idle polls re-check at most once a second
    assert stale.snapshot().version == 14
    stale2 = TopicLog(broker.io, log_of(broker).path)
    stale2.log._snapshot = TransactionLog(broker.io, log_of(broker).path).snapshot()  # warm cache at 14
    for _ in range(7):  # versions 15..21, checkpoints 15 and 20: cleanup deletes 14..19
        append(broker, 2)
    log_of(broker).log.wait_for_checkpoints()
    cleanup_logs(broker, T, retention_ms=0, enforce_min_age=False, dry_run=False, now_ms=now_ms() + 1000)
    stale2.log._verified_s = time.monotonic() + 3600  # only the commit's own check may save it now
    result = stale2.append(producer_table("late", [0]), layout=[-1])
    assert not (log_dir(tmp_path) / f"{15:020d}.json").exists()
    assert result.version == 22
    version, values, _ = fresh_state(broker)
    assert version == 22 and values[42] == b"late:0"


def test_cleanup_and_vacuum_refuse_short_ages_unless_told(tmp_path: Path) -> None:
    broker = _history(tmp_path, commits=2)
    with pytest.raises(InvalidConfiguration, match="retention_ms"):
        cleanup_logs(broker, T, retention_ms=MIN_SAFE_AGE_MS - 1)
    with pytest.raises(InvalidConfiguration, match="min_age_ms"):
        vacuum(broker, T, min_age_ms=1000)
    for bad in (-1, "1h", None, True):
        with pytest.raises(InvalidConfiguration):
            cleanup_logs(broker, T, retention_ms=bad, enforce_min_age=False)  # type: ignore[arg-type]
        with pytest.raises(InvalidConfiguration):
            vacuum(broker, T, min_age_ms=bad, enforce_min_age=False)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfiguration, match="max_producers"):
        vacuum(broker, T, min_age_ms=DAY, max_producers=0)
    with pytest.raises(InvalidConfiguration, match="enforce_min_age"):
        vacuum(broker, T, min_age_ms=DAY, enforce_min_age="no")  # type: ignore[arg-type]
    with pytest.raises(TopicNotFound):
        vacuum(broker, "persistent://public/default/missing", min_age_ms=DAY)


# --- vacuum -----------------------------------------------------------------------------------------------


def _removed(tmp_path: Path) -> tuple[Broker, list[str]]:
    broker = make_broker(tmp_path, checkpoint_interval=50)
    segs = [append(broker) for _ in range(4)]
    set_cursor(broker, "s", 10)
    run_retention(broker, T)
    return broker, [s.path for s in segs]


def test_vacuum_deletes_removed_segments_after_the_minimum_age(tmp_path: Path) -> None:
    broker, paths = _removed(tmp_path)
    state = fresh_state(broker)
    young = vacuum(broker, T, min_age_ms=10 * 60_000, enforce_min_age=False, dry_run=False).result_for(T)
    assert not young.deleted_removed and young.kept_young == 2 and young.version is None
    later = now_ms() + 11 * 60_000
    before = files_of(tmp_path)
    dry = vacuum(broker, T, min_age_ms=10 * 60_000, enforce_min_age=False, now_ms=later).result_for(T)
    assert dry.dry_run and sorted(dry.deleted_removed) == sorted(paths[:2]) and dry.dropped_tombstones == 2
    assert files_of(tmp_path) == before
    done = vacuum(broker, T, min_age_ms=10 * 60_000, enforce_min_age=False, now_ms=later, dry_run=False)
    result = done.result_for(T)
    assert result.changed and result.deleted_bytes > 0 and result.dropped_tombstones == 2
    assert not any((topic_path(tmp_path) / p).exists() for p in paths[:2])
    assert all((topic_path(tmp_path) / p).exists() for p in paths[2:])
    # the vacuum checkpoint leaves the expired tombstones out; a fresh opener no longer has them
    checkpoint_file = log_dir(tmp_path) / f"{result.version:020d}.checkpoint.parquet"
    rows = pq.read_table(checkpoint_file).to_pylist()
    assert not any(r["remove"] for r in rows) and sum(1 for r in rows if r["add"]) == 2
    assert TransactionLog(broker.io, log_of(broker).path).snapshot().tombstones == {}
    assert fresh_state(broker)[1:] == state[1:]
    (seen,) = probe(topic_path(tmp_path))
    assert seen["values"] == sorted(f"p:{o}" for o in range(10, 20))
    after = files_of(tmp_path)
    again = vacuum(broker, T, min_age_ms=10 * 60_000, enforce_min_age=False, now_ms=later, dry_run=False)
    assert not again.changed and files_of(tmp_path) == after  # idempotent


def test_vacuum_deletes_old_orphans_and_nothing_hidden_or_unknown(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    append(broker)
    log = log_of(broker)
    top = topic_path(tmp_path)
    old_orphan = log.stage(producer_table("x", [1])).path  # an aborted distributed write
    young_orphan = log.stage(producer_table("x", [2])).path
    hidden = [
        top / "_cursors" / "s" / "part-00000000000000000000000000000000.parquet",
        top / "_compacted" / "part-11111111111111111111111111111111.parquet",
        top / ".part-22222222222222222222222222222222.parquet",
        top / "data" / "part-33333333333333333333333333333333.parquet",
    ]
    for path in hidden:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"not ours to delete")
    (top / "notes.txt").write_text("kept")
    for path in [top / old_orphan, top / "notes.txt", *hidden]:
        age(path, DAY)
    result = vacuum(broker, T, min_age_ms=MIN_SAFE_AGE_MS, dry_run=False).result_for(T)
    assert result.deleted_orphans == (old_orphan,) and result.kept_young == 1
    assert set(result.unknown) == {"notes.txt", "data"}
    assert not (top / old_orphan).exists() and (top / young_orphan).exists()
    assert all(p.exists() for p in hidden) and (top / "notes.txt").exists()
    assert fresh_state(broker)[1] == {o: f"p:{o}".encode() for o in range(5)}


def test_vacuum_keeps_segments_a_staged_write_recorded(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    log = log_of(broker)
    staged = log.stage(producer_table("sink", [0, 1]))
    manifest = {
        "appId": "sink-1",
        "version": 7,
        "owner": None,
        "topics": {
            T: [
                {
                    "path": staged.path,
                    "size": staged.size_bytes,
                    "numRecords": 2,
                    "minPublishMs": staged.min_publish_ms,
                    "maxPublishMs": staged.max_publish_ms,
                }
            ]
        },
    }
    assert broker.io.put_if_absent(staged_manifest_path("sink-1", 7), json.dumps(manifest).encode())
    age(topic_path(tmp_path) / staged.path, DAY)  # the driver died long ago, the replay comes now
    result = vacuum(broker, T, min_age_ms=MIN_SAFE_AGE_MS, dry_run=False).result_for(T)
    assert not result.deleted_orphans
    commit_staged_once(
        broker.io, lambda name: broker.topic_log(TopicName.parse(name)), {}, app_id="sink-1", version=7
    )
    assert sorted(live_values(log).values()) == [b"sink:0", b"sink:1"]


def test_vacuum_expires_the_least_recently_updated_dedup_entries(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    log = log_of(broker)
    for i in range(8):
        log.append(producer_table(f"p{i}", [0, 1, 2]), layout=[3], dedup=True)
        time.sleep(0.003)  # distinct lastUpdated times
    log.append(producer_table("p0", [3]), layout=[1], dedup=True)  # p0 becomes the most recent
    dry = vacuum(broker, T, min_age_ms=DAY, max_producers=3).result_for(T)
    assert dry.expired_txns == ("p1", "p2", "p3", "p4", "p5")
    result = vacuum(broker, T, min_age_ms=DAY, max_producers=3, dry_run=False).result_for(T)
    assert result.expired_txns == dry.expired_txns and result.version is not None
    txns = fresh_state(broker)[2]
    assert {k for k in txns if not k.startswith("pubsub.")} == {"p0", "p6", "p7"}
    assert txns["pubsub.nextOffset"] == 25  # the library's own counters never expire
    assert {k for k in log.snapshot().txns if not k.startswith("pubsub.")} == {"p0", "p6", "p7"}
    # dedup forgot p1 (its old sequence ids are accepted again) and still knows p7
    assert log.append(producer_table("p1", [0]), layout=[1], dedup=True).num_written == 1
    assert log.append(producer_table("p7", [0]), layout=[1], dedup=True).num_written == 0
    (seen,) = probe(topic_path(tmp_path), app_ids=["p1", "p2", "p7"])
    assert seen["txns"]["p7"] == 2 and seen["txns"]["p2"] in (None, -1) and seen["txns"]["p1"] == 0
    assert not vacuum(broker, T, min_age_ms=DAY, max_producers=4, dry_run=False).changed


def test_vacuum_and_cleanup_of_a_partitioned_topic_and_a_namespace(tmp_path: Path) -> None:
    broker = make_broker(tmp_path, checkpoint_interval=3)
    broker.admin.create_partitioned_topic("persistent://public/default/p", 2)
    part = "persistent://public/default/p-partition-1"
    for _ in range(7):
        append(broker, topic=part)
    log_of(broker, part).log.wait_for_checkpoints()
    summary = cleanup_logs(
        broker, "public/default", retention_ms=0, enforce_min_age=False, now_ms=now_ms() + 1000
    )
    assert {r.topic: r.kept_checkpoint for r in summary.results} == {
        "persistent://public/default/p-partition-0": None,
        part: 6,
    }
    assert vacuum(broker, "persistent://public/default/p", min_age_ms=DAY).results[0].topic.endswith("-0")


def test_maintenance_beside_a_live_producer(tmp_path: Path) -> None:
    """Appends keep landing while checkpoints, log cleanup and vacuum run: no message is lost and no
    file a commit names is deleted."""
    import threading

    broker = make_broker(tmp_path, checkpoint_interval=4)
    log = log_of(broker)
    stop = threading.Event()
    appended: list[int] = []
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            i = 0
            while not stop.is_set():
                result = log.append(producer_table("w", np.arange(i, i + 3)), layout=[-3])
                assert result.segment is not None
                appended.extend(range(result.segment.base_offset, result.segment.end_offset))
                i += 3
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=produce)
    thread.start()
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        checkpoint(broker, T)
        cleanup_logs(broker, T, retention_ms=0, enforce_min_age=False, dry_run=False)
        vacuum(broker, T, min_age_ms=2_000, enforce_min_age=False, dry_run=False)
        time.sleep(0.01)
    stop.set()
    thread.join(10)
    assert not errors, errors
    version, values, _ = fresh_state(broker)
    assert sorted(values) == appended and len(appended) > 30
    assert all(values[o] == f"w:{o}".encode() for o in appended)
    (seen,) = probe(topic_path(tmp_path))
    assert seen["num_rows"] == len(appended) and seen["version"] == version
