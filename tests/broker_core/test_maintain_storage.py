"""``pubsub maintain`` with its defaults keeps a trickled topic's storage bounded (issue 27, D180).

Simulated half hour on a manual clock: a producer commits small segments every two minutes, a
subscription acknowledges everything, and a maintenance pass runs after each batch.  The files of removed segments must
go ``removedSegmentGracePeriodInSeconds`` after their remove (plus at most one vacuum interval), and the
log history ``logHistoryRetentionInSeconds`` after it was written (plus the cleanup interval and the
checkpoint spacing), so the directory stops growing instead of keeping everything for 7 (30) days.
(Removes here carry wall-clock times while the pass's clock runs ahead, so the grace itself is checked
by a test of its own.)
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from jobs_worker import append, make_broker, set_cursor
from moto_s3 import Root

from broker_core.clock import ManualClock
from broker_core.errors import InvalidConfiguration
from broker_core.jobs.log_maintenance import vacuum
from broker_core.jobs.maintain import (
    JOBS,
    MaintenanceSchedule,
    due_jobs,
    read_last_runs,
    run_job,
    run_maintenance_pass,
    state_store,
)
from broker_core.jobs.progress import MIN_SAFE_AGE_MS
from broker_core.jobs.retention import run_retention
from broker_core.log.checkpoint import LOG_DIR
from broker_core.naming import TopicName

T = "persistent://public/default/trickle"
MINUTES = 30
STEP_MINUTES = 2  # one pass every 2 minutes (retention's interval): half the passes of `--every 1m`
PER_STEP = 4
_COMMIT = re.compile(r"^\d{20}\.json$")


def test_storage_stays_bounded_with_the_default_schedule(any_root: Root) -> None:
    broker = make_broker(any_root.url)
    io = broker.io
    path = "/".join(TopicName.parse(T).relative_path())
    clock = ManualClock(int(time.time() * 1000))  # file times are real: the clock starts at the wall clock
    schedule = MaintenanceSchedule.from_config(broker)
    assert (schedule.vacuum_min_age_ms, schedule.log_retention_ms) == (600_000, 600_000)
    assert schedule.orphan_min_age_ms == MIN_SAFE_AGE_MS
    parts: list[int] = []
    commits: list[int] = []
    for _ in range(MINUTES // STEP_MINUTES):
        for _ in range(PER_STEP):
            append(broker, 3, topic=T, publish_ms=clock.now_ms())
        log = broker.topic_log(TopicName.parse(T))
        set_cursor(broker, "s", log.snapshot().next_offset, topic=T)  # everything acknowledged
        summary = run_maintenance_pass(broker, execute=True, clock=clock, schedule=schedule)
        assert not any(t["errors"] for t in summary["topics"]), summary
        names = io.list_dir(path)
        parts.append(sum(n.startswith("part-") for n in names))
        commits.append(sum(bool(_COMMIT.match(n)) for n in io.list_dir(f"{path}/{LOG_DIR}")))
        clock.advance(STEP_MINUTES * 60_000)
    print(f"part files per step {parts}; log commits per step {commits}")
    written = MINUTES // STEP_MINUTES * PER_STEP
    # a plateau: the last 10 steps hold no more files than the 5 before them, and far fewer than written
    assert max(parts[10:]) <= max(parts[5:10]) and max(parts[10:]) < written // 2, parts
    assert max(commits[10:]) <= max(commits[5:10]) + PER_STEP * 3 and commits[-1] < written // 2, commits


def test_a_removed_file_stays_for_the_grace_and_an_orphan_for_an_hour(any_root: Root) -> None:
    broker = make_broker(any_root.url)
    io = broker.io
    path = "/".join(TopicName.parse(T).relative_path())
    seg = append(broker, 3, topic=T)
    append(broker, 3, topic=T)
    set_cursor(broker, "s", 3, topic=T)
    removed_ms = int(time.time() * 1000)
    assert run_retention(broker, T, dry_run=False, now_ms=removed_ms).changed
    orphan = f"{path}/part-00000000000000000000000000000000.parquet"  # a killed writer's
    io.put_if_absent(orphan, b"orphan", anchor=path)
    schedule = MaintenanceSchedule.from_config(broker)

    def vacuum_at(ms: int) -> None:
        run_job(broker, T, "vacuum", schedule=schedule, execute=True, now_ms=ms)

    vacuum_at(removed_ms + schedule.vacuum_min_age_ms - 5_000)
    assert io.exists(f"{path}/{seg.path}")  # inside the grace
    vacuum_at(removed_ms + schedule.vacuum_min_age_ms + 5_000)
    assert not io.exists(f"{path}/{seg.path}")  # the grace is over
    assert io.exists(orphan)  # an orphan waits an hour
    vacuum_at(removed_ms + MIN_SAFE_AGE_MS + 60_000)
    assert not io.exists(orphan)


@pytest.mark.parametrize("value", [0, -600_000, 59_999, True, 600.0, "10m", None])
@pytest.mark.parametrize("name", ["vacuum_min_age_ms", "log_retention_ms"])
def test_a_schedule_with_a_bad_age_is_refused(name: str, value: object) -> None:
    with pytest.raises(InvalidConfiguration, match=f"maintenance {name} must be an int of at least 60000 ms"):
        MaintenanceSchedule(**{name: value})  # type: ignore[arg-type]


def test_the_last_run_times_of_a_deleted_topic_are_dropped(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    other = "persistent://public/default/gone"
    append(broker, 3, topic=T)
    append(broker, 3, topic=other)
    clock = ManualClock(int(time.time() * 1000))
    run_maintenance_pass(broker, execute=True, clock=clock)
    assert set(read_last_runs(state_store(broker))) == {T, other}
    broker.admin.delete_topic(other, force=True)
    clock.advance(60_000)
    run_maintenance_pass(broker, namespaces=["public/default"], execute=True, clock=clock)
    assert set(read_last_runs(state_store(broker))) == {T, other}  # a pass over part of the root prunes nothing
    clock.advance(60_000)
    run_maintenance_pass(broker, execute=True, clock=clock)
    assert set(read_last_runs(state_store(broker))) == {T}


@pytest.mark.parametrize("value", [60_000, 0, -1, True, "1h", 3.6e6])
def test_vacuum_refuses_an_orphan_age_under_the_hour(tmp_path: Path, value: object) -> None:
    """The short grace is for files a committed remove retired; an orphan may be a staged write's."""
    broker = make_broker(tmp_path)
    append(broker, 3, topic=T)
    with pytest.raises(InvalidConfiguration, match="orphan_min_age_ms"):
        vacuum(broker, T, min_age_ms=600_000, enforce_min_age=False, orphan_min_age_ms=value,  # type: ignore[arg-type]
               dry_run=False)


def test_a_job_started_late_in_a_pass_is_due_at_the_pass_one_interval_later() -> None:
    """Passes start every minute; a job's recorded time is its own start, a little later.  The pass one
    interval later must run it, not the one after (retention every 2 minutes, not 3)."""
    schedule = MaintenanceSchedule()
    pass_ms = 1_800_000_000_000
    last = {job: pass_ms + 250 for job in JOBS}  # each job started 250 ms into the pass
    assert "retention" in due_jobs(last, schedule, pass_ms + 120_000)
    assert set(due_jobs(last, schedule, pass_ms + 300_000)) >= {"vacuum", "cleanup-logs", "merge-segments", "ttl"}
    assert "retention" not in due_jobs(last, schedule, pass_ms + 60_000)  # not a pass early
