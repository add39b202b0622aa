"""Issue 26: a log whose ``protocol`` asks for a newer Delta reader or writer is refused, as
``docs/PROTOCOL.md`` promises (before the fix both versions were ignored: reads and writes went on).

Reader version above 1: nothing is read (``UnsupportedVersionError`` naming the topic, the version
found and the one supported).  Writer version above 2: reads go on; every write (an append, a job's
commit, a checkpoint, vacuum's deletions) is refused and nothing in the topic changes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from moto_s3 import Root

from broker_core import Client, InitialPosition, MessageId, UnsupportedVersionError
from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig
from broker_core.jobs import vacuum
from broker_core.jobs.log_maintenance import checkpoint
from broker_core.log.gaps import commit_path
from broker_core.topic.topic_log import TopicLog

T = "persistent://public/default/proto"
TOPIC_DIR = "public/default/persistent/proto"
CONFIG = BrokerConfig(fsync_enabled=False)
VALUES = [b"a", b"b", b"c"]


@pytest.fixture
def root(any_root: Root) -> Iterator[Root]:
    client = Client(any_root.url, storage_options=any_root.storage_options, broker_config=CONFIG)
    producer = client.create_producer(T)
    for value in VALUES:
        producer.send(value)
    producer.close()
    client.close()
    yield any_root


def _broker(root: Root) -> Broker:
    return Broker.for_url(root.url, CONFIG, storage_options=root.storage_options)


def _upgrade(root: Root, reader: int, writer: int) -> int:
    """Hand-write the next commit: a newer writer raised the table's protocol."""
    io = _broker(root).io
    version = TopicLog(io, TOPIC_DIR).snapshot().version + 1
    line = json.dumps({"protocol": {"minReaderVersion": reader, "minWriterVersion": writer}})
    assert io.put_if_absent(commit_path(TOPIC_DIR, version), (line + "\n").encode(), anchor=TOPIC_DIR)
    return version


def _files(root: Root) -> list[str]:
    """The log's files and the segments (cursors and the producer registry are not the log's)."""
    io = _broker(root).io
    return sorted([n for n in io.list_dir(TOPIC_DIR) if n.startswith("part-")] + io.list_dir(f"{TOPIC_DIR}/_delta_log"))


def test_a_newer_reader_version_is_refused(root: Root) -> None:
    version = _upgrade(root, 3, 7)
    with pytest.raises(UnsupportedVersionError, match="reader of Delta protocol version 3") as info:
        TopicLog(_broker(root).io, TOPIC_DIR).snapshot()
    assert info.value.context["topic"] == T and info.value.context["min_reader_version"] == 3
    assert info.value.context["supported"] == 1 and info.value.context["version"] == version
    client = Client(root.url, storage_options=root.storage_options, broker_config=CONFIG)
    try:
        with pytest.raises(UnsupportedVersionError):
            reader = client.create_reader(T, start_message_id=MessageId.earliest)
            reader.has_message_available()
    finally:
        client.close()


def test_a_newer_writer_version_reads_but_writes_nothing(root: Root) -> None:
    _upgrade(root, 1, 7)
    before = _files(root)
    client = Client(root.url, storage_options=root.storage_options, broker_config=CONFIG)
    try:
        consumer = client.subscribe(T, "s", initial_position=InitialPosition.Earliest)
        assert [consumer.receive(5000).data() for _ in VALUES] == VALUES  # reads go on
        consumer.close()
        with pytest.raises(UnsupportedVersionError, match="writer of Delta protocol version 7"):
            producer = client.create_producer(T)
            producer.send(b"refused")
    finally:
        client.close()
    broker = _broker(root)
    with pytest.raises(UnsupportedVersionError):
        checkpoint(broker, T)
    with pytest.raises(UnsupportedVersionError):
        vacuum(broker, T, min_age_ms=0, enforce_min_age=False, dry_run=False)
    after = [name for name in _files(root) if not name.startswith("part-")]
    assert after == [name for name in before if not name.startswith("part-")]  # no commit, no checkpoint
    assert set(before) <= set(_files(root))  # nothing deleted
