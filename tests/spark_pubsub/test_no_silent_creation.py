"""Nothing appears by being read: no root, no topic; deleted topics and lost offsets follow failOnDataLoss.

A typo in a root or topic name must fail naming it rather than make an empty root or topic that
reads nothing.  The planner-level tests run without Spark; one test goes through ``load()``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyspark.sql.functions as F
import pytest
from source_job import Collector, make_root, names, produce, run_available_now, source

from broker_core.broker.admin import Admin
from broker_core.errors import DataLoss, RootNotFound, TopicNotFound
from spark_pubsub.offsets import PartitionPlanner
from spark_pubsub.options import SinkOptions, SourceOptions, parse_options
from spark_pubsub.sink import PubSubBatchWriter
from spark_pubsub.stream_reader import PubSubStreamReader

T = "persistent://public/default/t"


@pytest.fixture
def root(tmp_path: Path) -> str:
    return make_root(tmp_path / "root")


def planner(root: str, **options: str) -> PartitionPlanner:
    values = {"path": root, "topic": "t", **{k.lower(): v for k, v in options.items()}}
    return PartitionPlanner(parse_options(SourceOptions, values))


def topic_dirs(root: str) -> list[str]:
    base = Path(root, "public", "default", "persistent")
    return sorted(p.name for p in base.iterdir()) if base.exists() else []


def test_reading_a_missing_topic_fails_naming_it_and_creates_nothing(root: str) -> None:
    with pytest.raises(TopicNotFound, match=r"persistent://public/default/t does not exist.*waitForTopic"):
        planner(root).require_topics()
    reader = PubSubStreamReader(parse_options(SourceOptions, {"path": root, "topic": "t"}))
    with pytest.raises(TopicNotFound):
        reader.initialOffset()
    assert topic_dirs(root) == []


def test_wait_for_topic_reads_nothing_until_the_topic_appears(root: str) -> None:
    reader = PubSubStreamReader(parse_options(
        SourceOptions, {"path": root, "topic": "t", "waitfortopic": "true", "startingoffsets": "earliest"}))
    start = reader.initialOffset()
    assert start == {"v": 1, "parts": {}}
    assert reader.planner.advance(start, max_rows=None, max_bytes=None, min_rows=None, target=None) == start
    assert topic_dirs(root) == []
    produce(root, "t", names("m", 3))
    reader.planner._discovered_s = 0.0  # skip the once-a-second re-resolution wait
    end = reader.planner.advance(start, max_rows=None, max_bytes=None, min_rows=None, target=None)
    assert end["parts"] == {T: 3}  # the new topic from its start


def test_a_deleted_topic_fails_the_query_naming_topic_and_offsets(root: str) -> None:
    produce(root, "t", names("m", 5))
    p = planner(root, startingOffsets="earliest")
    start = {"v": 1, "parts": {T: 5}}  # what the checkpoint holds
    assert p.advance(start, max_rows=None, max_bytes=None, min_rows=None, target=None) == start
    Admin.open(root).delete_topic("t")
    p._discovered_s = 0.0
    with pytest.raises(DataLoss, match=r"persistent://public/default/t at offset 5 \(the topic no longer exists\)"):
        p.advance(start, max_rows=None, max_bytes=None, min_rows=None, target=None)
    assert topic_dirs(root) == []  # and it was not re-created


def test_a_re_created_topic_follows_fail_on_data_loss(root: str) -> None:
    produce(root, "t", names("m", 5))
    Admin.open(root).delete_topic("t")
    produce(root, "t", names("n", 2))  # re-created: offsets start again at 0
    start = {"v": 1, "parts": {T: 5}}
    with pytest.raises(DataLoss, match=r"offset 5 \(it now ends at 2\)"):
        planner(root).advance(start, max_rows=None, max_bytes=None, min_rows=None, target=None)
    lenient = planner(root, failOnDataLoss="false")
    end = lenient.advance(start, max_rows=None, max_bytes=None, min_rows=None, target=None)
    assert end["parts"] == {T: 2} and end["from"] == {T: 0}  # goes on from the new topic's start
    (task,) = lenient.plan(start, end)[0].tasks
    assert task.ranges == ((0, 2),)


def test_a_missing_root_fails_reads_and_writes_naming_it(tmp_path: Path) -> None:
    typo = str(tmp_path / "typo")
    with pytest.raises(RootNotFound, match="typo"):
        planner(typo).require_topics()
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField("value", StringType())])
    with pytest.raises(RootNotFound, match="typo"):
        PubSubBatchWriter(parse_options(SinkOptions, {"path": typo, "topic": "t"}), schema, overwrite=False)
    assert not Path(typo).exists()
    PubSubBatchWriter(parse_options(SinkOptions, {"path": typo, "topic": "t", "createroot": "true"}), schema,
                      overwrite=False)
    assert Path(typo).is_dir()


def test_spark_reads_of_a_missing_topic_or_root_fail_at_load_and_create_nothing(
    spark: Any, root: str, tmp_path: Path
) -> None:
    with pytest.raises(Exception, match="does not exist") as info:
        spark.read.format("pubsub").option("topic", "nope").load(root).collect()
    assert "TopicNotFound" in str(info.value)
    with pytest.raises(Exception, match="does not exist"):
        spark.read.format("pubsub").option("topic", "t").load(str(tmp_path / "typo")).collect()
    assert topic_dirs(root) == [] and not (tmp_path / "typo").exists()
    # a write to a missing root says so too, and createRoot makes it
    df = spark.range(3).select(F.col("id").cast("string").alias("value"))
    with pytest.raises(Exception, match="does not exist"):
        df.write.format("pubsub").mode("append").option("topic", "t").save(str(tmp_path / "new"))
    df.write.format("pubsub").mode("append").option("topic", "t").option("createRoot", "true").save(
        str(tmp_path / "new"))
    got = Collector(("value",))
    run_available_now(source(spark, str(tmp_path / "new"), topic="t", startingOffsets="earliest"),
                      tmp_path / "ck", got)
    assert sorted(got.values) == ["0", "1", "2"]
