"""The executor side of the source: an input partition and how to read it as Arrow batches."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from broker_core.scan import ScanTask, scan
from spark_pubsub.schema import to_source_batch


@dataclass
class ScanPartition(InputPartition):
    """One Spark task: scan tasks over one or more internal topics (plain, picklable values)."""

    tasks: list[ScanTask]
    include_headers: bool

    def __init__(self, tasks: list[ScanTask], *, include_headers: bool = False) -> None:
        super().__init__(None)
        self.tasks = tasks
        self.include_headers = include_headers


def read_scan_partition(partition: ScanPartition) -> Iterator[pa.RecordBatch]:
    """Yield ``SOURCE_SCHEMA`` record batches for every scan task of the partition, in order."""
    for task in partition.tasks:
        for chunk in scan(task):
            counts = None
            if task.redelivery:
                counts = np.fromiter((task.redelivery.get(int(o), 0) for o in chunk.offsets), dtype=np.int32,
                                     count=len(chunk.offsets))
            yield to_source_batch(
                chunk.rows, topic=task.topic, partition=task.partition, offsets=chunk.offsets,
                ledger_id=chunk.ledger_id, entry_ids=chunk.entry_ids, batch_indexes=chunk.batch_indexes,
                redelivery_counts=counts, include_headers=partition.include_headers,
            )


__all__ = ["ScanPartition", "read_scan_partition"]
