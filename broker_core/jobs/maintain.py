"""One maintenance pass: every job that is due, on every persistent topic, under a leader lease.

A Pulsar broker runs retention, message expiry, backlog quotas and compaction checks on timers for the
topics it owns.  Here there is no broker, so ``run_maintenance_pass`` is that timer loop's body: it
takes the root's maintenance lease (``maintenance_lease``), lists the topics, and for each topic runs
the jobs whose interval has passed since they last ran on it.  Last-run times are stored durably in
``_pubsub/maintenance/state`` (a ``VersionedState``), so a restarted runner, or another replica that
takes the lease over, knows what is due rather than starting every clock afresh.

The intervals keep Pulsar's ``broker.conf`` names and defaults where Pulsar has them (``BrokerConfig``:
``retentionCheckIntervalInSeconds`` 120, ``messageExpiryCheckIntervalInMinutes`` 5,
``backlogQuotaCheckIntervalInSeconds`` 60, ``brokerServiceCompactionMonitorIntervalInSeconds`` 60 with
the ``compactionThreshold`` policy, whose default is ``brokerServiceCompactionThresholdInBytes``, 0 = off);
the log jobs Pulsar does not have use
``MaintenanceSchedule``'s documented defaults.  Like every destructive job, a pass is a dry run unless
``execute=True``: a dry run reports what each due job would do and records no last-run time.

A job that fails on one topic is recorded in that topic's entry and the pass goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from broker_core.broker.broker import Broker
from broker_core.clock import SYSTEM_CLOCK, Clock
from broker_core.errors import InvalidConfiguration, NamespaceNotFound
from broker_core.jobs.backlog import enforce_backlog_quota
from broker_core.jobs.compaction import compact_topic, plan_compaction
from broker_core.jobs.log_maintenance import checkpoint, cleanup_logs, vacuum
from broker_core.jobs.maintenance_lease import MaintenanceLease
from broker_core.jobs.merge_segments import merge_segments
from broker_core.jobs.progress import MIN_SAFE_AGE_MS
from broker_core.jobs.retention import run_retention
from broker_core.jobs.ttl import run_ttl
from broker_core.log.state_store import Document, VersionedState
from broker_core.naming import NamespaceName, TopicName

STATE_DIR = "_pubsub/maintenance/state"

RECORD_EVERY_MS = 10_000
"""How often a pass commits the last-run times it collected (and at its end): one commit per topic would
rewrite the whole document per topic; a leader killed between two commits only makes the next leader
re-run that stretch's jobs, which are idempotent."""

JOBS = ("retention", "ttl", "backlog", "compaction", "merge-segments", "checkpoint", "cleanup-logs", "vacuum")
"""Every job a pass runs, in the order it runs them on one topic (retention before vacuum frees files)."""


MIN_GRACE_MS = 60_000
"""The shortest removed-segment grace and log-history retention the schedule accepts (one minute): a
reader reads a file within moments of the poll that named it, and one that is slower re-reads the log
(D181), but a grace shorter than one Spark micro-batch's scan would make such queries restart."""


@dataclass(frozen=True, slots=True)
class MaintenanceSchedule:
    """How often each job runs on a topic, and the log jobs' ages.

    The first four intervals come from ``BrokerConfig`` (``from_config``); the rest are ours:
    segments are merged every 5 minutes (a trickle of small commits must not pile up segments), a
    checkpoint is written every 10 minutes, and log history and removed files are cleaned up every 5
    minutes.  Storage stays bounded as in Pulsar, which deletes a ledger once retention no longer needs
    it: a removed segment's file goes ``removedSegmentGracePeriodInSeconds`` (10 min) after its remove
    was committed, and log history older than ``logHistoryRetentionInSeconds`` (10 min) goes (D180).
    Files no commit ever named keep the one-hour floor (``orphan_min_age_ms``): a staged write may still
    commit them.
    """

    retention_ms: int = 120_000
    ttl_ms: int = 5 * 60_000
    backlog_ms: int = 60_000
    compaction_ms: int = 60_000
    merge_ms: int = 5 * 60_000
    checkpoint_ms: int = 10 * 60_000
    cleanup_ms: int = 5 * 60_000
    vacuum_ms: int = 5 * 60_000
    log_retention_ms: int = 10 * 60_000
    vacuum_min_age_ms: int = 10 * 60_000

    def __post_init__(self) -> None:
        for name in ("log_retention_ms", "vacuum_min_age_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < MIN_GRACE_MS:
                raise InvalidConfiguration(
                    f"maintenance {name} must be an int of at least {MIN_GRACE_MS} ms (one minute), got {value!r}",
                    argument=name)

    @property
    def orphan_min_age_ms(self) -> int:
        """How old a file no commit names must be before vacuum deletes it: never under one hour."""
        return max(MIN_SAFE_AGE_MS, self.vacuum_min_age_ms)

    @classmethod
    def from_config(cls, broker: Broker, **overrides: int) -> MaintenanceSchedule:
        c = broker.config
        values: dict[str, int] = {
            "retention_ms": c.retention_check_interval_in_seconds * 1000,
            "ttl_ms": c.message_expiry_check_interval_in_minutes * 60_000,
            "backlog_ms": c.backlog_quota_check_interval_in_seconds * 1000,
            "compaction_ms": c.broker_service_compaction_monitor_interval_in_seconds * 1000,
            "log_retention_ms": c.log_history_retention_in_seconds * 1000,
            "vacuum_min_age_ms": c.removed_segment_grace_period_in_seconds * 1000,
        }
        values.update(overrides)
        return cls(**values)

    def interval_ms(self, job: str) -> int:
        return {
            "retention": self.retention_ms, "ttl": self.ttl_ms, "backlog": self.backlog_ms,
            "compaction": self.compaction_ms, "merge-segments": self.merge_ms,
            "checkpoint": self.checkpoint_ms, "cleanup-logs": self.cleanup_ms, "vacuum": self.vacuum_ms,
        }[job]


JobObserver = Callable[[str, str, str], None]
"""Called with ``("start" | "end", topic, job)`` around each job (tests record overlaps with it)."""


def list_topics(broker: Broker, namespaces: Sequence[str] | None) -> list[str]:
    """Every persistent topic (partitioned topics by their name) of ``namespaces``, or of the root.

    Raises:
        NamespaceNotFound: a named namespace does not exist.
    """
    if namespaces is None:
        names = [ns for tenant in broker.admin.list_tenants() for ns in broker.admin.list_namespaces(tenant)]
    else:
        names = [str(NamespaceName.parse(ns)) for ns in namespaces]
        for ns in names:
            if not broker.admin.namespace_exists(NamespaceName.parse(ns)):
                raise NamespaceNotFound(f"namespace {ns} does not exist; list them with `pubsub namespaces "
                                        "list TENANT`", namespace=ns)
    return [t for ns in names for t in broker.admin.list_topics(ns) if TopicName.parse(t).is_persistent]


DUE_SLACK = 20
"""A job is due once all but 1/20 of its interval has passed.  What is recorded is the time the job
started, a little after the pass that decided it began; without slack, the pass exactly one interval
later finds it a few milliseconds short and the job waits one more pass (retention every 3 minutes
instead of 2 under `--every 1m`, which let a trickled topic reach 180 live segments; D184)."""


def due_jobs(last_run: dict[str, int], schedule: MaintenanceSchedule, now_ms: int) -> list[str]:
    """The jobs whose interval has passed since their last run, less ``1/DUE_SLACK`` of it (never run: due)."""
    def due(job: str) -> bool:
        interval = schedule.interval_ms(job)
        return now_ms - last_run.get(job, -(2**62)) >= interval - interval // DUE_SLACK

    return [job for job in JOBS if due(job)]


def compaction_backlog_bytes(broker: Broker, topic: str) -> int:
    """Bytes of the topic's segments not yet folded into its compacted view (all partitions)."""
    total = 0
    for part in broker.partitions(topic, auto_create=False):
        log = broker.topic_log(part, create=False)
        if not log.exists():
            continue
        plan = plan_compaction(log, str(part))
        if plan is not None:
            total += sum(s.size_bytes for s in plan.snapshot.segments
                         if s.end_offset > plan.start and s.base_offset < plan.horizon)
    return total


def run_job(broker: Broker, topic: str, job: str, *, schedule: MaintenanceSchedule, execute: bool,
            now_ms: int) -> dict[str, Any]:
    """Run one job on one topic; its summary as JSON-able data."""
    dry = not execute
    if job == "retention":
        return _summary(run_retention(broker, topic, dry_run=dry, now_ms=now_ms))
    if job == "ttl":
        return _summary(run_ttl(broker, topic, dry_run=dry, now_ms=now_ms))
    if job == "backlog":
        return _summary(enforce_backlog_quota(broker, topic, dry_run=dry, now_ms=now_ms))
    if job == "compaction":
        threshold = broker.policies.effective(TopicName.parse(topic)).compaction_threshold
        if threshold <= 0:
            return {"skipped": "compactionThreshold is 0 (off)"}
        pending = compaction_backlog_bytes(broker, topic)
        if pending < threshold:
            return {"skipped": f"{pending} bytes since the last compaction, threshold {threshold}"}
        result: dict[str, Any] = compact_topic(broker, topic, dry_run=dry).to_json()
        return result
    if job == "merge-segments":
        return _summary(merge_segments(broker, topic, dry_run=dry, now_ms=now_ms))
    if job == "checkpoint":
        if dry:
            return {"skipped": "dry run (a checkpoint writes a file)"}
        return _summary(checkpoint(broker, topic))
    if job == "cleanup-logs":
        # the schedule's ages are checked (``MIN_GRACE_MS``) and safe for readers (D180, D181)
        return _summary(cleanup_logs(broker, topic, retention_ms=schedule.log_retention_ms, dry_run=dry,
                                     now_ms=now_ms, enforce_min_age=False))
    if job == "vacuum":
        return _summary(vacuum(broker, topic, min_age_ms=schedule.vacuum_min_age_ms, dry_run=dry, now_ms=now_ms,
                               enforce_min_age=False, orphan_min_age_ms=schedule.orphan_min_age_ms))
    raise InvalidConfiguration(f"unknown maintenance job {job!r}; one of {', '.join(JOBS)}", argument="job")


def _summary(summary: Any) -> dict[str, Any]:
    return {"changed": bool(summary.changed),
            "results": [{"topic": r.topic, "changed": bool(r.changed), "describe": r.describe()}
                        for r in summary.results]}


def run_topic(broker: Broker, topic: str, jobs: Iterable[str], *, schedule: MaintenanceSchedule, execute: bool,
              clock: Clock, before_job: Callable[[], bool] | None = None,
              observer: JobObserver | None = None) -> tuple[dict[str, Any], dict[str, int]]:
    """Run ``jobs`` on one topic, each isolated from the others' failures.

    ``before_job`` is asked before each job (the lease renewal); False stops the topic there.
    Returns the topic's report and the jobs' start times (the new last-run times).
    """
    report: dict[str, Any] = {"topic": topic, "jobs": {}, "errors": {}}
    ran: dict[str, int] = {}
    for job in jobs:
        if before_job is not None and not before_job():
            report["stopped"] = "lease lost"
            break
        now = clock.now_ms()
        if observer is not None:
            observer("start", topic, job)
        try:
            report["jobs"][job] = run_job(broker, topic, job, schedule=schedule, execute=execute, now_ms=now)
            ran[job] = now
        except Exception as exc:  # one topic's failure must not stop the pass
            report["errors"][job] = f"{type(exc).__name__}: {exc}"
            ran[job] = now  # retried at its next interval, not in a tight loop
        finally:
            if observer is not None:
                observer("end", topic, job)
    return report, ran


def state_store(broker: Broker) -> VersionedState:
    """The durable last-run times, ``{"lastRun": {topic: {job: epoch ms}}, "lastPass": {...}}``
    (``lastPass``: the last executed pass's summary, ``pass_summary``; docs/PROTOCOL.md)."""
    return VersionedState(broker.io, STATE_DIR, keep_versions=20)


def read_last_runs(state: VersionedState) -> dict[str, dict[str, int]]:
    _, doc = state.latest()
    last = (doc or {}).get("lastRun") or {}
    return {t: {j: int(ms) for j, ms in jobs.items()} for t, jobs in last.items()}


def read_last_pass(state: VersionedState) -> dict[str, Any] | None:
    """The last executed pass's summary (``pass_summary``), None before the first one recorded it."""
    _, doc = state.latest()
    last = (doc or {}).get("lastPass")
    return last if isinstance(last, dict) else None


def pass_summary(out: dict[str, Any], ended_ms: int) -> dict[str, Any]:
    """What the state keeps of an executed pass, for the exporter: its end, outcome and counts."""
    topics = out["topics"]
    return {"endedMs": ended_ms, "startedMs": out["startedMs"], "holder": out["holder"], "status": out["status"],
            "topics": len(topics), "jobsRun": sum(len(t["jobs"]) + len(t["errors"]) for t in topics),
            "errors": sum(len(t["errors"]) for t in topics)}


def record_last_runs(state: VersionedState, runs: dict[str, dict[str, int]],
                     last_pass: dict[str, Any] | None = None, *, keep_only: Iterable[str] | None = None) -> None:
    """Merge ``runs`` into the stored last-run times, and replace ``lastPass`` when given (one
    put-if-absent commit); other keys of the document are kept.  ``keep_only``: every topic of the root
    (a pass over the whole root): the entries of other topics (deleted ones) are dropped, so the document
    does not grow with every topic ever created (D182)."""
    if not runs and last_pass is None:
        return
    kept = None if keep_only is None else set(keep_only)

    def merge(doc: Document | None) -> Document:
        last = dict((doc or {}).get("lastRun") or {})
        if kept is not None:
            last = {topic: jobs for topic, jobs in last.items() if topic in kept}
        for topic, jobs in runs.items():
            last[topic] = {**last.get(topic, {}), **jobs}
        merged = {**(doc or {}), "lastRun": last}
        if last_pass is not None:
            merged["lastPass"] = last_pass
        return merged

    state.update(merge)


def run_maintenance_pass(
    broker: Broker,
    *,
    namespaces: Sequence[str] | None = None,
    execute: bool = False,
    clock: Clock = SYSTEM_CLOCK,
    state: VersionedState | None = None,
    lease: MaintenanceLease | None = None,
    schedule: MaintenanceSchedule | None = None,
    observer: JobObserver | None = None,
) -> dict[str, Any]:
    """One pass over ``namespaces`` (default: every namespace of the root).

    Args:
        execute: apply the changes; by default a dry run that records nothing.
        clock: decides what is due and the lease's expiry.
        state: where last-run times live (default ``_pubsub/maintenance/state``).
        lease: this runner's lease handle (default: a new holder id); a pass that cannot take it
            returns ``{"status": "standby", ...}`` and runs nothing.
        schedule: the intervals (default: from the broker config).
        observer: told of each job's start and end.

    Returns:
        ``{"status": "done" | "standby" | "lease-lost", "holder", "startedMs", "elapsedMs", "execute",
        "topics": [{"topic", "jobs": {job: summary}, "errors": {job: message}}]}``.
    """
    if not isinstance(execute, bool):
        raise InvalidConfiguration(f"argument 'execute' must be True or False, got {execute!r}", argument="execute")
    lease = lease if lease is not None else MaintenanceLease(broker.io, clock=clock)
    schedule = schedule if schedule is not None else MaintenanceSchedule.from_config(broker)
    state = state if state is not None else state_store(broker)
    started = time.perf_counter()
    out: dict[str, Any] = {"holder": lease.holder, "startedMs": clock.now_ms(), "execute": execute, "topics": []}
    topics = list_topics(broker, namespaces)
    if not lease.acquire():
        current = lease.current()
        return {**out, "status": "standby", "leader": current.holder, "leaderExpiresMs": current.expires_ms,
                "elapsedMs": 0.0}
    out["status"] = "done"
    pending: dict[str, dict[str, int]] = {}
    flushed_ms = clock.now_ms()
    try:
        last_runs = read_last_runs(state)
        for topic in topics:
            jobs = due_jobs(last_runs.get(topic, {}), schedule, clock.now_ms())
            if not jobs:
                continue
            report, ran = run_topic(broker, topic, jobs, schedule=schedule, execute=execute, clock=clock,
                                    before_job=lease.renew_if_due, observer=observer)
            out["topics"].append(report)
            if execute:
                pending[topic] = ran
            if "stopped" in report:
                out["status"] = "lease-lost"
                break
            if clock.now_ms() - flushed_ms >= RECORD_EVERY_MS:
                record_last_runs(state, pending)
                pending, flushed_ms = {}, clock.now_ms()
        whole = out["status"] == "done" and namespaces is None  # every topic of the root was listed
        record_last_runs(state, pending, pass_summary(out, clock.now_ms()) if execute else None,
                         keep_only=topics if whole else None)
    finally:
        if out["status"] == "done":
            lease.release()
    out["elapsedMs"] = (time.perf_counter() - started) * 1000
    return out


__all__ = [
    "DUE_SLACK",
    "JOBS",
    "MIN_GRACE_MS",
    "STATE_DIR",
    "JobObserver",
    "MaintenanceSchedule",
    "compaction_backlog_bytes",
    "due_jobs",
    "list_topics",
    "pass_summary",
    "read_last_pass",
    "read_last_runs",
    "record_last_runs",
    "run_job",
    "run_maintenance_pass",
    "run_topic",
    "state_store",
]
