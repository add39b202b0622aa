"""``run_maintenance_pass``: the due jobs per topic from Pulsar's intervals, durable last-run times, a
failing topic isolated, and one leader per root through the maintenance lease (also across processes,
with the leader SIGKILLed mid-pass)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from jobs_worker import NOW_MS, append, make_broker, set_cursor
from moto_s3 import Root

from broker_core.broker.broker import Broker
from broker_core.clock import ManualClock
from broker_core.errors import InvalidConfiguration, NamespaceNotFound
from broker_core.jobs import maintain
from broker_core.jobs.maintain import JOBS, read_last_runs, run_maintenance_pass, state_store
from broker_core.jobs.maintenance_lease import MaintenanceLease

HERE = Path(__file__).parent
WORKER = HERE / "maintain_worker.py"
T1 = "persistent://public/default/t1"
T2 = "persistent://public/default/t2"


def two_topics(broker: Broker) -> None:
    for topic in (T1, T2):
        append(broker, topic=topic, publish_ms=NOW_MS)


def ran(summary: dict[str, Any]) -> dict[str, list[str]]:
    return {t["topic"]: sorted(t["jobs"]) for t in summary["topics"]}


def test_a_pass_runs_each_job_at_its_interval_and_a_new_runner_knows_what_is_due(any_root: Root) -> None:
    broker = make_broker(any_root.url)
    two_topics(broker)
    clock = ManualClock(NOW_MS)
    first = run_maintenance_pass(broker, execute=True, clock=clock)
    assert first["status"] == "done" and ran(first) == {T1: sorted(JOBS), T2: sorted(JOBS)}
    assert all(not t["errors"] for t in first["topics"])
    json.dumps(first)  # JSON-able

    clock.advance(30_000)
    assert run_maintenance_pass(broker, execute=True, clock=clock)["topics"] == []  # nothing due yet

    # another runner (a new lease holder, a fresh state handle) reads the stored last-run times
    clock.advance(31_000)  # 61 s: backlog quota (60 s) and compaction checks (60 s)
    other = run_maintenance_pass(make_broker(any_root.url), execute=True, clock=clock)
    assert ran(other) == {T1: ["backlog", "compaction"], T2: ["backlog", "compaction"]}
    clock.advance(60_000)  # 121 s: retention (120 s) too
    assert ran(run_maintenance_pass(broker, execute=True, clock=clock))[T1] == ["backlog", "compaction", "retention"]
    clock.advance(180_000)  # 301 s: message expiry, merge-segments, log cleanup and vacuum (5 min each)
    assert ran(run_maintenance_pass(broker, execute=True, clock=clock))[T1] == [
        "backlog", "cleanup-logs", "compaction", "merge-segments", "retention", "ttl", "vacuum"]


def test_intervals_come_from_the_pulsar_named_settings(tmp_path: Path) -> None:
    broker = make_broker(tmp_path, retention_check_interval_in_seconds=10, backlog_quota_check_interval_in_seconds=600,
                         broker_service_compaction_monitor_interval_in_seconds=600)
    two_topics(broker)
    clock = ManualClock(NOW_MS)
    run_maintenance_pass(broker, execute=True, clock=clock)
    clock.advance(10_000)
    assert ran(run_maintenance_pass(broker, execute=True, clock=clock))[T1] == ["retention"]


@pytest.mark.parametrize("level", ["broker", "namespace", "topic"])
def test_compaction_runs_once_the_threshold_is_crossed(tmp_path: Path, level: str) -> None:
    broker = make_broker(tmp_path, broker_service_compaction_threshold_in_bytes=1 if level == "broker" else 0)
    append(broker, topic=T1, publish_ms=NOW_MS)
    append(broker, topic=T2, publish_ms=NOW_MS)
    if level == "namespace":
        broker.policies.set_namespace_policies("public/default", {"compactionThreshold": 1})
    if level == "topic":
        broker.policies.set_topic_policies(T1, {"compactionThreshold": 1})
        broker.policies.set_topic_policies(T2, {"compactionThreshold": 10_000_000})
    for topic in (T1, T2):
        set_cursor(broker, "reader", -1, topic=topic)  # holds the backlog: retention keeps it
    clock = ManualClock(NOW_MS)
    summary = run_maintenance_pass(broker, execute=True, clock=clock, namespaces=["public/default"])
    compaction = summary["topics"][0]["jobs"]["compaction"]
    assert "skipped" not in compaction and compaction["messagesRead"] == 5
    clock.advance(60_000)
    again = run_maintenance_pass(broker, execute=True, clock=clock)["topics"][0]["jobs"]["compaction"]
    assert again == {"skipped": "0 bytes since the last compaction, threshold 1"}
    if level == "topic":  # T2's own threshold is not reached
        assert summary["topics"][1]["jobs"]["compaction"]["skipped"].endswith("threshold 10000000")


def test_a_dry_run_changes_nothing_and_records_no_last_run(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    two_topics(broker)
    before = broker.topic_log(maintain.TopicName.parse(T1)).snapshot().version
    summary = run_maintenance_pass(broker, clock=ManualClock(NOW_MS))
    assert summary["execute"] is False and ran(summary)[T1] == sorted(JOBS)
    assert summary["topics"][0]["jobs"]["retention"]["changed"] is False
    assert broker.topic_log(maintain.TopicName.parse(T1)).snapshot().version == before
    assert read_last_runs(state_store(broker)) == {}


def test_a_failing_job_is_reported_and_the_pass_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = make_broker(tmp_path)
    two_topics(broker)
    real = maintain.run_retention

    def flaky(b: Broker, topic: Any, **kw: Any) -> Any:
        if str(topic) == T1:
            raise OSError("disk on fire")
        return real(b, topic, **kw)

    monkeypatch.setattr(maintain, "run_retention", flaky)
    summary = run_maintenance_pass(broker, execute=True, clock=ManualClock(NOW_MS))
    by_topic = {t["topic"]: t for t in summary["topics"]}
    assert by_topic[T1]["errors"] == {"retention": "OSError: disk on fire"}
    assert sorted(by_topic[T1]["jobs"]) == sorted(set(JOBS) - {"retention"})
    assert by_topic[T2]["errors"] == {} and summary["status"] == "done"


def test_bad_arguments_are_typed_errors(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    two_topics(broker)
    with pytest.raises(NamespaceNotFound, match="public/nope"):
        run_maintenance_pass(broker, namespaces=["public/nope"])
    with pytest.raises(InvalidConfiguration, match="execute"):
        run_maintenance_pass(broker, execute="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfiguration, match="lease_ms"):
        MaintenanceLease(broker.io, lease_ms=0)


def test_a_second_runner_stands_by_until_the_lease_expires(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    two_topics(broker)
    clock = ManualClock(NOW_MS)
    leader = MaintenanceLease(broker.io, holder="a", lease_ms=10_000, clock=clock)
    assert leader.acquire()
    standby = run_maintenance_pass(broker, execute=True, clock=clock,
                                   lease=MaintenanceLease(broker.io, holder="b", clock=clock))
    assert standby["status"] == "standby" and standby["leader"] == "a" and standby["topics"] == []
    clock.advance(10_000)  # "a" died without renewing
    taken = run_maintenance_pass(broker, execute=True, clock=clock,
                                 lease=MaintenanceLease(broker.io, holder="b", clock=clock))
    assert taken["status"] == "done" and len(taken["topics"]) == 2
    assert not leader.renew()  # the old leader learns it lost the lease
    assert MaintenanceLease(broker.io, clock=clock).current().holder is None  # released after the pass


def test_the_leader_renews_once_half_its_lease_is_gone(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    clock = ManualClock(NOW_MS)
    lease = MaintenanceLease(broker.io, holder="a", lease_ms=10_000, clock=clock)
    versions = lease._state  # the lease's commits
    assert lease.acquire()
    taken = versions.latest()[0]
    clock.advance(4_000)
    assert lease.renew_if_due() and versions.latest()[0] == taken  # more than half left: no write
    clock.advance(2_000)
    assert lease.renew_if_due() and versions.latest()[0] == taken + 1
    assert lease.current().expires_ms == NOW_MS + 16_000
    clock.advance(10_000)  # stalled past the expiry: the renewal fails (another runner may lead)
    assert not lease.renew_if_due()


def test_racing_runners_elect_exactly_one_leader(any_root: Root) -> None:
    broker = make_broker(any_root.url)
    clock = ManualClock(NOW_MS)
    leases = [MaintenanceLease(make_broker(any_root.url).io, holder=f"r{i}", clock=clock) for i in range(6)]
    barrier = threading.Barrier(len(leases))
    won: list[str] = []

    def race(lease: MaintenanceLease) -> None:
        barrier.wait()
        if lease.acquire():
            won.append(lease.holder)

    threads = [threading.Thread(target=race, args=(lease,)) for lease in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert MaintenanceLease(broker.io, clock=clock).current().holder == won[0]


# --- real processes -------------------------------------------------------------------------------------


def start_worker(root: Path, log: Path, holder: str, *, lease_ms: int, job_s: float) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent), os.environ.get("PYTHONPATH", "")])}
    args = {"root": str(root), "log": str(log), "holder": holder, "lease_ms": lease_ms, "job_s": job_s}
    return subprocess.Popen([sys.executable, str(WORKER), json.dumps(args)], stdout=subprocess.PIPE, text=True,
                            env=env)


def job_intervals(log: Path, killed: dict[str, int]) -> dict[tuple[str, str], list[tuple[int, int, str]]]:
    """(topic, job) -> [(start ms, end ms, holder)]; a job whose holder was killed ends at the kill."""
    open_: dict[tuple[str, str, str], int] = {}
    out: dict[tuple[str, str], list[tuple[int, int, str]]] = {}
    for line in log.read_text().splitlines():
        event, topic, job, ms, holder = line.split()
        if event == "start":
            open_[(topic, job, holder)] = int(ms)
        else:
            out.setdefault((topic, job), []).append((open_.pop((topic, job, holder)), int(ms), holder))
    for (topic, job, holder), start in open_.items():
        out.setdefault((topic, job), []).append((start, killed[holder], holder))
    return out


def assert_no_overlap(intervals: dict[tuple[str, str], list[tuple[int, int, str]]]) -> None:
    for key, runs in intervals.items():
        for (_, e1, h1), (s2, _, h2) in itertools.pairwise(sorted(runs)):
            assert s2 >= e1, f"{key} ran concurrently: {h1} until {e1}, {h2} from {s2}"


def test_two_processes_never_run_a_topic_job_at_once(tmp_path: Path) -> None:
    root = tmp_path / "root"
    two_topics(make_broker(root))
    log = tmp_path / "jobs.log"
    workers = [start_worker(root, log, h, lease_ms=5_000, job_s=0.05) for h in ("a", "b")]
    results = [json.loads(w.communicate(timeout=120)[0].strip().splitlines()[-1]) for w in workers]
    assert "done" in {r["status"] for r in results}
    intervals = job_intervals(log, {})
    assert_no_overlap(intervals)
    assert {k for k, runs in intervals.items()} == {(t, j) for t in (T1, T2) for j in JOBS}


def test_the_leader_killed_mid_pass_is_taken_over_after_expiry(tmp_path: Path) -> None:
    root = tmp_path / "root"
    two_topics(make_broker(root))
    log = tmp_path / "jobs.log"
    lease_ms = 1_500
    leader = start_worker(root, log, "a", lease_ms=lease_ms, job_s=0.2)
    deadline = time.monotonic() + 60
    while not (log.exists() and log.read_text().count("start") >= 3):  # in the middle of its first topic
        assert time.monotonic() < deadline and leader.poll() is None
        time.sleep(0.02)
    leader.send_signal(signal.SIGKILL)
    leader.wait()
    killed_ms = time.time_ns() // 1_000_000
    # the dead leader's lease runs out at its last renewal's expiry (up to half a lease before the kill
    # plus a lease), which is what a runner compares, not the moment of the kill
    expires_ms = MaintenanceLease(make_broker(root).io).current().expires_ms
    early = start_worker(root, log, "b", lease_ms=lease_ms, job_s=0.0)
    early_result = json.loads(early.communicate(timeout=60)[0].strip().splitlines()[-1])
    if time.time_ns() // 1_000_000 < expires_ms - 200:  # ran entirely within the dead leader's lease
        assert early_result["status"] == "standby"
    time.sleep(max(0.0, (max(killed_ms + lease_ms, expires_ms) - time.time_ns() // 1_000_000) / 1000) + 0.1)
    late = start_worker(root, log, "c", lease_ms=lease_ms, job_s=0.0)
    assert json.loads(late.communicate(timeout=60)[0].strip().splitlines()[-1])["status"] == "done"
    intervals = job_intervals(log, {"a": killed_ms})
    assert_no_overlap(intervals)
    assert {k for k in intervals} == {(t, j) for t in (T1, T2) for j in JOBS}  # the pass was finished
    assert any(h == "a" for runs in intervals.values() for *_, h in runs)
