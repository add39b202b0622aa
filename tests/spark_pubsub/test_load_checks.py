"""What ``load()`` itself refuses (issue 28): a topic typo (with the close names), a misspelt
``startingOffsets``/``endingOffsets`` keyword; and Kafka's ``minOffsetsPerTrigger`` is accepted.

Spark calls the source's ``schema()`` on the driver when ``load()`` is called, for batch and stream
reads alike, so these fail there instead of at the first action or after ``start()``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkException
from pyspark.sql.streaming.datasource import ReadMinRows
from source_job import make_root, names, produce

from broker_core.errors import InvalidConfiguration, TopicNotFound
from spark_pubsub.offsets import PartitionPlanner
from spark_pubsub.options import SourceOptions, parse_options
from spark_pubsub.source import PubSubDataSource
from spark_pubsub.stream_reader import PubSubStreamReader

ORDERS = "persistent://public/default/orders"


@pytest.fixture
def root(tmp_path: Path) -> str:
    path = make_root(tmp_path / "root")
    produce(path, "orders", names("o", 3))
    produce(path, "payments", names("p", 2))
    return path


def schema_of(root: str, **options: str) -> Any:
    """``schema()`` as Spark calls it at ``load()`` (lower-cased keys, string values)."""
    return PubSubDataSource(options={"path": root, **{k.lower(): v for k, v in options.items()}}).schema()


def test_a_topic_typo_fails_at_load_with_the_close_existing_names(root: str) -> None:
    with pytest.raises(TopicNotFound, match=f"did you mean '{ORDERS}'") as info:
        schema_of(root, topic="ordrs")
    assert "persistent://public/default/ordrs does not exist" in str(info.value)
    with pytest.raises(TopicNotFound, match=f"did you mean '{ORDERS}'"):
        schema_of(root, topics="payments,ordrs")
    with pytest.raises(TopicNotFound) as info:
        schema_of(root, topic="zzzzzz")
    assert "did you mean" not in str(info.value)
    # waitForTopic: the topic may appear later, so load() accepts it (DECISIONS D57)
    schema_of(root, topic="ordrs", waitForTopic="true")
    # the planner's own check (initialOffset, a batch read's planning) names them too
    with pytest.raises(TopicNotFound, match="did you mean"):
        PartitionPlanner(parse_options(SourceOptions, {"path": root, "topic": "ordrs"})).require_topics()


@pytest.mark.parametrize(("option", "spec", "meant"), [
    ("startingOffsets", "earlist", "earliest"),
    ("startingOffsets", "LATEST ", None),
    ("endingOffsets", "latst", "latest"),
    ("startingOffsets", "oldest", None),
])
def test_offset_keywords_are_checked_at_load_with_the_nearest_keyword(root: str, option: str, spec: str,
                                                                      meant: str | None) -> None:
    if spec == "LATEST ":  # the keywords are case-blind, as in Kafka's connector
        schema_of(root, topic="orders", **{option: spec})
        return
    with pytest.raises(InvalidConfiguration, match=option) as info:
        schema_of(root, topic="orders", **{option: spec})
    assert (f"did you mean {meant!r}?" in str(info.value)) == (meant is not None)


def test_spark_users_see_both_errors_at_load(spark: Any, root: str) -> None:
    for reader in (lambda: spark.read, lambda: spark.readStream):  # no action, no start()
        with pytest.raises(PySparkException, match="did you mean 'earliest'"):
            reader().format("pubsub").option("topic", "orders").option("startingOffsets", "earlist").load(root)
        with pytest.raises(PySparkException, match=f"did you mean '{ORDERS}'"):
            reader().format("pubsub").option("topic", "ordrs").load(root)


def test_min_offsets_per_trigger_is_kafkas_name_for_min_messages_per_trigger(root: str) -> None:
    options = parse_options(SourceOptions, {"path": root, "topic": "orders", "minoffsetspertrigger": "5",
                                            "maxtriggerdelay": "1h", "startingoffsets": "earliest"})
    assert options.min_messages_per_trigger == 5 and options.max_trigger_delay_ms == 3_600_000
    reader = PubSubStreamReader(options)
    start = reader.initialOffset()
    limit = reader.getDefaultReadLimit()
    assert isinstance(limit, ReadMinRows) and limit.min_rows == 5
    assert reader.latestOffset(start, limit) == start  # 3 of 5: the trigger waits
    produce(root, "orders", names("o", 2, start=3))
    assert reader.latestOffset(start, limit)["parts"] == {ORDERS: 5}
    with pytest.raises(InvalidConfiguration, match="mean the same thing"):
        parse_options(SourceOptions, {"path": root, "topic": "orders", "minoffsetspertrigger": "5",
                                      "minmessagespertrigger": "5"})
    # Trigger.AvailableNow ignores the minimum, as Kafka's connector does: it reads what there is
    later = PubSubStreamReader(options)
    later.prepareForTriggerAvailableNow()
    assert later.latestOffset(start, later.getDefaultReadLimit())["parts"] == {ORDERS: 5}


def test_a_read_without_storage_options_says_the_credentials_are_missing(moto_s3: Any,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The instance-metadata service is a refusing stand-in on 127.0.0.1 (never 169.254.169.254)."""
    import os

    from moto_s3 import refusing_metadata_service

    from broker_core.errors import StorageAccessDenied

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    url = moto_s3.fresh_root(create=False)
    with refusing_metadata_service() as metadata, pytest.raises(StorageAccessDenied) as info:
        schema_of(url, topic="orders", **{"storage.aws_endpoint": moto_s3.endpoint, "storage.aws_allow_http": "true",
                                          "storage.aws_metadata_endpoint": metadata,
                                          "storage.pubsub_max_retries": "0"})
    assert "no credentials are configured" in str(info.value)
    assert "storage.aws_access_key_id" in str(info.value)
