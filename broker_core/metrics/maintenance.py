"""The maintenance pass's results as metrics: per job the last time it ran, the last pass's outcome,
and who holds the maintenance lease.

They come from what ``pubsub maintain`` commits (``_pubsub/maintenance/state`` and ``.../lease``,
docs/PROTOCOL.md), not from the runner's process, so any exporter of the root sees them.  A pass runs
every few minutes, so both documents are re-read only with the inventory (every
``inventory_refresh_s``): a warm scrape costs no request for them (D177).

Label cardinality stays per job, not per topic: the state holds a time per topic and job, but the
dashboard's question is "is maintenance keeping up", which the oldest and newest times per job answer.
"""

from __future__ import annotations

import time
from typing import Any

from broker_core.broker.broker import Broker
from broker_core.jobs.maintain import JOBS, read_last_pass, read_last_runs, state_store
from broker_core.jobs.maintenance_lease import LEASE_DIR
from broker_core.log.state_store import VersionedState

LABELS = ["cluster"]
GAUGES: dict[str, str] = {
    "pubsub_maintenance_last_run_timestamp_seconds":
        "Newest time a maintenance job ran on any topic (label job)",
    "pubsub_maintenance_oldest_run_timestamp_seconds":
        "Oldest last-run time of a maintenance job over the topics it ran on (label job)",
    "pubsub_maintenance_topics": "Topics a maintenance job has ever run on (label job)",
    "pubsub_maintenance_last_pass_end_timestamp_seconds": "When the last executed maintenance pass ended",
    "pubsub_maintenance_last_pass_duration_seconds": "How long the last executed maintenance pass took",
    "pubsub_maintenance_last_pass_topics": "Topics the last executed maintenance pass ran jobs on",
    "pubsub_maintenance_last_pass_jobs": "Jobs the last executed maintenance pass ran (failed ones included)",
    "pubsub_maintenance_last_pass_errors": "Jobs that failed in the last executed maintenance pass",
    "pubsub_maintenance_last_pass_completed": "1 when the last executed pass ran to its end, 0 when it lost the lease",
    "pubsub_maintenance_leader_info": "1 for the holder of a live maintenance lease (label holder)",
    "pubsub_maintenance_lease_expiry_timestamp_seconds": "When the maintenance lease expires (0: not held)",
}
JOB_GAUGES = ("pubsub_maintenance_last_run_timestamp_seconds", "pubsub_maintenance_oldest_run_timestamp_seconds",
              "pubsub_maintenance_topics")

Row = tuple[tuple[str, ...], float]


class MaintenanceReader:
    """Reads the maintenance state and lease, at most once per ``refresh_s`` (monotonic seconds)."""

    def __init__(self, broker: Broker, *, refresh_s: float = 60.0) -> None:
        self.refresh_s = refresh_s
        self._state = state_store(broker)
        self._lease = VersionedState(broker.io, LEASE_DIR, keep_versions=20)
        self._read_s: float | None = None
        self._runs: dict[str, dict[str, int]] = {}
        self._last_pass: dict[str, Any] | None = None
        self._lease_doc: dict[str, Any] = {}

    def _refresh(self) -> None:
        now = time.monotonic()
        if self._read_s is not None and now - self._read_s < self.refresh_s:
            return
        self._runs = read_last_runs(self._state)
        self._last_pass = read_last_pass(self._state)
        self._lease_doc = self._lease.latest()[1] or {}
        self._read_s = now

    def rows(self, cluster: str, now_ms: int) -> dict[str, tuple[list[str], list[Row]]]:
        """Family name -> (label names, rows); a root that never ran a pass has only the lease's zeros."""
        self._refresh()
        out: dict[str, tuple[list[str], list[Row]]] = {name: (LABELS, []) for name in GAUGES}
        for name in JOB_GAUGES:
            out[name] = ([*LABELS, "job"], [])
        for job in JOBS:
            times = [jobs[job] for jobs in self._runs.values() if job in jobs]
            if not times:
                continue
            key = (cluster, job)
            out["pubsub_maintenance_last_run_timestamp_seconds"][1].append((key, max(times) / 1000))
            out["pubsub_maintenance_oldest_run_timestamp_seconds"][1].append((key, min(times) / 1000))
            out["pubsub_maintenance_topics"][1].append((key, len(times)))
        last = self._last_pass
        if last is not None:
            ended = int(last.get("endedMs") or 0)
            for name, value in (
                ("pubsub_maintenance_last_pass_end_timestamp_seconds", ended / 1000),
                ("pubsub_maintenance_last_pass_duration_seconds",
                 max(0, ended - int(last.get("startedMs") or ended)) / 1000),
                ("pubsub_maintenance_last_pass_topics", int(last.get("topics") or 0)),
                ("pubsub_maintenance_last_pass_jobs", int(last.get("jobsRun") or 0)),
                ("pubsub_maintenance_last_pass_errors", int(last.get("errors") or 0)),
                ("pubsub_maintenance_last_pass_completed", 1 if last.get("status") == "done" else 0),
            ):
                out[name][1].append(((cluster,), value))
        holder = self._lease_doc.get("holder")
        expires_ms = int(self._lease_doc.get("expiresMs") or 0)
        live = isinstance(holder, str) and expires_ms > now_ms
        if live:
            out["pubsub_maintenance_leader_info"] = ([*LABELS, "holder"], [((cluster, str(holder)), 1)])
        else:
            out["pubsub_maintenance_leader_info"] = ([*LABELS, "holder"], [])
        out["pubsub_maintenance_lease_expiry_timestamp_seconds"][1].append(
            ((cluster,), expires_ms / 1000 if live else 0.0))
        return out


__all__ = ["GAUGES", "MaintenanceReader"]
