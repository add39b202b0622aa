"""``read_topic`` refuses a decompression bomb (issue #26, D175/D176) on both of its routes.

A zstd segment of a few kilobytes holding one 10 MB message, read with ``maxMessageSize`` = 64 KiB:
the JVM scan's task refuses the file from its footer before inflating it (the action fails with a
Spark error naming the file, the limit and the fix); the DataFrame route's driver refuses it with
``SegmentTooLarge`` before building the DataFrame.  A topic of ordinary messages still reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from source_job import make_root

from broker_core import Client, CompressionType
from broker_core.broker import admin as admin_module
from broker_core.broker import broker as broker_module
from broker_core.broker import handles as handles_module
from broker_core.broker.broker import Broker
from broker_core.errors import SegmentTooLarge
from spark_pubsub import read_topic
from spark_pubsub.jvm_scan import ENABLED_CONF

LIMIT_BYTES = 64 * 1024
BOMB_BYTES = 10 * 1000 * 1000


@pytest.fixture(params=["jvm", "dataframe"])
def route(request: pytest.FixtureRequest, spark: Any) -> Any:
    spark.conf.set(ENABLED_CONF, "true" if request.param == "jvm" else "false")
    yield request.param
    spark.conf.unset(ENABLED_CONF)


def _forget_handles(monkeypatch: pytest.MonkeyPatch) -> None:
    """What opens next reads the root's config afresh, as a new process would."""
    monkeypatch.setattr(broker_module, "_BROKERS", {})
    monkeypatch.setattr(admin_module, "_ADMINS", {})
    for name in ("_TOPIC_LOGS", "_CURSOR_STORES"):
        monkeypatch.setattr(handles_module, name, {})


def _bomb_root(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A root whose ``bomb`` topic's middle segment is a bomb, written under a limit that allowed it,
    then configured with ``maxMessageSize`` = ``LIMIT_BYTES``; returns the root and the bomb's file."""
    root = make_root(path, maxMessageSize=2 * BOMB_BYTES)
    client = Client(root)
    try:
        producer = client.create_producer("bomb", batching_enabled=False, compression_type=CompressionType.ZSTD)
        for payload in (b"before", bytes(BOMB_BYTES), b"after"):
            producer.send(payload)
        producer.close()
        fine = client.create_producer("fine", compression_type=CompressionType.ZSTD)
        for i in range(20):
            fine.send(f"m{i}".encode() * 100)
        fine.close()
    finally:
        client.close()
    broker = Broker.for_url(root)
    segments = broker.topic_log(broker.partitions("bomb")[0]).snapshot().segments
    assert len(segments) == 3 and segments[1].size_bytes < 64 * 1024  # a small file
    make_root(path, maxMessageSize=LIMIT_BYTES)
    _forget_handles(monkeypatch)
    return root, segments[1].path


def test_read_topic_refuses_a_bomb_naming_the_file_the_limit_and_the_fix(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str) -> None:
    root, bomb = _bomb_root(tmp_path / "root", monkeypatch)
    with pytest.raises(Exception) as info:  # the JVM route: a Spark error
        read_topic(spark, root, topic="bomb").collect()
    text = str(info.value)
    if route == "dataframe":  # refused on the driver, typed
        assert isinstance(info.value, SegmentTooLarge)
    else:  # refused by the JVM scan's task from the footer, before inflating the file: a Spark error
        assert not isinstance(info.value, SegmentTooLarge) and "spark_pubsub: SegmentTooLarge: " in text
    assert bomb in text and f"maxMessageSize={LIMIT_BYTES}" in text
    assert "raise maxMessageSize" in text and "--repair --execute" in text
    assert read_topic(spark, root, topic="fine").count() == 20
    assert read_topic(spark, root, topic="bomb", startingOffsets='{"bomb": 2}').count() == 1  # after it
