"""``spark.read.format("pubsub")``: a bounded read between starting and ending offsets or times."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from broker_core.errors import InvalidConfiguration
from spark_pubsub.offsets import PartitionPlanner, parse_offsets_spec, parse_starting_offsets, read_plan
from spark_pubsub.options import SourceOptions
from spark_pubsub.scan_partition import ScanPartition, read_scan_partition, with_typed
from spark_pubsub.worker_import import WorkerImportable


class PubSubBatchReader(DataSourceReader, metaclass=WorkerImportable):
    """Reads every live message between ``startingOffsets`` (default earliest) and ``endingOffsets``
    (default latest), or between ``startingTimestamp`` and ``endingTimestamp`` (publish time)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.planner, start, end = bounded_range(options)
        self.typed = read_plan(options)
        self.start: dict[str, Any] = {"v": 1, "parts": start}
        self.end: dict[str, Any] = {"v": 1, "parts": end}

    def partitions(self) -> list[InputPartition]:
        return with_typed(self.planner.plan(self.start, self.end), self.typed)

    def read(self, partition: InputPartition) -> Any:
        if not isinstance(partition, ScanPartition):
            # nothing to read: pyspark replaces an empty partitions() list by one InputPartition(None)
            return iter(())
        return read_scan_partition(partition)


def bounded_range(options: SourceOptions) -> tuple[PartitionPlanner, dict[str, int], dict[str, int]]:
    """The planner and the ``[start, end)`` offsets per internal topic of a bounded read.

    Shared by ``spark.read.format("pubsub")`` and the native scan (``spark_pubsub.native_scan``), so
    both accept, refuse and resolve the very same options.
    """
    for name, value in (("subscription", options.subscription), ("maxMessagesPerTrigger",
                        options.max_messages_per_trigger), ("minMessagesPerTrigger",
                        options.min_messages_per_trigger), ("maxBytesPerTrigger", options.max_bytes_per_trigger)):
        if value:
            raise InvalidConfiguration(
                f"option {name} applies to streaming queries (spark.readStream), not to spark.read",
                option=name,
            )
    if options.emit != "messages":
        raise InvalidConfiguration(
            f"option emit={options.emit} applies to streaming queries (spark.readStream), not to spark.read: "
            "a bounded read is already one range (read it with spark_pubsub.read_topic)", option="emit",
        )
    planner = PartitionPlanner(options)
    planner.require_topics()  # a read never creates a topic (DECISIONS D57)
    start = parse_starting_offsets(planner, options, default="earliest")
    if options.ending_timestamp is not None:
        if options.ending_offsets is not None:
            raise InvalidConfiguration("give endingOffsets or endingTimestamp, not both", option="endingTimestamp")
        end = planner.timestamp_positions(options.ending_timestamp)
    else:
        end = parse_offsets_spec(planner, options.ending_offsets or "latest", "endingOffsets")
    return planner, start, end


__all__ = ["PubSubBatchReader", "bounded_range"]
