"""``spark.readStream.format("pubsub")``: micro-batches over topics, optionally as a subscription.

Offsets are JSON dicts of plain values (``docs/SPARK.md``):

- *range mode* (no subscription, or an Exclusive/Failover one): ``{"v": 1, "parts": {internal topic:
  next offset}}``; a batch is every live message in ``[start, end)`` of each internal topic.
- *claim mode* (Shared/Key_Shared subscription): ``{"v": 1, "seq": n, "clock": ms, "claims":
  {internal topic: [[from, to], ...]}}``; the driver claims messages in the subscription's cursor
  (delayed messages only once due at ``clock``, keys per Key_Shared rules) and the batch is exactly
  the claimed ranges.  Either way a batch is a pure function of its offsets and the log, so a
  replay after a failure reads the same rows.

A batch is acknowledged in the cursor (cumulatively in range mode, the claimed ranges in claim
mode) by ``commit(end)`` and, first, by ``latestOffset(start)``: Spark plans a batch only once the
previous one (ending at ``start``) completed, while its ``commit`` arrives only when a further batch
is planned.  So an AvailableNow run, which plans once more to find it is done, leaves nothing
unacknowledged.  That call also gives back (as redeliveries) any other claims the consumer still
holds: those of a run that died after claiming.  ``stop()`` (leave the subscription; Shared and
Key_Shared only where the query holds no claims) runs when Spark ends the query's Python process;
after a crash the lease lapses.
A Failover query reads only the partitions it is the active consumer of.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import uuid
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from broker_core.errors import InvalidConfiguration
from spark_pubsub.offsets import (
    PartitionPlanner,
    parse_starting_offsets,
    read_plan,
)
from spark_pubsub.options import SourceOptions
from spark_pubsub.scan_partition import ScanPartition, read_scan_partition, with_typed
from spark_pubsub.stream_ranges import RangesPartition, ranges_partitions, read_ranges_partition
from spark_pubsub.worker_import import WorkerImportable


def _stop_on_sigterm() -> None:
    """Let ``stop()`` run when Spark stops the query.

    Spark ends a query's driver-side Python process (pyspark's streaming source runner) with SIGTERM
    and never calls ``stop()`` itself; the runner only calls it from a ``finally`` that SIGTERM's
    default action skips.  Raising ``SystemExit`` instead reaches that ``finally``, so an Exclusive or
    Failover query leaves its subscription at once rather than when its lease lapses (until then a
    restarted query, whose default consumerName is new, would be refused).  Only in that runner
    process, from its main thread, and only over the default action.
    """
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if not str(getattr(spec, "name", "")).endswith("python_streaming_source_runner"):
        return
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def _exit(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # Spark may signal twice: let stop() finish
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _exit)


class PubSubStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow, metaclass=WorkerImportable):
    """The driver-side stream reader (pickled to executors only for ``read``)."""

    def __init__(self, options: SourceOptions) -> None:
        for name, value in (("endingOffsets", options.ending_offsets),
                            ("endingTimestamp", options.ending_timestamp)):
            if value is not None:
                raise InvalidConfiguration(
                    f"option {name} applies to batch reads (spark.read), not to streaming queries; "
                    "a stream has no end", option=name,
                )
        self.options = options
        self.planner = PartitionPlanner(options)
        self.ranges = options.emit == "ranges"  # batches as offset ranges (stream_ranges.py)
        self.typed = None if self.ranges else read_plan(options)
        self.claim_mode = options.subscription is not None and options.subscription_type in ("Shared", "Key_Shared")
        self.consumer_name = options.consumer_name or f"spark-{uuid.uuid4().hex[:10]}"
        self._target: dict[str, int] | None = None
        self._last_trigger_s = time.monotonic()
        self._renewer: threading.Thread | None = None
        self._stopping: threading.Event | None = None
        self._joined = False
        self._settled: dict[str, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_renewer"] = None
        state["_stopping"] = None
        return state

    # -- subscription membership (driver only) ------------------------------------------------------

    def _ensure_joined(self) -> None:
        if self._joined or self.options.subscription is None:
            return
        self.planner.join(self.consumer_name)
        self._joined = True
        _stop_on_sigterm()
        self._stopping = threading.Event()
        self._renewer = threading.Thread(target=self._renew_loop, name="pubsub-lease", daemon=True)
        self._renewer.start()

    def _renew_loop(self) -> None:
        assert self._stopping is not None
        period_s = self.planner.lease_ms / 3000
        while not self._stopping.wait(period_s):
            try:
                self.planner.renew(self.consumer_name)
            except Exception:  # storage hiccup: the next round retries, the lease has slack
                continue

    # -- offsets ------------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        self.planner.require_topics()
        self._ensure_joined()
        if self.claim_mode:
            return {"v": 1, "seq": 0, "clock": 0, "claims": {}}
        if self.options.subscription is not None and self.options.starting_offsets is None \
                and self.options.starting_timestamp is None:
            return {"v": 1, "parts": self.planner.cursor_positions(self.consumer_name)}
        return {"v": 1, "parts": parse_starting_offsets(self.planner, self.options, default="latest")}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.planner.latest_positions()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_messages_per_trigger:
            return ReadMaxRows(self.options.max_messages_per_trigger)
        if self.options.max_bytes_per_trigger:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        if self.options.min_messages_per_trigger:
            return ReadMinRows(self.options.min_messages_per_trigger)
        return ReadAllAvailable()

    def _budget(self, limit: ReadLimit) -> tuple[int | None, int | None, int | None]:
        """(max rows, max bytes, min rows) for this trigger; ReadAllAvailable ignores the options."""
        if isinstance(limit, ReadAllAvailable):
            return None, None, None
        max_rows = self.options.max_messages_per_trigger
        max_bytes = self.options.max_bytes_per_trigger
        min_rows = self.options.min_messages_per_trigger
        if isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        elif isinstance(limit, ReadMinRows):
            min_rows = limit.min_rows
        if min_rows and (time.monotonic() - self._last_trigger_s) * 1000 >= self.options.max_trigger_delay_ms:
            min_rows = None  # maxTriggerDelay passed: run with what there is
        if self._target is not None:
            min_rows = None  # Trigger.AvailableNow reads everything there is, then stops
        return max_rows, max_bytes, min_rows

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._ensure_joined()
        if self.options.subscription is not None and start != self._settled:
            # Spark plans a batch only after the previous one (ending at ``start``) completed, so
            # ``start`` is processed: acknowledge it now rather than wait for ``commit``, which
            # arrives only once a further batch is planned (never, for the last batch of a run).
            self.planner.settle(self.consumer_name, start)
            self._settled = start
        max_rows, max_bytes, min_rows = self._budget(limit)
        if self.claim_mode:
            end = self.planner.claim(self.consumer_name, start, max_rows=max_rows, max_bytes=max_bytes,
                                     min_rows=min_rows, target=self._target)
        else:
            end = self.planner.advance(start, max_rows=max_rows, max_bytes=max_bytes, min_rows=min_rows,
                                       target=self._target, consumer=self.consumer_name)
        if end != start:
            self._last_trigger_s = time.monotonic()
        return end

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return {"v": 1, "parts": self.planner.latest_positions()}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        if self.ranges:
            return ranges_partitions(self.planner, start, end)
        return with_typed(self.planner.plan(start, end), self.typed)

    def read(self, partition: InputPartition) -> Any:
        if self.ranges or isinstance(partition, RangesPartition):
            return read_ranges_partition(partition)
        assert isinstance(partition, ScanPartition)
        return read_scan_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._ensure_joined()
        self.planner.acknowledge(self.consumer_name, end)

    def stop(self) -> None:
        if self._stopping is not None:
            self._stopping.set()
        if self._joined:
            self.planner.stop(self.consumer_name)


__all__ = ["PubSubStreamReader"]
