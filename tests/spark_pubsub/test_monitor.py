"""``spark_pubsub.monitor``: a streaming query's offsets behind latest and oldest unprocessed age, published
to the lag board an exporter serves and parsed back from its exposition; on a folder and on S3 (reached
through ``storage.*`` options in Spark and ``storage_options`` for the listener)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from moto_s3 import Root
from prometheus_client.parser import text_string_to_metric_families
from source_job import Collector, create_partitioned, make_root, names, produce, source, start_continuous

import spark_pubsub
from broker_core.broker.broker import Broker
from broker_core.metrics.collector import PulsarCollector
from broker_core.metrics.exporter import exposition
from broker_core.metrics.lag import LagBoard
from broker_core.metrics.sampling import Sampler

TOPIC = "persistent://public/default/lagged"


def test_monitor_publishes_offsets_behind_latest_and_the_oldest_unprocessed_age(spark: Any, any_root: Root,
                                                                               tmp_path: Path) -> None:
    root = any_root.url if any_root.is_s3 else make_root(Path(any_root.url))
    create_partitioned(root, "lagged", 2)
    produce(root, "lagged", names("a", 10))
    board = LagBoard()
    storage = {f"storage.{key}": value for key, value in any_root.storage_options.items()}
    query = start_continuous(source(spark, root, topic="lagged", startingOffsets="earliest", **storage),
                             tmp_path / "ck", Collector())
    try:
        listener = spark_pubsub.monitor(query, root, storage_options=any_root.storage_options, board=board)
        query.processAllAvailable()
        caught_up = listener.handle_progress(query.lastProgress)
        assert caught_up[TOPIC].max_offsets_behind == 0 and caught_up[TOPIC].oldest_unprocessed_age_s == 0
        query.stop()
        # messages published after the query's last batch: the last progress is now behind by them
        produce(root, "lagged", names("b", 6))
        before_ms = time.time_ns() // 1_000_000
        behind = listener.handle_progress(query.lastProgress)[TOPIC]
        assert behind.min_offsets_behind + behind.max_offsets_behind == 6
        assert behind.avg_offsets_behind == 3
        assert 0 <= behind.oldest_unprocessed_age_s < (time.time_ns() // 1_000_000 - before_ms) / 1000 + 60
        spark.streams.removeListener(listener)
    finally:
        query.stop()
    broker = Broker.for_url(root, storage_options=any_root.storage_options)
    collector = PulsarCollector(Sampler(broker), spark_lag=board)
    got = {s.name: s for f in text_string_to_metric_families(exposition(collector)) for s in f.samples
           if s.name.startswith("pubsub_spark_")}
    labels = {"cluster": "standalone", "query": str(query.id), "topic": TOPIC}
    assert got["pubsub_spark_avg_offsets_behind_latest"].labels == labels
    assert got["pubsub_spark_avg_offsets_behind_latest"].value == 3
    assert got["pubsub_spark_max_offsets_behind_latest"].value == behind.max_offsets_behind
    assert "pubsub_spark_oldest_unprocessed_age_seconds" in got


def test_the_public_monitor_stays_a_function_once_its_implementation_is_imported() -> None:
    """Its module used to share its name: the first call imported ``spark_pubsub.monitor``, which rebound the
    package attribute to the module, so a second call in the process raised "'module' object is not callable"."""
    import importlib

    importlib.import_module("spark_pubsub.lag_listener")
    assert callable(spark_pubsub.monitor) and spark_pubsub.monitor.__module__ == "spark_pubsub"
