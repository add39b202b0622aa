"""The Spark compaction job (``spark_pubsub/jobs.py compact``) and the source's ``readCompacted``.

The job must produce exactly the view the local run produces (same rows, ids and file format), run
incrementally, and work from the command line; a ``readCompacted`` read serves the view below the
horizon and the log from it on, and a micro-batch keeps reading the view its offsets recorded.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from source_job import Collector, make_root, run_available_now, source

from broker_core import BrokerConfig, Client
from broker_core.broker.broker import Broker
from broker_core.errors import InvalidConfiguration
from broker_core.jobs.compaction import compact_topic
from broker_core.naming import TopicName
from broker_core.topic.compacted_view import COMPACTED_DIR, decode_view, view_store
from spark_pubsub import compaction_job
from spark_pubsub.compaction_job import ROWS_PER_SHUFFLE_PARTITION, default_parallelism, shuffle_partitions_for
from spark_pubsub.jobs import compact_with_spark, main
from spark_pubsub.offsets import PartitionPlanner
from spark_pubsub.options import SourceOptions, parse_options
from spark_pubsub.scan_partition import ScanPartition, read_scan_partition

Sent = tuple[str | None, bytes | None]


def send(root: str, topic: str, messages: list[Sent], **config: Any) -> None:
    client = Client(root, broker_config=BrokerConfig(fsync_enabled=False, **config) if config else None)
    try:
        producer = client.create_producer(topic, chunking_enabled=bool(config))
        for key, value in messages:
            producer.send(value, partition_key=key)
        producer.close()
    finally:
        client.close()


def views(root: str, topic: str) -> dict[str, pa.Table]:
    """Each internal topic's current view file, as a table."""
    broker = Broker.for_url(root)
    out = {}
    for partition in broker.partitions(TopicName.parse(topic), auto_create=False):
        log = broker.topic_log(partition, create=False)
        pointer = view_store(log.io, log.path).latest()
        if pointer is not None:
            out[str(partition)] = decode_view(log.io.open_input(f"{log.path}/{pointer.file}"))
    return out


def sync_log(src: str, dst: str) -> None:
    """Make ``dst``'s topics hold exactly ``src``'s log (leaving each side's compacted views alone)."""
    shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns(COMPACTED_DIR))


def mixed(prefix: str, n: int) -> list[Sent]:
    out: list[Sent] = []
    for i in range(n):
        key = None if i % 11 == 0 else f"k{i % 13}"
        value = None if i % 7 == 3 else (b"" if i % 17 == 5 else f"{prefix}{i}".encode())
        out.append((key, value))
    return out


@pytest.mark.parametrize(("retain_null_key", "carry_payload"), [(False, False), (True, False), (True, True)])
def test_the_spark_job_equals_the_local_run_also_incrementally(
    spark: Any, tmp_path: Path, retain_null_key: bool, carry_payload: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    local, remote = make_root(tmp_path / "local"), str(tmp_path / "spark")
    Broker.for_url(local).admin.create_partitioned_topic("t", 2)
    send(local, "t", mixed("a", 120))
    send(
        local,
        "t",
        [("big", bytes(range(256)) * 9), ("big", bytes(2600)), ("k1", b"late")],
        max_message_size=1000,
    )  # chunked messages: the newest "big" survives with all its chunks
    sync_log(local, remote)
    for run in range(3):  # a first run, then incremental ones over new messages
        compact_topic(Broker.for_url(local), "t", retain_null_key=retain_null_key)
        settings = ("spark.sql.shuffle.partitions", "spark.sql.codegen.aggregate.map.twolevel.enabled")
        before = [spark.conf.get(key) for key in settings]
        # the view files written by tasks on the first run; on the second the payloads read by Spark
        # and the files written by the driver; on the third both by the driver (retain_null_key and
        # carry_payload always read the payloads with Spark and write in tasks)
        if run == 2 and not (retain_null_key or carry_payload):  # no Spark payload pass may run
            monkeypatch.setattr(compaction_job, "kept_rows", None)
        summary = compact_with_spark(spark, remote, "t", retain_null_key=retain_null_key,
                                     carry_payload=carry_payload, driver_write_rows=0 if run == 0 else None,
                                     driver_read_rows=0 if run == 1 else None)
        monkeypatch.undo()
        assert [spark.conf.get(key) for key in settings] == before  # the job's own values are undone
        assert {r.status for r in summary.results} == {"compacted"}
        expected, got = views(local, "t"), views(remote, "t")
        assert sorted(got) == sorted(expected) and len(got) == 2
        for name, table in expected.items():
            assert got[name].equals(table), name
        assert any(t.column("num_chunks").null_count < t.num_rows for t in got.values())
        send(local, "t", mixed("b", 60))
        sync_log(local, remote)
    assert compact_with_spark(spark, remote, "t", up_to_offset=0).results[0].status == "up-to-date"


def test_the_job_picks_its_shuffle_partitions_by_the_rows_it_reads(spark: Any) -> None:
    cores = default_parallelism(spark)
    assert shuffle_partitions_for(spark, 0) == cores
    assert shuffle_partitions_for(spark, ROWS_PER_SHUFFLE_PARTITION * cores) == cores
    assert shuffle_partitions_for(spark, ROWS_PER_SHUFFLE_PARTITION * 10 + 1) == max(cores, 11)


def test_the_command_line_prints_a_summary(spark: Any, tmp_path: Path, capsys: Any) -> None:
    root = make_root(tmp_path / "root")
    send(root, "t", [("a", b"1"), ("a", b"2"), ("b", b"3")])
    assert main(["compact", "--root", root, "--topic", "t", "--dry-run"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["partitions"][0]["status"] == "dry-run" and views(root, "t") == {}
    assert main(["compact", "--root", root, "--topic", "t"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (report["rows"], report["messagesRead"], report["partitions"][0]["horizon"]) == (2, 3, 3)
    assert views(root, "t")["persistent://public/default/t"].column("value").to_pylist() == [b"2", b"3"]
    with pytest.raises(SystemExit):
        main(["compact", "--root", root])  # --topic is required


def test_a_read_compacted_batch_read(spark: Any, tmp_path: Path) -> None:
    root = make_root(tmp_path / "root")
    sent = mixed("a", 60)
    send(root, "t", sent)
    compact_topic(Broker.for_url(root), "t")
    send(root, "t", [("k1", b"tail"), (None, b"keyless-tail")])
    view = views(root, "t")["persistent://public/default/t"]
    expected = list(zip(view.column("offset").to_pylist(), view.column("value").to_pylist(), strict=True))
    expected += [(60, b"tail"), (61, b"keyless-tail")]
    for extra in ({}, {"minPartitions": "3"}):
        reader = spark.read.format("pubsub").option("topic", "t").option("readCompacted", "true")
        for key, value in extra.items():
            reader = reader.option(key, value)
        rows = reader.load(root).select("offset", "value", "messageId").collect()
        assert sorted((r.offset, r.value) for r in rows) == expected
    plain = spark.read.format("pubsub").option("topic", "t").load(root)
    assert plain.count() == 62


def test_a_read_compacted_stream(spark: Any, tmp_path: Path) -> None:
    root = make_root(tmp_path / "root")
    send(root, "t", [("a", b"1"), ("b", b"2"), ("a", b"3")])
    compact_topic(Broker.for_url(root), "t")
    send(root, "t", [("b", b"4")])
    got = Collector(("offset", "value"))
    df = source(spark, root, topic="t", readCompacted="true", startingOffsets="earliest")
    run_available_now(df, tmp_path / "ck", got)
    assert sorted(got.rows) == [(1, b"2"), (2, b"3"), (3, b"4")]


def planner_for(root: str, **options: str) -> PartitionPlanner:
    values = {
        "path": root,
        "topic": "t",
        "readcompacted": "true",
        **{k.lower(): v for k, v in options.items()},
    }
    return PartitionPlanner(parse_options(SourceOptions, values))


def scanned(partitions: list[ScanPartition]) -> list[tuple[int, bytes | None]]:
    out = []
    for partition in partitions:
        for batch in read_scan_partition(partition):
            out += list(
                zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist(), strict=True)
            )
    return sorted(out)


def test_a_micro_batch_keeps_reading_the_view_its_offsets_recorded(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root")
    send(root, "t", [("a", b"1"), ("b", b"2"), ("a", b"3"), ("c", b"4")])
    compact_topic(Broker.for_url(root), "t")
    planner = planner_for(root)
    start = {"v": 1, "parts": planner.earliest_positions()}
    end = planner.advance(start, max_rows=None, max_bytes=None, min_rows=None, target=None)
    assert end["compacted"]["persistent://public/default/t"][0] == 4
    first = scanned(planner.plan(start, end))
    assert first == [(1, b"2"), (2, b"3"), (3, b"4")]
    send(root, "t", [("b", None), ("c", b"5")])
    compact_topic(Broker.for_url(root), "t")  # a newer view: b and the old c are gone from it
    assert scanned(planner.plan(start, end)) == first  # a replay reads what the batch read
    fresh = planner.advance(start, max_rows=None, max_bytes=None, min_rows=None, target=None)
    assert fresh["compacted"] != end["compacted"]
    assert scanned(planner.plan(start, fresh)) == [(2, b"3"), (5, b"5")]


def test_read_compacted_is_refused_for_shared_subscriptions(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root")
    for subscription_type in ("Shared", "Key_Shared"):
        with pytest.raises(InvalidConfiguration, match="readCompacted"):
            planner_for(root, subscription="s", subscriptionType=subscription_type)
    planner_for(root, subscription="s", subscriptionType="Failover")  # allowed, as in Pulsar


def test_read_compacted_equals_the_client_s_compacted_reader_after_retention_merge_and_vacuum(
    spark: Any, tmp_path: Path
) -> None:
    """One compacted view, read the same way by the client, a batch read and a stream, even once
    retention removed every segment below the horizon (and merge-segments and vacuum ran)."""
    from broker_core import MessageId
    from broker_core.errors import Timeout
    from broker_core.jobs.log_maintenance import vacuum
    from broker_core.jobs.merge_segments import merge_segments
    from broker_core.jobs.retention import run_retention

    root = make_root(tmp_path / "root")
    for i in range(6):  # one segment per send: retention removes whole segments
        send(root, "t", [(f"k{i % 3}", f"v{i}".encode())])
    broker = Broker.for_url(root)
    compact_topic(broker, "t")
    run_retention(broker, "t", retention_time_in_minutes=0, retention_size_in_mb=0,
                  now_ms=2**62)
    log = broker.topic_log(TopicName.parse("t"), create=False)
    assert log.snapshot().first_offset == 6  # every segment below the horizon is gone
    send(root, "t", [("k0", b"tail-0"), ("k9", b"tail-9")])
    merge_segments(broker, "t", min_segments=2, min_age_ms=0, dry_run=False)
    vacuum(broker, "t", min_age_ms=0, dry_run=False, enforce_min_age=False)

    client = Client(root)
    try:
        reader = client.create_reader("t", MessageId.earliest, is_read_compacted=True)
        by_client = []
        while True:
            try:
                msg = reader.read_next(timeout_millis=300)
            except Timeout:
                break
            by_client.append((msg.partition_key(), msg.data()))
    finally:
        client.close()
    assert sorted(by_client) == [("k0", b"tail-0"), ("k0", b"v3"), ("k1", b"v4"), ("k2", b"v5"), ("k9", b"tail-9")]

    batch = spark.read.format("pubsub").option("topic", "t").option("readCompacted", "true").load(root)
    assert sorted((r.key, r.value) for r in batch.select("key", "value").collect()) == sorted(by_client)
    got = Collector(("key", "value"))
    run_available_now(source(spark, root, topic="t", readCompacted="true", startingOffsets="earliest"),
                      tmp_path / "ck", got)
    assert sorted(got.rows) == sorted(by_client)


def test_the_job_through_spark_connect_and_through_the_fallback_equals_the_local_run(
    spark: Any, connect: Any, tmp_path: Path, caplog: Any
) -> None:
    local = make_root(tmp_path / "local")
    Broker.for_url(local).admin.create_partitioned_topic("t", 2)
    send(local, "t", mixed("a", 80))
    send(local, "t", [("big", bytes(range(256)) * 9), ("k2", None)], max_message_size=1000)
    compact_topic(Broker.for_url(local), "t")
    expected = views(local, "t")
    for name, session, spark_root in (("connect", connect, None), ("fallback", spark, "nosuchfs://b/r")):
        remote = str(tmp_path / name)
        sync_log(local, remote)
        timings: dict[str, float] = {}
        with caplog.at_level("WARNING", logger="spark_pubsub.native_scan"):
            summary = compact_with_spark(session, remote, "t", spark_root=spark_root, timings=timings)
        assert {r.status for r in summary.results} == {"compacted"}, name
        got = views(remote, "t")
        assert sorted(got) == sorted(expected)
        for partition, table in expected.items():
            assert got[partition].equals(table), (name, partition)
        # the fallback reads in its tasks ("spark"); the native job reports each of its phases
        phases = {"planning", "spark"} if spark_root else {"planning", "winners", "payload plan", "views", "commit"}
        assert phases <= set(timings), (name, timings)
        fallback_lines = [r for r in caplog.records if "cannot open" in r.getMessage()]
        assert len(fallback_lines) == (1 if spark_root else 0), name
        caplog.clear()


_COPIES = itertools.count()


def _expected_view(root: str, scratch: Path, horizon: int) -> pa.Table:
    """The local run's view of the log up to ``horizon``, computed on a copy at a new path each call:
    the process keeps each topic's view pointer cached for up to a second (rechecked after that), so a
    copy made again at the same path right after deleting the last one behind the library's back
    would be planned from the deleted copy's pointer (the copy has the same ledger id)."""
    copy = scratch.parent / f"{scratch.name}-{next(_COPIES)}"
    sync_log(root, str(copy))
    compact_topic(Broker.for_url(str(copy)), "t", up_to_offset=horizon)
    return views(str(copy), "t")["persistent://public/default/t"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_spark_job_killed_at_random_moments_leaves_a_consistent_view(spark: Any, tmp_path: Path) -> None:
    import random
    import subprocess
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker_core"))
    from log_helpers import kill_after_events

    rng = random.Random(20261125)
    root = make_root(tmp_path / "root")
    send(root, "t", [("k0", b"seed")])
    worker = Path(__file__).resolve().parent / "compaction_kill_worker.py"
    kills = compactions = 0
    for trial in range(3):
        proc = subprocess.Popen([sys.executable, str(worker), root, str(trial)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
        proc.stdin.write("go\n")
        proc.stdin.flush()
        # the kill lands after a random phase of the job: its planning, its Spark job (files being
        # written), after the files were written but before the commit, or after a commit
        lines = kill_after_events(proc, "phase ", rng.randint(1, 7), rng)
        kills += 1
        compactions += sum(1 for line in lines if line.startswith("compacted "))
        pointer = views(root, "t").get("persistent://public/default/t")
        if pointer is not None:  # the view named now is whole and is exactly the local run's
            horizon = int(pointer.column("offset").to_pylist()[-1]) + 1 if pointer.num_rows else 0
            log = Broker.for_url(root).topic_log(TopicName.parse("t"))
            latest = view_store(log.io, log.path).latest()
            assert latest is not None
            assert pointer.equals(_expected_view(root, tmp_path / "model", latest.horizon)), horizon
    summary = compact_with_spark(spark, root, "t")  # a rerun after the last kill completes the view
    assert summary.results[0].status in ("compacted", "up-to-date")
    snap_end = Broker.for_url(root).topic_log(TopicName.parse("t")).snapshot().next_offset
    assert views(root, "t")["persistent://public/default/t"].equals(
        _expected_view(root, tmp_path / "model", snap_end))
    print(f"{kills} kills, {compactions} completed compactions before them")


def test_the_payload_pass_opens_only_segments_holding_a_winner() -> None:
    from broker_core.log.segment_ref import SegmentRef
    from spark_pubsub.compaction_frames import needed_segments
    from spark_pubsub.native_plan import SegmentRead, TopicRead

    def seg(base: int) -> SegmentRead:
        ref = SegmentRef(path=f"part-{base}", base_offset=base, num_records=10, base_entry_id=base, layout=[-10],
                         size_bytes=1, min_publish_ms=0, max_publish_ms=0, modification_time_ms=0)
        return SegmentRead(ref, 0, 10)

    read = TopicRead(topic="t", partition=-1, topic_path="p", ledger_id=1, snapshot_version=1,
                     segments=tuple(seg(b) for b in (0, 10, 20, 30, 40)), rows=50)
    # a single message at 45, a chunked winner ending at 21 whose chunks start at 8 (segments 0-2)
    cut = needed_segments(read, np.array([45, 21, 29]), np.array([0, 13, 0]))
    assert [r.segment.base_offset for r in cut.segments] == [0, 10, 20, 40] and cut.rows == 40
    assert needed_segments(read, np.array([], dtype=np.int64), np.array([], dtype=np.int64)).segments == ()
    # winners below the log's part of the run live in the previous view: no segment for them
    later = TopicRead(topic="t", partition=-1, topic_path="p", ledger_id=1, snapshot_version=1,
                      segments=read.segments[2:], rows=30)
    assert [r.segment.base_offset for r in needed_segments(later, np.array([3, 25]), np.array([0, 0])).segments] \
        == [20]


def test_a_topic_whose_every_key_was_deleted_gets_an_empty_view(spark: Any, tmp_path: Path) -> None:
    local, remote = make_root(tmp_path / "local"), str(tmp_path / "spark")
    send(local, "t", [("a", b"1"), ("b", b"2"), ("a", None), ("b", None), (None, b"keyless")])
    sync_log(local, remote)
    compact_topic(Broker.for_url(local), "t")
    for dry_run in (True, False):
        summary = compact_with_spark(spark, remote, "t", dry_run=dry_run)
        assert [r.rows for r in summary.results] == [0]
    got, expected = views(remote, "t"), views(local, "t")
    assert got["persistent://public/default/t"].num_rows == 0
    assert got["persistent://public/default/t"].equals(expected["persistent://public/default/t"])
