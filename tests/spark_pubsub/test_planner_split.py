"""maxRecordsPerPartition cuts a big batch into offset slices (no SparkSession needed)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from broker_core import Client, InvalidConfiguration
from spark_pubsub.offsets import PartitionPlanner, _split_ranges
from spark_pubsub.options import SourceOptions, parse_options


def test_split_ranges_cuts_pieces_of_at_most_the_limit() -> None:
    assert _split_ranges([(0, 10)], None) == [[(0, 10)]]
    assert _split_ranges([(0, 10)], 4) == [[(0, 4)], [(4, 8)], [(8, 10)]]
    assert _split_ranges([(0, 3), (5, 9)], 4) == [[(0, 3), (5, 6)], [(6, 9)]]


def test_planner_makes_one_task_per_slice_covering_the_batch_once(tmp_path: Path) -> None:
    client = Client(str(tmp_path))
    try:
        client.create_producer("t").send_table(pa.table({"value": [b"x"] * 1000}))
    finally:
        client.close()
    options = parse_options(
        SourceOptions, {"path": str(tmp_path), "topic": "t", "maxrecordsperpartition": "300"}
    )
    planner = PartitionPlanner(options)
    name = "persistent://public/default/t"
    parts = planner.plan({"v": 1, "parts": {name: 0}}, {"v": 1, "parts": {name: 1000}})
    covered = [r for p in parts for task in p.tasks for r in task.ranges]
    assert len(parts) == 4
    assert covered == [(0, 300), (300, 600), (600, 900), (900, 1000)]


def test_max_records_per_partition_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfiguration, match="maxRecordsPerPartition"):
        parse_options(SourceOptions, {"path": str(tmp_path), "topic": "t", "maxrecordsperpartition": "0"})


def test_planned_tasks_read_under_the_roots_max_message_size(tmp_path: Path) -> None:
    # the executors' scan refuses what the driver's maxMessageSize does (D125)
    (tmp_path / "_pubsub").mkdir()
    (tmp_path / "_pubsub" / "broker.toml").write_text("maxMessageSize = 65536\n")
    client = Client(str(tmp_path))
    try:
        client.create_producer("t").send_table(pa.table({"value": [b"x"] * 10}))
    finally:
        client.close()
    planner = PartitionPlanner(parse_options(SourceOptions, {"path": str(tmp_path), "topic": "t"}))
    name = "persistent://public/default/t"
    parts = planner.plan({"v": 1, "parts": {name: 0}}, {"v": 1, "parts": {name: 10}})
    assert [task.max_message_bytes for p in parts for task in p.tasks] == [65536]
