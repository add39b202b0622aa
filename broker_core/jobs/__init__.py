"""Reconcile jobs: retention, message TTL, backlog quotas, segment merging, log checkpoints, log cleanup
and vacuum.

Each job is a library function taking a ``Broker`` and a topic (or a ``tenant/namespace``), with
keyword-only options, returning a ``JobSummary`` of per-internal-topic results.  Every change goes
through the same put-if-absent commits producers and consumers use, so a job is safe to run beside
them, safe to kill at any instant, and idempotent (``DESIGN.md`` section 7).

``compaction`` (topic compaction: the compacted view beside each internal topic) is one of them.

May import: everything up to ``broker`` (base modules, ``storage``, ``log``, ``topic``, ``producer``,
``subscription``, ``broker``).  Never ``client``, ``asyncio`` or the CLI.
"""

from __future__ import annotations

from broker_core.jobs.backlog import (
    BacklogEviction,
    BacklogStatus,
    backlog_status,
    enforce_backlog_quota,
)
from broker_core.jobs.backlog_guard import BacklogQuotaGuard
from broker_core.jobs.log_maintenance import (
    CheckpointResult,
    CleanupResult,
    VacuumResult,
    checkpoint,
    cleanup_logs,
    vacuum,
)
from broker_core.jobs.merge_segments import MergedRun, MergeResult, merge_segments
from broker_core.jobs.progress import MIN_SAFE_AGE_MS, JobProgress, JobSummary, ProgressListener, reporting_progress
from broker_core.jobs.retention import RetentionLimits, RetentionResult, run_retention
from broker_core.jobs.ttl import SubscriptionExpiry, TtlResult, run_ttl

__all__ = [
    "MIN_SAFE_AGE_MS",
    "BacklogEviction",
    "BacklogQuotaGuard",
    "BacklogStatus",
    "CheckpointResult",
    "CleanupResult",
    "JobProgress",
    "JobSummary",
    "MergeResult",
    "MergedRun",
    "ProgressListener",
    "RetentionLimits",
    "RetentionResult",
    "SubscriptionExpiry",
    "TtlResult",
    "VacuumResult",
    "backlog_status",
    "checkpoint",
    "cleanup_logs",
    "enforce_backlog_quota",
    "merge_segments",
    "reporting_progress",
    "run_retention",
    "run_ttl",
    "vacuum",
]
