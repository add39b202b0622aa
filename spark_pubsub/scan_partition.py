"""The executor side of the source: an input partition and how to read it as Arrow batches."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from broker_core.topic.scan import ScanTask, scan
from spark_pubsub.schema import to_source_batch
from spark_pubsub.typed_values import TypedRead


@dataclass
class ScanPartition(InputPartition):
    """One Spark task: scan tasks over one or more internal topics (plain, picklable values)."""

    tasks: list[ScanTask]
    include_headers: bool
    typed: TypedRead | None = None  # set by the readers for a typed topic (spark_pubsub/typed_values.py)

    def __init__(self, tasks: list[ScanTask], *, include_headers: bool = False,
                 typed: TypedRead | None = None) -> None:
        super().__init__(None)
        self.tasks = tasks
        self.include_headers = include_headers
        self.typed = typed


def read_scan_partition(partition: ScanPartition) -> Iterator[pa.RecordBatch]:
    """Yield ``SOURCE_SCHEMA`` record batches for every scan task of the partition, in order."""
    for task in partition.tasks:
        for chunk in scan(task):
            counts = None
            if task.redelivery:
                counts = np.fromiter((task.redelivery.get(int(o), 0) for o in chunk.offsets), dtype=np.int32,
                                     count=len(chunk.offsets))
            batch = to_source_batch(
                chunk.rows, topic=task.topic, partition=task.partition, offsets=chunk.offsets,
                ledger_id=chunk.ledger_id, entry_ids=chunk.entry_ids, batch_indexes=chunk.batch_indexes,
                redelivery_counts=counts, include_headers=partition.include_headers,
            )
            yield batch if partition.typed is None else partition.typed.apply(batch, chunk.rows, task.topic)


def with_typed(partitions: list[ScanPartition], typed: TypedRead | None) -> list[InputPartition]:
    """The planned partitions, carrying the typed read (if any) to the executors."""
    for partition in partitions:
        partition.typed = typed
    return list(partitions)


__all__ = ["ScanPartition", "read_scan_partition", "with_typed"]
