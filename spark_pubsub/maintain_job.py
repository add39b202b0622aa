"""The maintenance pass on Spark (``spark_pubsub.jobs maintain``): topics spread over executors.

The driver does what must happen once: it takes the root's maintenance lease (and renews it on a
thread while the Spark job runs), reads the durable last-run times, decides per topic which jobs are
due (by one "now" for every task) and, once the tasks are back, records the new last-run times.  Each
task runs the due jobs of its topics with ``broker_core.jobs.maintain.run_topic``, exactly as the
local pass does, so a failing topic is reported in its entry and the others go on.

A renewal that fails (the driver stalled past the lease and another runner took over) marks the
summary ``lease-lost`` and records nothing; the tasks already started finish their current jobs.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from broker_core.broker.broker import Broker
from broker_core.clock import ManualClock
from broker_core.jobs.maintain import (
    MaintenanceSchedule,
    due_jobs,
    list_topics,
    pass_summary,
    read_last_runs,
    record_last_runs,
    run_topic,
    state_store,
)
from broker_core.jobs.maintenance_lease import DEFAULT_LEASE_MS, MaintenanceLease

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _task_runner(root: str, storage: Mapping[str, str] | None, schedule: MaintenanceSchedule, execute: bool,
                 now_ms: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function: each input row is a topic and its due jobs, each output row its report."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        broker = Broker.for_url(root, storage_options=storage)
        for batch in batches:
            topics = batch.column(0).to_pylist()
            reports = []
            for topic, jobs in zip(topics, batch.column(1).to_pylist(), strict=True):
                report, ran = run_topic(broker, topic, json.loads(jobs), schedule=schedule, execute=execute,
                                        clock=ManualClock(now_ms))
                reports.append(json.dumps({"report": report, "ran": ran}, default=str))
            yield pa.RecordBatch.from_arrays([pa.array(topics, pa.string()), pa.array(reports, pa.string())],
                                             names=["topic", "result"])

    return run


class _Renewer:
    """Renews the lease every third of its length until stopped; remembers a failed renewal."""

    def __init__(self, lease: MaintenanceLease) -> None:
        self.lease = lease
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="pubsub-maintain-lease")

    def __enter__(self) -> _Renewer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.lease.lease_ms / 3000):
            if not self.lease.renew():
                self.lost = True
                return


def maintain_with_spark(spark: SparkSession, root: str, *, namespaces: Sequence[str] | None = None,
                        execute: bool = False, parallelism: int | None = None,
                        storage_options: Mapping[str, str] | None = None, lease_ms: int = DEFAULT_LEASE_MS,
                        lease: MaintenanceLease | None = None) -> dict[str, Any]:
    """One maintenance pass with the topics spread over Spark tasks; the summary of
    ``run_maintenance_pass`` (``status`` ``done``, ``standby`` or ``lease-lost``)."""
    from spark_pubsub.compaction_job import default_parallelism

    started = time.monotonic()
    broker = Broker.for_url(root, storage_options=storage_options)
    lease = lease if lease is not None else MaintenanceLease(broker.io, lease_ms=lease_ms)
    now_ms = lease.clock.now_ms()
    out: dict[str, Any] = {"holder": lease.holder, "startedMs": now_ms, "execute": execute, "topics": []}
    topics = list_topics(broker, namespaces)
    if not lease.acquire():
        current = lease.current()
        return {**out, "status": "standby", "leader": current.holder, "leaderExpiresMs": current.expires_ms,
                "elapsedMs": 0.0}
    schedule = MaintenanceSchedule.from_config(broker)
    state = state_store(broker)
    last_runs = read_last_runs(state)
    work = [(t, json.dumps(jobs)) for t in topics if (jobs := due_jobs(last_runs.get(t, {}), schedule, now_ms))]
    rows: list[Any] = []
    with _Renewer(lease) as renewer:
        if work:
            slices = max(1, min(len(work), parallelism or default_parallelism(spark)))
            frame = spark.createDataFrame(work, "topic string, jobs string").repartition(slices)
            runner = _task_runner(root, storage_options, schedule, execute, now_ms)
            rows = frame.mapInArrow(runner, "topic string, result string").collect()
    results = sorted((json.loads(row["result"]) for row in rows), key=lambda r: r["report"]["topic"])
    out["topics"] = [r["report"] for r in results]
    if renewer.lost or not lease.renew():
        out["status"] = "lease-lost"
    else:
        out["status"] = "done"
        if execute:
            record_last_runs(state, {r["report"]["topic"]: r["ran"] for r in results if r["ran"]},
                             pass_summary(out, lease.clock.now_ms()), keep_only=topics if namespaces is None else None)
        lease.release()
    out["elapsedMs"] = (time.monotonic() - started) * 1000
    return out


__all__ = ["maintain_with_spark"]
