"""Retention: only whole, acknowledged front segments go, as the retention policy allows; kills are safe.

Most tests build a topic straight through ``TopicLog.append`` (one segment per call, value
``p:<offset>``, chosen publish times) and set cursors directly, so positions and ages are exact;
a few drive the real client.  deltalake checks run in a subprocess (``jobs_worker.py probe``).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jobs_worker import (
    NOW_MS,
    SUBSCRIPTIONS,
    TOPIC,
    WORKER,
    T,
    append,
    build_topic,
    expected_value,
    files_of,
    live_values,
    log_of,
    make_broker,
    probe,
    set_cursor,
    topic_path,
)
from jobs_worker import config as kill_config
from moto_s3 import Root

from broker_core import (
    BrokerConfig,
    Client,
    ConsumerType,
    InitialPosition,
    InvalidConfiguration,
    InvalidTopicName,
    MessageId,
    NamespaceNotFound,
    NotAllowedError,
    Timeout,
    TopicNotFound,
)
from broker_core.broker.broker import Broker
from broker_core.clock import ManualClock
from broker_core.jobs import RetentionLimits, run_retention
from broker_core.jobs.retention import first_unacked, plan_removal
from broker_core.log.segment_ref import SegmentRef
from broker_core.naming import TopicName
from broker_core.subscription.cursor import Cursor, new_cursor
from broker_core.subscription.ranges import RangeSet
from broker_core.topic.topic_log import TopicLog

MIN = 60_000


# --- the decision, as a pure function -----------------------------------------------------------------


def seg(base: int, rows: int, *, size: int = 100, age_ms: int = 0, now: int = NOW_MS) -> SegmentRef:
    return SegmentRef(
        path=f"s{base}",
        base_offset=base,
        num_records=rows,
        base_entry_id=base,
        layout=[-rows],
        size_bytes=size,
        min_publish_ms=now - age_ms,
        max_publish_ms=now - age_ms,
        modification_time_ms=now,
    )


def test_plan_keeps_by_time_or_size_exactly_as_pulsar_trims_ledgers() -> None:
    mb = 1024 * 1024
    segs = [
        seg(0, 1, size=mb, age_ms=90 * MIN),
        seg(1, 1, size=mb, age_ms=50 * MIN),
        seg(2, 1, size=mb, age_ms=40 * MIN),
        seg(3, 1, size=mb, age_ms=1 * MIN),
    ]

    def plan(time_min: int, size_mb: int) -> int:
        return plan_removal(
            segs, acked_below=None, slowest=None, limits=RetentionLimits(time_min, size_mb), now_ms=NOW_MS
        )[0]

    assert plan(-1, -1) == 0  # infinite retention
    assert plan(0, 0) == 4  # nothing retained
    assert plan(60, -1) == 1  # only the 90-minute-old segment is over the time limit
    assert plan(45, -1) == 2
    unordered = [seg(0, 1, age_ms=90 * MIN), seg(1, 1, age_ms=10 * MIN), seg(2, 1, age_ms=80 * MIN)]
    front_only = plan_removal(
        unordered, acked_below=None, slowest=None, limits=RetentionLimits(60, -1), now_ms=NOW_MS
    )
    assert front_only[0] == 1  # the 80-minute-old segment waits behind the young one: front only
    assert plan(-1, 2) == 2  # size: remove while the rest still holds >= 2 MB (4 -> 3 -> 2)
    assert plan(-1, 3) == 1
    assert plan(60, 3) == 1 and plan(30, 3) == 3  # either limit removes
    assert plan(-1, 5) == 0  # the topic is below the size limit
    # an unacknowledged offset stops everything behind it, whatever the policy says
    assert plan_removal(segs, acked_below=2, slowest="s", limits=RetentionLimits(0, 0), now_ms=NOW_MS)[0] == 2
    count, reason = plan_removal(
        segs, acked_below=1, slowest="sub-x", limits=RetentionLimits(0, 0), now_ms=NOW_MS
    )
    assert count == 1 and "sub-x" in reason and "offset 1" in reason


@pytest.mark.parametrize(("time_min", "size_mb"), [(0, 5), (30, 0), (-2, -1), (-1, -5), (True, -1), ("1", 2)])
def test_contradictory_or_malformed_limits_are_refused(time_min: Any, size_mb: Any) -> None:
    with pytest.raises(InvalidConfiguration):
        RetentionLimits(time_min, size_mb)


@st.composite
def topics_with_cursors(
    draw: st.DrawFn,
) -> tuple[list[SegmentRef], list[tuple[int, list[list[int]]]], int, int]:
    sizes = draw(st.lists(st.integers(1, 4), min_size=0, max_size=8))
    first = draw(st.integers(0, 5))
    segs, offset = [], first
    for rows in sizes:
        segs.append(
            seg(
                offset,
                rows,
                size=draw(st.integers(0, 3)) * 512 * 1024,
                age_ms=draw(st.integers(0, 120)) * MIN,
            )
        )
        offset += rows
    end = offset
    cursors = []
    for _ in range(draw(st.integers(0, 3))):
        md = draw(st.integers(0, end + 1))
        points = sorted(set(draw(st.lists(st.integers(md + 1, end + 3), max_size=6))))
        acked = [[a, b] for a, b in zip(points[::2], points[1::2], strict=False) if a < b]
        cursors.append((md, acked))
    return segs, cursors, draw(st.sampled_from([-1, 0, 30, 90])), draw(st.sampled_from([-1, 0, 1, 2]))


@settings(max_examples=300, deadline=None)
@given(topics_with_cursors())
def test_retention_never_removes_an_unacknowledged_or_retained_segment(
    case: tuple[list[SegmentRef], list[tuple[int, list[list[int]]]], int, int],
) -> None:
    segs, raw, time_min, size_mb = case
    if (time_min == 0) != (size_mb == 0):
        return
    limits = RetentionLimits(time_min, size_mb)
    first = segs[0].base_offset if segs else 0
    end = segs[-1].end_offset if segs else first
    cursors = []
    for md, acked in raw:
        cursor = new_cursor("s", ConsumerType.Shared, md)
        cursor.acked = RangeSet(acked)
        cursors.append(cursor)

    def brute_floor(cursor: Cursor) -> int:  # the first live offset this cursor has not acknowledged
        acked = {o for s, e in cursor.acked.to_json() for o in range(s, e)}
        return next(o for o in range(first, end + 10) if o >= cursor.mark_delete and o not in acked)

    floors = [brute_floor(c) for c in cursors]
    assert floors == [first_unacked(c, first) for c in cursors]
    floor = min(floors) if floors else None
    count, _ = plan_removal(segs, acked_below=floor, slowest="s", limits=limits, now_ms=NOW_MS)
    total = sum(s.size_bytes for s in segs)
    removed = 0
    for i, s in enumerate(segs):
        if i < count:  # every removed segment is fully acknowledged and outside the policy
            removed += s.size_bytes
            assert floor is None or s.end_offset <= floor
            assert not limits.keeps(age_ms=NOW_MS - s.max_publish_ms, size_after_bytes=total - removed)
        elif i == count:  # and retention stopped for a reason
            acked = floor is None or s.end_offset <= floor
            assert not acked or limits.keeps(
                age_ms=NOW_MS - s.max_publish_ms, size_after_bytes=total - removed - s.size_bytes
            )


# --- acknowledgment ---------------------------------------------------------------------------------


def test_front_segments_acknowledged_by_every_subscription_go(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    for _ in range(6):
        append(broker)
    set_cursor(broker, "fast", 23)
    set_cursor(broker, "slow", 12)
    summary = run_retention(broker, T, now_ms=NOW_MS)
    result = summary.result_for(T)
    assert result.changed and summary.changed
    assert (result.first_offset_before, result.first_offset, result.removed_messages) == (0, 10, 10)
    assert "'slow'" in result.reason and "offset 12" in result.reason
    log = log_of(broker)
    assert sorted(live_values(log)) == list(range(10, 30))
    assert all(v == expected_value(o) for o, v in live_values(log).items())
    # offsets are never reused after a removal
    assert append(broker).base_offset == 30


def test_an_acknowledged_range_at_the_front_counts_but_later_ones_do_not(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    for _ in range(6):
        append(broker)  # offsets 0..29
    set_cursor(broker, "a", 10)
    run_retention(broker, T, now_ms=NOW_MS)  # first offset is now 10
    # a cursor whose mark-delete lags below the first live offset, with the range from there acked:
    # [10, 15) is acknowledged exactly; [20, 30) is acknowledged too but [15, 20) is not
    set_cursor(broker, "a", 3, acked=[[10, 15], [20, 30]])
    result = run_retention(broker, T, now_ms=NOW_MS).result_for(T)
    assert (result.first_offset_before, result.first_offset) == (10, 15)
    assert "offset 15" in result.reason


def test_without_subscriptions_the_policy_alone_decides(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    for _ in range(3):
        append(broker)
    kept = run_retention(broker, T, now_ms=NOW_MS, retention_time_in_minutes=-1, retention_size_in_mb=-1)
    assert not kept.changed and "retention policy" in kept.result_for(T).reason
    result = run_retention(broker, T, now_ms=NOW_MS).result_for(T)  # defaults 0 min, 0 MB: keep nothing
    assert result.removed_messages == 15 and result.first_offset == 15
    snap = log_of(broker).snapshot()
    assert snap.segments == () and (snap.first_offset, snap.next_offset) == (15, 15)
    # an empty topic keeps its offsets and entry ids: the next message is offset 15, entry 15
    assert append(broker, 1).base_offset == 15
    client = Client(str(tmp_path), broker_config=broker.config)
    reader = client.create_reader(T, MessageId.earliest)
    assert reader.read_next(5000).data() == expected_value(15)
    client.close()


def test_a_delayed_message_holds_back_every_later_segment(tmp_path: Path) -> None:
    clock = ManualClock(NOW_MS)
    config = BrokerConfig(fsync_enabled=False, delayed_delivery_tick_time_millis=10)
    client = Client(str(tmp_path), broker_config=config, clock=clock)
    broker = client._broker

    def subscribe() -> Any:
        return client.subscribe(
            T, "s", consumer_type=ConsumerType.Shared, initial_position=InitialPosition.Earliest
        )

    consumer = subscribe()
    producer = client.create_producer(T, batching_enabled=False)
    for i in range(3):
        producer.send(f"m{i}".encode())
    producer.send(b"late", deliver_after=timedelta(hours=1))
    for i in range(3, 6):
        producer.send(f"m{i}".encode())
    got = []
    for _ in range(6):
        msg = consumer.receive(5000)
        got.append(msg.data())
        consumer.acknowledge(msg)
    assert b"late" not in got
    with pytest.raises(Timeout):
        consumer.receive(200)
    consumer.close()  # flushes the grouped acknowledgments
    result = run_retention(broker, T, now_ms=NOW_MS).result_for(T)
    assert (result.removed_messages, result.first_offset) == (3, 3)  # m0..m2; "late" holds m3..m5 back
    clock.advance(3600_000)
    consumer = subscribe()
    msg = consumer.receive(5000)
    assert msg.data() == b"late"
    consumer.acknowledge(msg)
    consumer.close()
    result = run_retention(broker, T, now_ms=clock.now_ms()).result_for(T)
    assert result.first_offset == 7 and log_of(broker).snapshot().segments == ()
    client.close()


# --- the retention policy and its precedence ------------------------------------------------------------


def test_policy_precedence_broker_namespace_topic_arguments(tmp_path: Path) -> None:
    broker = make_broker(tmp_path, default_retention_time_in_minutes=-1, default_retention_size_in_mb=-1)
    other = "persistent://public/default/other"
    for age in (120, 90, 50, 20, 5):
        append(broker, publish_ms=NOW_MS - age * MIN)
        append(broker, publish_ms=NOW_MS - age * MIN, topic=other)
    # broker config: keep forever
    assert not run_retention(broker, T, now_ms=NOW_MS).changed
    # namespace: 60 minutes (size unlimited) removes the 120- and 90-minute-old segments of both topics
    broker.policies.set_namespace_policies("public/default", {"retentionTimeInMinutes": 60})
    assert run_retention(broker, T, now_ms=NOW_MS).result_for(T).first_offset == 10
    # topic: 30 minutes overrides the namespace for T only
    broker.policies.set_topic_policies(T, {"retentionTimeInMinutes": 30})
    assert run_retention(broker, T, now_ms=NOW_MS).result_for(T).first_offset == 15
    assert run_retention(broker, other, now_ms=NOW_MS).result_for(other).first_offset == 10
    # explicit arguments override the topic
    assert not run_retention(broker, T, now_ms=NOW_MS, retention_time_in_minutes=-1).changed
    assert (
        run_retention(broker, T, now_ms=NOW_MS, retention_time_in_minutes=10).result_for(T).first_offset == 20
    )
    # removing the topic policy falls back to the namespace's
    broker.policies.set_topic_policies(T, {}, remove=["retentionTimeInMinutes"])
    dry = run_retention(broker, T, now_ms=NOW_MS + 100 * MIN, dry_run=True).result_for(T)
    assert dry.first_offset == 25 and not dry.changed


def test_size_limit_keeps_the_newest_megabytes(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    segs = [append(broker, 2, value_bytes=200_000) for _ in range(6)]  # ~400 kB each, incompressible
    broker.policies.set_topic_policies(T, {"retentionTimeInMinutes": -1, "retentionSizeInMB": 1})
    total = sum(s.size_bytes for s in segs)
    expected, removed = 0, 0
    for s in segs:  # Pulsar: drop the front while what remains still holds at least the limit
        if total - removed - s.size_bytes < 1024 * 1024:
            break
        removed += s.size_bytes
        expected += 1
    assert 0 < expected < 6
    result = run_retention(broker, T, now_ms=NOW_MS).result_for(T)
    assert len(result.removed_paths) == expected and result.removed_bytes == removed


def test_contradictory_policy_fails_and_changes_nothing(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    append(broker)
    broker.policies.set_namespace_policies("public/default", {"retentionSizeInMB": 5})  # beside time 0
    before = files_of(tmp_path)
    with pytest.raises(InvalidConfiguration, match="retentionTimeInMinutes=0"):
        run_retention(broker, T, now_ms=NOW_MS)
    with pytest.raises(InvalidConfiguration):
        run_retention(broker, T, now_ms=NOW_MS, retention_time_in_minutes=30, retention_size_in_mb=0)
    assert files_of(tmp_path) == before


def test_bad_input_is_refused_with_clear_errors_and_nothing_changes(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    append(broker)
    before = files_of(tmp_path)
    with pytest.raises(InvalidConfiguration, match="unknown policy 'retentionTime'"):
        broker.policies.set_namespace_policies("public/default", {"retentionTime": 5})
    with pytest.raises(InvalidConfiguration, match="retentionSizeInMB"):
        broker.policies.set_topic_policies(T, {"retentionSizeInMB": -2})
    with pytest.raises(InvalidConfiguration, match="retentionTimeInMinutes"):
        run_retention(broker, T, retention_time_in_minutes=-3)
    for bad in (-1, "now", True, 1.5):
        with pytest.raises(InvalidConfiguration, match="now_ms"):
            run_retention(broker, T, now_ms=bad)
    with pytest.raises(InvalidConfiguration, match="dry_run"):
        run_retention(broker, T, dry_run="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfiguration, match="broker"):
        run_retention(str(tmp_path), T)  # type: ignore[arg-type]
    with pytest.raises(TopicNotFound):
        run_retention(broker, "persistent://public/default/missing")
    with pytest.raises(NamespaceNotFound):
        run_retention(broker, "public/nowhere")
    with pytest.raises(NotAllowedError):
        run_retention(broker, "non-persistent://public/default/t")
    with pytest.raises(InvalidTopicName):
        run_retention(broker, "persistent://public/default/../x")
    assert files_of(tmp_path) == before
    assert not topic_path(tmp_path, "persistent://public/default/missing").exists()


# --- dry runs, idempotence, the commit ------------------------------------------------------------------


def test_dry_run_changes_nothing_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    for _ in range(4):
        append(broker)
    set_cursor(broker, "s", 12)
    before = files_of(tmp_path)
    dry = run_retention(broker, T, now_ms=NOW_MS, dry_run=True)
    assert dry.dry_run and not dry.changed and dry.result_for(T).removed_messages == 10
    assert files_of(tmp_path) == before
    first = run_retention(broker, T, now_ms=NOW_MS)
    assert first.result_for(T).removed_paths == dry.result_for(T).removed_paths
    after = files_of(tmp_path)
    second = run_retention(broker, T, now_ms=NOW_MS)
    assert not second.changed and second.result_for(T).version is None
    assert files_of(tmp_path) == after


def test_the_remove_commit_and_what_deltalake_reads(tmp_path: Path) -> None:
    broker = make_broker(tmp_path, checkpoint_interval=3)
    segs = [append(broker) for _ in range(4)]
    set_cursor(broker, "s", 10)
    result = run_retention(broker, T, now_ms=NOW_MS).result_for(T)
    commit = topic_path(tmp_path) / "_delta_log" / f"{result.version:020d}.json"
    actions = [json.loads(line) for line in commit.read_text().splitlines()]
    removes = [a["remove"] for a in actions if "remove" in a]
    assert [r["path"] for r in removes] == [s.path for s in segs[:2]]
    for r, s in zip(removes, segs, strict=False):
        assert r["dataChange"] is True and r["extendedFileMetadata"] is True and r["size"] == s.size_bytes
        assert r["partitionValues"] == {} and "tags" not in r  # like deltalake's removes: lean commits
        assert abs(r["deletionTimestamp"] - time.time() * 1000) < 60_000
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["operation"] == "RETENTION"
    assert info["operationParameters"]["firstOffset"] == 10
    assert (topic_path(tmp_path) / segs[0].path).exists()  # files stay until vacuum
    fresh = TopicLog(broker.io, log_of(broker).path).snapshot()
    assert fresh.first_offset == 10 and set(fresh.tombstones) == {segs[0].path, segs[1].path}
    (seen,) = probe(topic_path(tmp_path))
    assert seen["num_rows"] == 10 and seen["values"] == sorted(f"p:{o}" for o in range(10, 20))


def test_partitioned_topics_and_namespaces(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    broker.admin.create_partitioned_topic("persistent://public/default/parts", 3)
    for index in (0, 2):
        append(broker, topic=f"persistent://public/default/parts-partition-{index}")
    summary = run_retention(broker, "persistent://public/default/parts", now_ms=NOW_MS)
    assert [r.topic for r in summary.results] == [
        f"persistent://public/default/parts-partition-{i}" for i in range(3)
    ]
    assert [r.removed_messages for r in summary.results] == [5, 0, 5]
    assert summary.results[1].reason == "the partition has no log yet"
    assert not topic_path(tmp_path, "persistent://public/default/parts-partition-1").exists()
    broker.admin.create_namespace("public/jobs")
    for name in ("x", "y"):
        append(broker, topic=f"persistent://public/jobs/{name}")
    set_cursor(broker, "s", 0, topic="persistent://public/jobs/y")
    summary = run_retention(broker, "public/jobs", now_ms=NOW_MS)
    assert summary.target == "public/jobs"
    assert {r.topic: r.removed_messages for r in summary.results} == {
        "persistent://public/jobs/x": 5,
        "persistent://public/jobs/y": 0,
    }


# --- beside live producers, consumers and readers -----------------------------------------------------------


def test_retention_beside_live_producers_consumers_and_readers(tmp_path: Path) -> None:
    """Producers send, a consumer acknowledges slowly, a reader reads from the start, while retention,
    checkpoints and vacuum run over and over: every sent message reaches the consumer, nothing it has
    not acknowledged is ever removed, and the reader never fails (it skips what was removed)."""
    from broker_core.jobs import checkpoint, vacuum

    config = BrokerConfig(fsync_enabled=False, checkpoint_interval=10)
    client = Client(str(tmp_path), broker_config=config)
    broker = client._broker
    consumer = client.subscribe(T, "s", initial_position=InitialPosition.Earliest)
    stop = threading.Event()
    sent: list[bytes] = []
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            producer = client.create_producer(T, batching_enabled=True, batching_max_publish_delay_ms=2)
            i = 0
            while not stop.is_set():
                producer.send_async(f"m{i}".encode(), None)
                sent.append(f"m{i}".encode())
                i += 1
                if i % 50 == 0:
                    producer.flush()
                    time.sleep(0.005)
            producer.flush()
            producer.close()
        except BaseException as exc:
            errors.append(exc)

    received: list[bytes] = []

    def consume() -> None:
        try:
            while not stop.is_set() or len(received) < len(sent):
                try:
                    msg = consumer.receive(500)
                except Timeout:
                    if stop.is_set():
                        break
                    continue
                received.append(msg.data())
                consumer.acknowledge(msg)
        except BaseException as exc:
            errors.append(exc)

    reader_seen: list[int] = []

    def read() -> None:
        try:
            reader = client.create_reader(T, MessageId.earliest)
            while not stop.is_set():
                try:
                    reader_seen.append(len(reader.read_next(200).data()))
                except Timeout:
                    continue
            reader.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=f) for f in (produce, consume, read)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 3.0
    runs = 0
    while time.monotonic() < deadline:
        run_retention(broker, T)
        cursor = broker.cursor_store(TopicName.parse(T), "s").load()[1]
        assert cursor is not None
        assert log_of(broker).snapshot().first_offset <= cursor.mark_delete  # never past the slowest cursor
        if runs % 5 == 0:
            checkpoint(broker, T)
            vacuum(broker, T, min_age_ms=1_000, enforce_min_age=False, dry_run=False)
        runs += 1
        time.sleep(0.02)
    stop.set()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert runs > 10 and reader_seen
    assert sorted(set(received)) == sorted(set(sent)) and len(sent) > 100
    consumer.close()
    client.close()


# --- killed at random points --------------------------------------------------------------------------


@pytest.mark.slow
def test_jobs_killed_at_random_points_lose_nothing_and_keep_the_table_readable(tmp_path: Path, any_root: Root) -> None:
    """SIGKILL a process running retention, TTL, checkpoints, vacuum and log cleanup in a loop at a
    random instant; afterwards every message some subscription has not acknowledged, and every
    message the retention policy keeps, is still there with its content, the offsets are intact, our
    log and deltalake both read the table, and running the jobs again converges.

    50 trials of 40 job steps on a folder, 6 of 24 on S3 (each on a fresh prefix under the test's
    root: a bucket has no cheap copy of a whole tree, so each S3 trial builds its topic afresh)."""
    rng = random.Random(1234)
    trials, steps = (6, 24) if any_root.is_s3 else (50, 40)
    rows, old, recent = 4, 14, 4
    template = tmp_path / "template"
    if not any_root.is_s3:
        build_topic(str(template), old_segments=old, recent_segments=recent, rows=rows)

    def fresh(name: str) -> str:
        """A root holding the template topic: a copy of the folder, or a new S3 prefix built afresh."""
        if any_root.is_s3:
            url = f"{any_root.url}/{name}"
            build_topic(url, old_segments=old, recent_segments=recent, rows=rows)
            return url
        shutil.copytree(template, tmp_path / name)
        return str(tmp_path / name)

    server = subprocess.Popen(
        [sys.executable, str(WORKER), "fork-server", "{}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None
    lines_in: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines_in.put(x) for x in server.stdout or ()], daemon=True).start()
    pids: list[int] = []
    history: list[str] = []

    def next_line() -> str:
        """The server's next line; a clear failure (with the last child's state) instead of a hang."""
        try:
            history.append(lines_in.get(timeout=60).strip())
            return history[-1]
        except queue.Empty:
            state = "gone"
            with contextlib.suppress(OSError, IndexError):
                state = Path(f"/proc/{pids[-1]}/stat").read_text().rsplit(")", 1)[1].split()[0]
            raise AssertionError(
                f"no line from the fork server in 60 s; last child {pids[-1:]} state {state}; last lines "
                f"{history[-8:]}"
            ) from None

    assert next_line() == "ready"
    roots: list[str] = []
    kills_mid_run = 0
    last_steps: list[int] = []  # steps completed before the kill: the kills spread over the job mix
    try:
        # calibrate: how long does an unkilled run take on this machine?  The kills then land
        # anywhere within it, however fast or loaded the machine is.
        calibration = fresh("calibration")
        server.stdin.write(json.dumps({"root": calibration, "seed": 999, "steps": steps, "rows": rows}) + "\n")
        server.stdin.flush()
        line = next_line()
        while not line.startswith("started "):
            line = next_line()
        run_started = time.monotonic()
        while not line.startswith("exit "):
            line = next_line()
        run_seconds = max(0.02, time.monotonic() - run_started)
        for trial in range(trials):
            root = fresh(f"trial{trial}")
            server.stdin.write(json.dumps({"root": root, "seed": trial, "steps": steps, "rows": rows}) + "\n")
            server.stdin.flush()
            lines = [next_line()]
            # the child is open once it says "started"; the server's "pid" line may come after it
            while not (any(x.startswith("started ") for x in lines) and any(x.startswith("pid ") for x in lines)):
                assert not any(x.startswith("exit ") for x in lines), f"the child died before starting: {lines}"
                lines.append(next_line())
            pid = int(next(line for line in lines if line.startswith("pid ")).split()[1])
            pids.append(pid)
            trial_started = time.monotonic()
            time.sleep(rng.uniform(0.0, 0.9 * run_seconds))
            if not any(x.startswith("exit ") for x in lines):  # never signal a reaped (reusable) pid
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            while not any(x.startswith("exit ") for x in lines):
                lines.append(next_line())
            kills_mid_run += "done" not in lines
            if "done" in lines:
                # the run finished before the kill: it was faster than the calibration run (which
                # may pay a cold start, as on the S3 emulator), so later kills aim within this one
                run_seconds = min(run_seconds, max(0.02, time.monotonic() - trial_started))
            last_steps.append(sum(line.startswith("step ") for line in lines))
            acked = max(
                [int(line.split()[1]) for line in lines if line.startswith(("started ", "appended "))]
            )
            roots.append(root)
            _check_after_kill(root, rows=rows, old=old, acked=acked)
    finally:
        server.stdin.close()
        server.wait(timeout=30)
    table_dir = "/".join(TopicName.parse(TOPIC).relative_path())
    probed = probe(*(f"{r}/{table_dir}" for r in roots), storage_options=any_root.storage_options)
    for root, seen in zip(roots, probed, strict=True):
        assert "error" not in seen, seen
        log = TopicLog(Broker.for_url(root, kill_config()).io, "public/default/persistent/kill")
        expected = sorted(v.decode() for v in live_values(log).values())
        assert seen["values"] == expected
    assert kills_mid_run >= trials // 2 and len(set(last_steps)) >= min(8, trials // 2), last_steps


def _check_after_kill(root: str, *, rows: int, old: int, acked: int) -> None:
    broker = Broker.for_url(root, kill_config())
    topic = TopicName.parse(TOPIC)
    # a fresh process's view: a new handle that loads from storage
    log = TopicLog(broker.io, "public/default/persistent/kill")
    snap = log.snapshot()
    # every acknowledged append is there (one more may have committed before its line was printed);
    # offsets are dense, so none was lost or reused
    assert acked <= snap.next_offset <= acked + rows and snap.next_entry_id == snap.next_offset
    floors = []
    for sub in SUBSCRIPTIONS:
        cursor = broker.cursor_store(topic, sub).load()[1]
        assert cursor is not None
        floors.append(first_unacked(cursor, 0))
    retained_from = rows * old  # everything after the old segments is inside the 30-minute retention
    assert snap.first_offset <= min([*floors, retained_from])
    values = live_values(log)
    assert sorted(values) == list(range(snap.first_offset, snap.next_offset))
    assert all(v == expected_value(o) for o, v in values.items())
    # running the jobs again converges, and a second pass changes nothing
    run_retention(broker, TOPIC, now_ms=NOW_MS)
    assert not run_retention(broker, TOPIC, now_ms=NOW_MS).changed
