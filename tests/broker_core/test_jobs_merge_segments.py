"""Segment merging: fewer files, the same messages at the same offsets with the same ids, for everyone."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from jobs_worker import T, append, files_of, live_values, log_of, make_broker, probe, set_cursor, topic_path
from log_helpers import kill_after_events, producer_table
from moto_s3 import Root

from broker_core import (
    Client,
    ConsumerType,
    InitialPosition,
    InvalidConfiguration,
    MessageId,
    NotAllowedError,
    Timeout,
    TopicNotFound,
)
from broker_core.broker.broker import Broker
from broker_core.jobs import merge_segments, run_retention, vacuum
from broker_core.jobs.compaction import compact_topic
from broker_core.jobs.merge_segments import OPERATION, codec_of, merge_run, plan_runs
from broker_core.log.actions import Add, Remove, decode_actions
from broker_core.log.checkpoint import LOG_DIR
from broker_core.log.segment import CompressionType
from broker_core.log.segment_ref import SegmentRef
from broker_core.log.transaction_log import commit_path
from broker_core.naming import TopicName
from broker_core.storage import LocalFileIO
from broker_core.topic.topic_log import TopicLog

HERE = Path(__file__).parent
WORKER = HERE / "merge_worker.py"


def segments_of(broker: Broker) -> list[SegmentRef]:
    return list(log_of(broker).snapshot().segments)


def every_id(log: TopicLog) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Offsets, entry ids and batch indexes of every live message."""
    snap = log.snapshot()
    offsets = np.arange(snap.first_offset, snap.next_offset, dtype=np.int64)
    entries, batches = log.ids_for_offsets(offsets, snapshot=snap)
    return offsets, entries, batches


def part_files(root: Path) -> set[str]:
    return {p.name for p in topic_path(root).glob("part-*")}


def mixed_topic(broker: Broker, segments: int = 30, *, seed: int = 7) -> None:
    """Segments of batched entries, single entries and both, at distinct publish times."""
    rng = random.Random(seed)
    log = log_of(broker)
    for i in range(segments):
        start = log.snapshot().next_offset
        layout = rng.choice([[3], [-2], [2, -3, 4], [-1, 1], [5, 5]])
        n = sum(abs(p) for p in layout)
        table = producer_table("p", range(start, start + n), publish_ms=1_700_000_000_000 + 1000 * i)
        log.append(table, layout=layout)


def seg(path: str, base: int, n: int, *, entry: int | None = None, size: int = 100, mtime: int = 0) -> SegmentRef:
    return SegmentRef(path=path, base_offset=base, num_records=n, base_entry_id=base if entry is None else entry,
                      layout=[-n], size_bytes=size, min_publish_ms=0, max_publish_ms=0, modification_time_ms=mtime)


def name(i: int, codec: str = "") -> str:
    return f"part-{i:032x}{codec}.parquet"


# --- the plan --------------------------------------------------------------------------------------------


def test_runs_are_consecutive_small_old_same_codec_and_split_at_the_target() -> None:
    segs = [seg(name(i), 10 * i, 10, size=100, mtime=1000) for i in range(10)]
    plan = plan_runs(segs, target_bytes=350, min_segments=2, min_age_ms=500, now_ms=2000)
    assert [[s.base_offset for s in run] for run in plan] == [[0, 10, 20], [30, 40, 50], [60, 70, 80]]
    assert all(sum(s.size_bytes for s in run) <= 350 for run in plan)  # 90 alone is below min_segments
    # young segments stay, and split runs around them
    young = [*segs[:4], seg(name(4), 40, 10, mtime=1900), *segs[5:8]]
    plan = plan_runs(young, target_bytes=10_000, min_segments=2, min_age_ms=500, now_ms=2000)
    assert [[s.base_offset for s in run] for run in plan] == [[0, 10, 20, 30], [50, 60, 70]]
    # a segment at or above the target, a gap in offsets or in entry ids, a codec change: all split
    odd = [segs[0], segs[1], seg(name(2), 20, 10, size=350), segs[3], segs[4], seg(name(5), 55, 10),
           seg(name(6), 65, 10), seg(name(7), 75, 10, entry=80), seg(name(8), 85, 10, entry=90),
           seg(name(9, ".zstd"), 95, 10, entry=100), seg(name(10, ".zstd"), 105, 10, entry=110)]
    plan = plan_runs(odd, target_bytes=350, min_segments=2, min_age_ms=0, now_ms=2000)
    assert [[s.base_offset for s in run] for run in plan] == [[0, 10], [30, 40], [55, 65], [75, 85], [95, 105]]
    assert plan_runs(odd, target_bytes=350, min_segments=3, min_age_ms=0, now_ms=2000) == []
    assert codec_of(name(1, ".zstd")) == CompressionType.ZSTD and codec_of(name(1)) == CompressionType.NONE
    assert codec_of("foreign.parquet") is None
    assert plan_runs([seg("foreign.parquet", 0, 1), seg("other.parquet", 1, 1)], target_bytes=999,
                     min_segments=2, min_age_ms=0, now_ms=0) == []


# --- the merge -------------------------------------------------------------------------------------------


def test_merging_keeps_every_row_offset_and_message_id(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    mixed_topic(broker, 40)
    log = log_of(broker)
    before_rows, before_offsets = log.read(0, 1 << 40)
    offsets, entries, batches = every_id(log)
    snap = log.snapshot()
    ids = [log.message_id(int(o), -1, snapshot=snap) for o in offsets]
    by_time = {t: log.offset_for_publish_time(t) for t in (0, 1_700_000_005_000, 1_700_000_033_500, 1 << 60)}
    segments = len(snap.segments)

    summary = merge_segments(broker, T, min_age_ms=0, target_bytes=30_000, dry_run=False)
    result = summary.result_for(T)
    assert summary.changed and result.segments_before == segments == 40
    after = segments_of(broker)
    assert result.segments_after == len(after) < segments // 4
    assert len(result.removed_paths) - len(result.added_paths) == segments - len(after)
    assert all(r.status == "merged" for r in result.runs) and result.bytes_out > 0
    for run in result.runs:
        assert sum(s for s in [r.size_bytes for r in snap.segments if r.path in run.paths]) <= 30_000
    for handle in (log, TopicLog(LocalFileIO(str(tmp_path)), log.path)):  # this process and a fresh one
        rows, got_offsets = handle.read(0, 1 << 40)
        assert rows.equals(before_rows) and np.array_equal(got_offsets, before_offsets)
        _, got_entries, got_batches = every_id(handle)
        assert np.array_equal(got_entries, entries) and np.array_equal(got_batches, batches)
        fresh = handle.snapshot()
        assert [handle.message_id(int(o), -1, snapshot=fresh) for o in offsets] == ids
        for offset, msg_id in zip(offsets.tolist(), ids, strict=True):
            assert handle.offset_for_message_id(msg_id, inclusive=True, snapshot=fresh) == offset
            assert handle.offset_for_message_id(msg_id, inclusive=False, snapshot=fresh) > offset
        assert {t: handle.offset_for_publish_time(t) for t in by_time} == by_time
        assert (fresh.next_offset, fresh.next_entry_id) == (snap.next_offset, snap.next_entry_id)

    # what the commit looks like: removes and one add, none of them a data change
    version = result.runs[0].version
    assert version is not None
    raw = (tmp_path / commit_path(log.path, version)).read_bytes()
    actions = decode_actions(raw, version=version)
    removes = [a for a in actions if isinstance(a, Remove)]
    adds = [a for a in actions if isinstance(a, Add)]
    assert [r.path for r in removes] == list(result.runs[0].paths) and len(adds) == 1
    assert not any(a.data_change for a in [*removes, *adds])
    assert all(r.deletion_timestamp and r.size for r in removes)
    assert json.loads(raw.splitlines()[-1])["commitInfo"]["operation"] == OPERATION
    merged = next(s for s in after if s.path == adds[0].path)
    assert merged.layout == [p for p in merged.layout if p]  # normalised: no adjacent negative parts
    assert all(not (a < 0 and b < 0) for a, b in zip(merged.layout, merged.layout[1:], strict=False))
    # the old files stay for vacuum, which deletes them once old enough
    assert set(result.removed_paths) <= part_files(tmp_path)
    later = int(time.time() * 1000) + 2 * 3_600_000
    vacuum(broker, T, min_age_ms=3_600_000, now_ms=later, dry_run=False)
    assert part_files(tmp_path) == {s.path for s in after}
    assert live_values(TopicLog(LocalFileIO(str(tmp_path)), log.path)) == live_values(log)
    # merged files come out smaller than their inputs (one file's overhead instead of many), so a second
    # run packs merged segments again, and the messages still keep their ids
    again = merge_segments(broker, T, min_age_ms=0, target_bytes=30_000, dry_run=False).result_for(T)
    assert again.segments_after == len(segments_of(broker)) <= len(after)
    assert np.array_equal(every_id(log)[1], entries) and log.read(0, 1 << 40)[0].equals(before_rows)


def test_codec_is_kept_and_runs_never_mix_codecs(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    log = log_of(broker)
    for i, codec in enumerate([CompressionType.ZSTD] * 3 + [CompressionType.NONE] * 2 + [CompressionType.SNAPPY]):
        log.append(producer_table("p", range(3 * i, 3 * i + 3)), layout=[3], compression=codec)
    before = live_values(log)
    result = merge_segments(broker, T, min_age_ms=0, dry_run=False).result_for(T)
    assert [len(r.paths) for r in result.runs] == [3, 2]
    assert [codec_of(p) for p in result.added_paths] == [CompressionType.ZSTD, CompressionType.NONE]
    assert len(segments_of(broker)) == 3 and live_values(log) == before


def test_young_and_large_segments_stay_and_dry_run_changes_nothing(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    for _ in range(6):
        append(broker, 4)
    append(broker, 400, value_bytes=100)  # a large one
    for _ in range(3):
        append(broker, 4)
    segs = segments_of(broker)
    before = files_of(tmp_path)
    now = segs[-1].modification_time_ms + 1
    dry = merge_segments(broker, T, target_bytes=20_000, min_age_ms=0, now_ms=now)
    result = dry.result_for(T)
    assert dry.dry_run and not dry.changed and files_of(tmp_path) == before
    assert [r.paths for r in result.runs] == [tuple(s.path for s in segs[:6]), tuple(s.path for s in segs[7:])]
    assert all(r.status == "planned" for r in result.runs) and result.segments_after == 10 - 5 - 2
    assert "would merge 9 segment(s)" in dry.describe()
    # only the first six are old enough
    young = merge_segments(broker, T, target_bytes=20_000, min_age_ms=now - segs[6].modification_time_ms,
                           now_ms=now, dry_run=False).result_for(T)
    assert [len(r.paths) for r in young.runs] == [6]
    assert [s.path for s in segments_of(broker)[1:]] == [s.path for s in segs[6:]]


def test_bad_options_are_refused_with_typed_errors_and_change_nothing(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    for _ in range(3):
        append(broker, 2)
    before = files_of(tmp_path)
    bad: list[tuple[dict[str, Any], str]] = [
        ({"target_bytes": 0}, "target_bytes"), ({"target_bytes": "128M"}, "target_bytes"),
        ({"min_segments": 1}, "min_segments"), ({"min_segments": True}, "min_segments"),
        ({"min_age_ms": -1}, "min_age_ms"), ({"min_age_ms": 1.5}, "min_age_ms"),
        ({"dry_run": "no"}, "dry_run"), ({"now_ms": -5}, "now_ms"),
    ]
    for options, argument in bad:
        with pytest.raises(InvalidConfiguration, match=argument) as info:
            merge_segments(broker, T, **{"min_age_ms": 0, "dry_run": False, **options})
        assert repr(next(iter(options.values()))) in str(info.value)
    with pytest.raises(TopicNotFound):
        merge_segments(broker, "persistent://public/default/ghost", dry_run=False)
    with pytest.raises(NotAllowedError):
        merge_segments(broker, "non-persistent://public/default/np")
    assert files_of(tmp_path) == before
    broker.admin.create_partitioned_topic("persistent://public/default/p", 2)  # partitions with no log yet
    parts = merge_segments(broker, "public/default", min_age_ms=0)
    assert {r.topic for r in parts.results} >= {T, "persistent://public/default/p-partition-0"}


# --- consumers, compacted views, Delta readers -----------------------------------------------------------


def test_a_consumer_with_acked_ranges_a_compacted_view_and_a_reader_work_across_the_merge(tmp_path: Path) -> None:
    client = Client(str(tmp_path))
    try:
        producer = client.create_producer("t", batching_enabled=True, batching_max_publish_delay_ms=10_000)
        for flush in range(25):  # one segment per flush, batched entries of varied sizes
            for i in range(flush % 4 + 1):
                producer.send_async(f"{flush}:{i}".encode(), None, partition_key=f"k{(flush + i) % 7}")
            producer.flush()
        producer.send(b"single", partition_key="k0")  # batching-off style single entries too
        producer.close()
        consumer = client.subscribe("t", "s", consumer_type=ConsumerType.Shared,
                                    initial_position=InitialPosition.Earliest)
        received = [consumer.receive(5000) for _ in range(sum(f % 4 + 1 for f in range(25)) + 1)]
        skipped = {3, 10, 11, 12, 30, len(received) - 2}
        for i, msg in enumerate(received):
            if i not in skipped:
                consumer.acknowledge(msg)
        consumer.close()
        broker = Broker.for_url(str(tmp_path))
        compact_topic(broker, TopicName.parse("t"))
        compacted = _read(client, compacted=True)
        everything = _read(client)
        log = broker.topic_log(TopicName.parse("t"))
        segments = len(log.snapshot().segments)

        merged = merge_segments(broker, "t", min_age_ms=0, dry_run=False).result_for("t")
        assert merged.changed and len(log.snapshot().segments) < segments // 5

        assert _read(client, compacted=True) == compacted
        assert _read(client) == everything
        again = client.subscribe("t", "s", consumer_type=ConsumerType.Shared)
        redelivered = []
        while (msg := _maybe(again)) is not None:
            redelivered.append((msg.message_id(), msg.data()))
            again.acknowledge(msg)
        assert redelivered == [(received[i].message_id(), received[i].data()) for i in sorted(skipped)]
        again.close()
        # a reader started at a message id from before the merge starts at the same message
        start = received[11].message_id()
        reader = client.create_reader("t", start, start_message_id_inclusive=True)
        assert reader.read_next(timeout_millis=5000).data() == received[11].data()
        reader.close()
    finally:
        client.close()


def _maybe(consumer: Any) -> Any:
    try:
        return consumer.receive(500)
    except Timeout:  # nothing more to redeliver
        return None


def _read(client: Client, *, compacted: bool = False) -> list[tuple[Any, ...]]:
    reader = client.create_reader("t", MessageId.earliest, is_read_compacted=compacted)
    out = []
    while reader.has_message_available():
        msg = reader.read_next(timeout_millis=2000)
        out.append((msg.message_id(), msg.partition_key(), msg.data()))
    reader.close()
    return out


def test_deltalake_reads_the_same_rows_from_fewer_files(tmp_path: Path) -> None:
    pytest.importorskip("deltalake")
    broker = make_broker(tmp_path, checkpoint_interval=5)
    for _ in range(12):
        append(broker, 3)
    (before,) = probe(topic_path(tmp_path))
    merge_segments(broker, T, min_age_ms=0, dry_run=False)
    log_of(broker).log.checkpoint()  # the tombstones and the merged add as a checkpoint too
    (after,) = probe(topic_path(tmp_path))
    assert "error" not in after, after
    assert after["values"] == before["values"] and after["num_rows"] == 36
    assert after["version"] == before["version"] + 1


# --- concurrency -----------------------------------------------------------------------------------------


def _run_of(broker: Broker) -> tuple[SegmentRef, ...]:
    (run,) = plan_runs(segments_of(broker), target_bytes=1 << 30, min_segments=2, min_age_ms=0,
                        now_ms=1 << 62)
    return run


def test_a_run_whose_segment_retention_removed_is_abandoned_and_nothing_is_lost(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    for _ in range(6):
        append(broker, 3)
    run = _run_of(broker)
    set_cursor(broker, "s", 9)  # acknowledged the first three segments
    run_retention(broker, T, retention_time_in_minutes=0, retention_size_in_mb=0, dry_run=False)
    kept = segments_of(broker)
    assert [s.path for s in kept] == [s.path for s in run[3:]]
    before_files = part_files(tmp_path)
    values = live_values(log_of(broker))
    done = merge_run(log_of(broker), run)
    assert done.status == "abandoned" and done.version is None
    assert part_files(tmp_path) == before_files  # its new file was deleted
    assert segments_of(broker) == kept and live_values(log_of(broker)) == values
    # two overlapping runs: the second finds its first segment merged away
    broker2 = make_broker(tmp_path / "two")
    for _ in range(4):
        append(broker2, 2)
    run = _run_of(broker2)
    assert merge_run(log_of(broker2), run[:2]).status == "merged"
    assert merge_run(log_of(broker2), run[1:]).status == "abandoned"


@pytest.mark.parametrize("race", ["retention", "append"])
def test_a_commit_landing_between_plan_and_put_is_revalidated(tmp_path: Path, race: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A retention (or an append) from another handle lands in the instant before the merge's put:
    the merge loses that version, re-validates against it, and abandons (or commits after it)."""
    broker = make_broker(tmp_path)
    for _ in range(5):
        append(broker, 3)
    log = log_of(broker)
    run = _run_of(broker)
    other = TopicLog(LocalFileIO(str(tmp_path)), log.path)
    real = log.io.put_if_absent
    fired: list[str] = []

    def racing(path: str, data: bytes, **kwargs: Any) -> bool:
        if not fired and "_delta_log" in path:
            fired.append(path)
            if race == "retention":
                first = other.snapshot().segments[0]
                other.log.commit(lambda snap: [Remove(path=first.path, data_change=True,
                                                      deletion_timestamp=1, size=first.size_bytes)],
                                 operation="RETENTION")
            else:
                other.append(producer_table("p", range(15, 18)), layout=[-3])
        return real(path, data, **kwargs)

    monkeypatch.setattr(log.io, "put_if_absent", racing)
    done = merge_run(log, run)
    assert fired
    values = live_values(TopicLog(LocalFileIO(str(tmp_path)), log.path))
    if race == "retention":
        assert done.status == "abandoned" and sorted(values) == list(range(3, 15))
        assert len(part_files(tmp_path)) == 5
    else:
        assert done.status == "merged" and sorted(values) == list(range(18))
        assert len(segments_of(broker)) == 2
    assert all(v == f"p:{o}".encode() for o, v in values.items())


def test_appends_racing_merges_on_threads_lose_nothing(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    append(broker, 2)
    writer = TopicLog(LocalFileIO(str(tmp_path)), log_of(broker).path)
    stop = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            while not stop.is_set():
                start = writer.snapshot().next_offset
                writer.append(producer_table("p", range(start, start + 2)), layout=[-1, 1])
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=produce) for _ in range(2)]
    for thread in threads:
        thread.start()
    merges = 0
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline or merges < 5:
            result = merge_segments(broker, T, min_age_ms=0, target_bytes=8000, dry_run=False).result_for(T)
            merges += len(result.added_paths)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not errors and merges >= 5
    _check_contiguous(TopicLog(LocalFileIO(str(tmp_path)), log_of(broker).path))


def _check_contiguous(log: TopicLog) -> dict[int, bytes]:
    """Every offset from 0 to the end is live exactly once, and entry ids are dense."""
    values = live_values(log)
    snap = log.snapshot()
    assert sorted(values) == list(range(snap.next_offset))
    for prev, cur in zip(snap.segments, snap.segments[1:], strict=False):
        assert cur.base_offset == prev.end_offset and cur.base_entry_id == prev.end_entry_id
    return values


def test_a_separate_process_appending_during_merges_loses_nothing(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    append(broker, 2)
    proc = subprocess.Popen([sys.executable, str(WORKER), "append", str(tmp_path), "300"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    merged = 0
    while proc.poll() is None:  # every merge here races the worker's appends
        merged += len(merge_segments(broker, T, min_age_ms=0, target_bytes=6000, dry_run=False)
                      .result_for(T).added_paths)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    acked = max(int(line.split()[1]) for line in out.splitlines() if line.startswith("ack "))
    merge_segments(broker, T, min_age_ms=0, target_bytes=6000, dry_run=False)
    values = _check_contiguous(TopicLog(LocalFileIO(str(tmp_path)), log_of(broker).path))
    assert len(values) >= acked and merged > 0
    assert all(v.startswith(b"w:") or v == f"p:{o}".encode() for o, v in values.items())


def test_a_merge_killed_at_random_points_keeps_every_row_and_vacuum_clears_orphans(any_root: Root) -> None:
    """16 kills on a folder, 6 on S3."""
    rng = random.Random(20261122)
    root = any_root.url
    broker = make_broker(root)
    io = broker.io
    topic_dir = "/".join(TopicName.parse(T).relative_path())

    def parts() -> set[str]:
        return {name for name in io.list_dir(topic_dir) if name.startswith("part-")}

    for _ in range(4):
        append(broker, 2)

    def spawn(seed: int) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, str(WORKER), "merge", root, str(seed)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    trials, depth, merges = (6 if any_root.is_s3 else 16), 2, 0
    booting = deque(spawn(seed) for seed in range(depth))
    acked = 8
    for trial in range(trials):
        proc = booting.popleft()
        assert proc.stdin is not None and proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
        proc.stdin.write("go\n")
        proc.stdin.flush()
        # kill points counted in the worker's own events: after its n-th merge commit or n-th append
        wanted = "merged " if trial % 2 == 0 else "ack "
        lines = kill_after_events(proc, wanted, rng.randint(1, 3), rng)
        if trial + depth < trials:
            booting.append(spawn(trial + depth))
        acked = max([acked, *(int(line.split()[1]) for line in lines if line.startswith("ack "))])
        merges += sum(line.startswith("merged ") for line in lines)
        fresh = TopicLog(io, log_of(broker).path)
        values = _check_contiguous(fresh)
        assert len(values) >= acked
        assert all(v == f"p:{o}".encode() for o, v in values.items())
        snap = fresh.snapshot()
        named = {s.path for s in snap.segments} | set(snap.tombstones)
        orphans = len(parts() - named)
        assert orphans <= trial + 1  # at worst one orphan per kill
    print(f"{trials} kills, {merges} merge commits seen, {orphans} orphan file(s) left for vacuum")
    assert merges >= trials // 2
    later = int(time.time() * 1000) + 2 * 3_600_000
    vacuum(broker, T, min_age_ms=3_600_000, now_ms=later, dry_run=False)
    fresh = TopicLog(io, log_of(broker).path)
    assert parts() == {s.path for s in fresh.snapshot().segments}
    values = _check_contiguous(fresh)
    (seen_by_delta,) = probe(f"{root}/{topic_dir}", storage_options=any_root.storage_options)
    assert seen_by_delta.get("num_rows") == len(values), seen_by_delta


def test_the_cli_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from broker_core.cli import main

    root = tmp_path / "root"
    broker = make_broker(root)
    for _ in range(5):
        append(broker, 2)
    before = files_of(root)

    def cli(*args: str) -> tuple[int, str, str]:
        code = main(["--root", str(root), *args])
        out = capsys.readouterr()
        return code, out.out, out.err

    code, out, _ = cli("merge-segments", "t", "--min-age", "0s", "-v")
    assert code == 0 and "would merge 5 segment(s)" in out and "add --execute" in out
    assert files_of(root) == before
    for args, match in [(["--min-segments", "1"], ">= 2"), (["--target-size", "0"], "at least 1 byte"),
                        (["--min-age", "soon"], "invalid duration"), (["--target-size", "12X"], "invalid size")]:
        code, out, err = cli("merge-segments", "t", *args)
        assert code == 2 and match in err and args[1] in err, err
    assert files_of(root) == before
    code, out, _ = cli("merge-segments", "t", "--min-age", "0s", "--execute", "--json")
    result = json.loads(out)["results"][0]
    assert code == 0 and result["segmentsAfter"] == 1 and len(result["removedPaths"]) == 5
    assert live_values(log_of(broker)) == {o: f"p:{o}".encode() for o in range(10)}
    code, _, err = cli("merge-segments", "ghost")
    assert code == 1 and "does not exist" in err
    assert (root / "public/default/persistent/t" / LOG_DIR).exists()


def test_a_replayed_staged_commit_never_deletes_a_file_a_merge_retired(tmp_path: Path) -> None:
    """``commit_staged`` replayed after its segments were merged away must leave their files to vacuum
    (readers holding an older snapshot may still read them)."""
    broker = make_broker(tmp_path)
    log = log_of(broker)
    staged = [log.stage(producer_table("p", range(2 * i, 2 * i + 2))) for i in range(3)]
    assert log.commit_staged(staged, txn=("sink", 1)) is not None
    assert merge_segments(broker, T, min_age_ms=0, dry_run=False).changed
    assert log.commit_staged(staged, txn=("sink", 1)) is None  # the replay: already committed
    assert {s.path for s in staged} <= part_files(tmp_path)
    assert live_values(log) == {o: f"p:{o}".encode() for o in range(6)}
