"""Issue 26: a checkpoint that decodes but disagrees with the JSON commits it summarises.

Before the fix it was trusted: a reader skipped the segment it left out silently, ``pubsub topics
check`` said ok, and vacuum deleted the live segment as an orphan.  Now a checkpoint carries a
summary (``checkpoint_summary``) that a reader checks, an older one without it is checked for
undocumented holes, and ``check`` and vacuum compare it with the commits that remain.
"""

from __future__ import annotations

import io as bytes_io
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from moto_s3 import Root

from broker_core import Client, LogCorrupted, MessageId
from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig
from broker_core.jobs import vacuum
from broker_core.jobs.check import check_topic
from broker_core.log.checkpoint import checkpoint_path
from broker_core.log.gaps import commit_path
from broker_core.topic.topic_log import TopicLog

T = "persistent://public/default/lies"
TOPIC_DIR = "public/default/persistent/lies"
CONFIG = BrokerConfig(fsync_enabled=False)
VALUES = [f"m{i}".encode() for i in range(6)]


@pytest.fixture
def broker(any_root: Root) -> Iterator[Broker]:
    """Three segments of two messages (versions 1..3) and a checkpoint at version 3."""
    client = Client(any_root.url, storage_options=any_root.storage_options, broker_config=CONFIG)
    producer = client.create_producer(T, batching_enabled=True, batching_max_messages=100)
    for start in range(0, 6, 2):
        for value in VALUES[start:start + 2]:
            producer.send_async(value, None)
        producer.flush()
    producer.close()
    client.close()
    broker = Broker.for_url(any_root.url, CONFIG, storage_options=any_root.storage_options)
    assert TopicLog(broker.io, TOPIC_DIR).log.checkpoint() == 3
    yield broker


def _lie(broker: Broker, segment: int, *, keep_summary: bool) -> str:
    """Rewrite the checkpoint without segment ``segment``'s add: it still decodes.  ``keep_summary``
    False makes it look written by an earlier version (no summary).  Returns the segment's path."""
    path = checkpoint_path(TOPIC_DIR, 3)
    data = broker.io.read_bytes(path)
    assert data is not None
    table = pq.read_table(pa.BufferReader(data))
    gone = TopicLog(broker.io, TOPIC_DIR).snapshot().segments[segment].path
    paths = pc.struct_field(table.column("add"), "path")
    table = table.filter(pc.fill_null(pc.not_equal(paths, gone), True))
    if not keep_summary:
        table = table.replace_schema_metadata(None)
    sink = bytes_io.BytesIO()
    pq.write_table(table, sink)
    broker.io.replace(path, sink.getvalue(), anchor=TOPIC_DIR)
    return gone


def _read_all(root: Root) -> list[bytes]:
    client = Client(root.url, storage_options=root.storage_options, broker_config=CONFIG)
    try:
        reader = client.create_reader(T, start_message_id=MessageId.earliest)
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(5000).data())
        return out
    finally:
        client.close()


def _vacuum(broker: Broker) -> None:
    vacuum(broker, T, min_age_ms=0, enforce_min_age=False, dry_run=False)


@pytest.mark.parametrize("keep_summary", [True, False], ids=["summary", "no-summary"])
def test_a_checkpoint_leaving_out_a_middle_segment_is_not_trusted(broker: Broker, any_root: Root,
                                                                    keep_summary: bool) -> None:
    gone = _lie(broker, 1, keep_summary=keep_summary)
    assert _read_all(any_root) == VALUES  # the reader starts from the commits instead
    [result] = check_topic(broker, T).results
    assert [f.kind for f in result.findings] == ["checkpoint"], result.describe()
    _vacuum(broker)  # its state comes from the commits: the live segment stays
    assert broker.io.exists(f"{TOPIC_DIR}/{gone}")


def test_an_older_checkpoint_leaving_out_the_first_segment_is_caught_by_check_and_vacuum(
        broker: Broker, any_root: Root) -> None:
    """Without a summary, a missing first segment looks like retention: only the commits tell."""
    gone = _lie(broker, 0, keep_summary=False)
    [result] = check_topic(broker, T).results
    [finding] = result.findings
    assert finding.kind == "checkpoint" and gone in finding.detail
    assert "disagrees with the JSON commits" in finding.detail
    with pytest.raises(LogCorrupted, match="disagrees with the JSON commits"):
        _vacuum(broker)
    assert broker.io.exists(f"{TOPIC_DIR}/{gone}")  # nothing deleted
    [repaired] = check_topic(broker, T, repair=True, dry_run=False).results
    assert checkpoint_path(TOPIC_DIR, 3) in repaired.repaired
    assert check_topic(broker, T).results[0].ok
    assert _read_all(any_root) == VALUES


def test_vacuum_deletes_nothing_on_the_word_of_an_unconfirmable_older_checkpoint(broker: Broker) -> None:
    """An older checkpoint (no summary) whose commits were cleaned up: nothing can confirm it."""
    gone = _lie(broker, 0, keep_summary=False)
    for version in range(3):  # as log cleanup does, oldest first
        broker.io.delete(commit_path(TOPIC_DIR, version))
    with pytest.raises(LogCorrupted, match="nothing can confirm it"):
        _vacuum(broker)
    assert broker.io.exists(f"{TOPIC_DIR}/{gone}")


def test_a_checkpoint_with_its_summary_and_no_commits_left_still_serves(broker: Broker, any_root: Root) -> None:
    for version in range(3):
        broker.io.delete(commit_path(TOPIC_DIR, version))
    assert _read_all(any_root) == VALUES
    _vacuum(broker)
    assert len(TopicLog(broker.io, TOPIC_DIR).snapshot().segments) == 3
