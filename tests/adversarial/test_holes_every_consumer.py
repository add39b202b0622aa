"""Issue 26: a hole in a log (a segment ``topics check --repair`` set aside) is skipped by every
consumer type alike: each message around it is delivered once with its own id, and nothing loops.

Exclusive and Failover read in order by offset; before the fix they read a middle hole's offsets as
the next segment's first row (delivered three times, one id) and a tail hole's as rows past the end
of the read (an ``IndexError`` in the dispatch loop, ~47 tracebacks a second, nothing delivered).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from moto_s3 import Root

from broker_core import Client, ConsumerType, InitialPosition, MessageId, Timeout
from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig
from broker_core.log.actions import Remove
from broker_core.topic.topic_log import TopicLog

T = "persistent://public/default/holes"
TOPIC_DIR = "public/default/persistent/holes"
CONFIG = BrokerConfig(fsync_enabled=False)
VALUES = [f"m{i}".encode() for i in range(6)]


@pytest.fixture
def client(any_root: Root) -> Iterator[Client]:
    c = Client(any_root.url, storage_options=any_root.storage_options, broker_config=CONFIG)
    yield c
    c.close()


def _topic_with_hole(client: Client, any_root: Root, segment: int) -> list[bytes]:
    """Three segments of two messages; the log then removes segment ``segment`` (1: a middle hole,
    2: a tail hole) as a repair does. Returns the values left to deliver."""
    producer = client.create_producer(T, batching_enabled=True, batching_max_messages=100)
    for start in range(0, 6, 2):
        for value in VALUES[start:start + 2]:
            producer.send_async(value, None)
        producer.flush()
    producer.close()
    broker = Broker.for_url(any_root.url, CONFIG, storage_options=any_root.storage_options)
    log = TopicLog(broker.io, TOPIC_DIR)
    gone = log.snapshot().segments[segment]
    log.log.commit(lambda _snap: [Remove(path=gone.path, deletion_timestamp=0, data_change=True)],
                   operation="DELETE")
    return [v for i, v in enumerate(VALUES) if i // 2 != segment]


KINDS = [ConsumerType.Exclusive, ConsumerType.Failover, ConsumerType.Shared, ConsumerType.KeyShared, None]


@pytest.mark.parametrize("segment", [1, 2], ids=["middle-hole", "tail-hole"])
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: "Reader" if k is None else k.name)
def test_every_consumer_type_skips_a_hole_once(client: Client, any_root: Root, segment: int,
                                               kind: ConsumerType | None, caplog: pytest.LogCaptureFixture) -> None:
    expected = _topic_with_hole(client, any_root, segment)
    fresh = Client(any_root.url, storage_options=any_root.storage_options, broker_config=CONFIG)
    got: list[tuple[bytes, str]] = []
    try:
        with caplog.at_level(logging.ERROR):
            if kind is None:
                reader = fresh.create_reader(T, start_message_id=MessageId.earliest)
                while reader.has_message_available():
                    msg = reader.read_next(5000)
                    got.append((msg.data(), str(msg.message_id())))
            else:
                consumer = fresh.subscribe(T, "s", consumer_type=kind, initial_position=InitialPosition.Earliest)
                for _ in expected:
                    msg = consumer.receive(5000)
                    got.append((msg.data(), str(msg.message_id())))
                    consumer.acknowledge(msg)
                with pytest.raises(Timeout):  # nothing more: no message twice
                    consumer.receive(300)
    finally:
        fresh.close()
    assert sorted(v for v, _ in got) == expected
    assert len({i for _, i in got}) == len(expected)  # distinct ids
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text  # no error loop
