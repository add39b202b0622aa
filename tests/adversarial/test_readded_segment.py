"""Issue 26: a commit that adds a live segment's path again (at another offset) is a corrupt log.

Before the fix, replay accepted it and the segment's messages were delivered twice (once at each
offset), and ``pubsub topics check`` said ok.  Now the replay refuses it, naming the version and the
path, a writer never commits it, and ``check`` reports it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from moto_s3 import Root

from broker_core import Client, LogCorrupted
from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig
from broker_core.jobs.check import check_topic
from broker_core.log.actions import Add
from broker_core.log.gaps import commit_path
from broker_core.log.segment_ref import TAG_BASE_OFFSET, SegmentRef
from broker_core.topic.topic_log import TopicLog

T = "persistent://public/default/readd"
TOPIC_DIR = "public/default/persistent/readd"
CONFIG = BrokerConfig(fsync_enabled=False)


@pytest.fixture
def broker(any_root: Root) -> Iterator[Broker]:
    client = Client(any_root.url, storage_options=any_root.storage_options, broker_config=CONFIG)
    producer = client.create_producer(T, batching_enabled=True, batching_max_messages=100)
    for start in range(0, 4, 2):
        for i in range(start, start + 2):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
    producer.close()
    client.close()
    yield Broker.for_url(any_root.url, CONFIG, storage_options=any_root.storage_options)


def _readd_first_segment(broker: Broker) -> tuple[int, str]:
    """Hand-write the next commit: the first live segment's ``add`` again, at the log's end."""
    snap = TopicLog(broker.io, TOPIC_DIR).snapshot()
    seg = snap.segments[0]
    tags = {**seg.tags(), TAG_BASE_OFFSET: str(snap.next_offset)}
    add = Add(path=seg.path, size=seg.size_bytes, modification_time=seg.modification_time_ms, data_change=True,
              tags=tags)
    version = snap.version + 1
    line = json.dumps({"add": add.model_dump(by_alias=True, exclude_none=True)})
    assert broker.io.put_if_absent(commit_path(TOPIC_DIR, version), (line + "\n").encode(), anchor=TOPIC_DIR)
    return version, seg.path


def test_a_readded_live_segment_is_refused_at_replay(broker: Broker) -> None:
    version, path = _readd_first_segment(broker)
    with pytest.raises(LogCorrupted, match=rf"log version {version} adds '{path}', which is live already") as info:
        TopicLog(broker.io, TOPIC_DIR).snapshot()
    assert info.value.context["version"] == version


def test_check_reports_a_readded_live_segment(broker: Broker) -> None:
    version, path = _readd_first_segment(broker)
    [result] = check_topic(broker, T).results
    assert not result.ok
    [finding] = result.findings
    assert finding.file == commit_path(TOPIC_DIR, version) and path in finding.detail


def test_a_writer_never_commits_a_readd() -> None:
    """The replay check is what a writer applies before it writes, so no commit can carry it."""
    from broker_core.log.actions import Metadata, Protocol
    from broker_core.log.snapshot import Snapshot

    base = Snapshot.from_actions(0, [Protocol(min_reader_version=1, min_writer_version=2),
                                     Metadata.model_validate({"id": "x", "format": {"provider": "parquet"},
                                                              "schemaString": "{}", "partitionColumns": [],
                                                              "configuration": {}})])
    name = "part-" + "0" * 32 + ".parquet"

    def add(offset: int) -> Add:
        seg = SegmentRef(path=name, base_offset=offset, num_records=1, base_entry_id=offset, layout=[1],
                         size_bytes=1, min_publish_ms=0, max_publish_ms=0, modification_time_ms=0)
        return Add(path=name, size=1, modification_time=0, data_change=True, tags=seg.tags())

    one = base.apply(1, [add(0)])
    with pytest.raises(LogCorrupted, match="live already"):
        one.apply(2, [add(1)])
    with pytest.raises(LogCorrupted, match="by the same commit"):
        base.apply(1, [add(0), add(1)])
