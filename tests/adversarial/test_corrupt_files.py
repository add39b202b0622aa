"""Defect 4 of issue 10: a damaged file stops no more than it must, and says which file and what to do."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from adversarial_helpers import TOPIC_DIR, T, produce

from broker_core import (
    Client,
    ConsumerBatchReceivePolicy,
    ConsumerType,
    InitialPosition,
    LogCorrupted,
    MessageId,
    PulsarException,
    SegmentCorrupted,
    Timeout,
)
from broker_core.broker.admin import Admin
from broker_core.config import BrokerConfig
from broker_core.log.checkpoint import checkpoint_path
from broker_core.naming import TopicName
from broker_core.storage import LocalFileIO
from broker_core.subscription.cursor_store import CursorStore
from broker_core.topic.topic_log import TopicLog


def _three_segments(root: Path, client: Client) -> Path:
    """Messages m0..m5 in three segments; returns the second segment's file (m2, m3)."""
    produce(client, [f"m{i}".encode() for i in range(6)], batches=3)
    snap = TopicLog(LocalFileIO(str(root)), TOPIC_DIR).snapshot()
    return root / TOPIC_DIR / snap.segments[1].path


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def test_a_reader_delivers_the_messages_before_a_truncated_segment_then_names_it(
        root: Path, client: Client, new_process: Any) -> None:
    damaged = _three_segments(root, client)
    _truncate(damaged)
    new_process()
    fresh = Client(str(root))
    try:
        reader = fresh.create_reader(T, start_message_id=MessageId.earliest)
        got = []
        with pytest.raises(SegmentCorrupted, match=damaged.name) as info:
            while reader.has_message_available():
                got.append(reader.read_next(1000).data())
        assert got == [b"m0", b"m1"]
        assert "--repair" in str(info.value)
    finally:
        fresh.close()


@pytest.mark.parametrize("kind", [ConsumerType.Shared, ConsumerType.Exclusive, ConsumerType.KeyShared])
def test_a_consumer_gets_the_good_messages_then_the_error_once(
        root: Path, client: Client, new_process: Any, kind: ConsumerType, caplog: pytest.LogCaptureFixture) -> None:
    damaged = _three_segments(root, client)
    _truncate(damaged)
    new_process()
    fresh = Client(str(root))
    try:
        consumer = fresh.subscribe(T, "s", consumer_type=kind, initial_position=InitialPosition.Earliest)
        got = []
        with caplog.at_level(logging.ERROR):
            for _ in range(2):
                msg = consumer.receive(5000)
                got.append(msg.data())
                consumer.acknowledge(msg)
            with pytest.raises(SegmentCorrupted, match=damaged.name):
                consumer.receive(5000)
            with pytest.raises(Timeout):  # surfaced once, not again and again
                consumer.receive(300)
        assert got == [b"m0", b"m1"]
        assert not [r for r in caplog.records if r.exc_info]  # no traceback per poll
        assert len([r for r in caplog.records if damaged.name in r.getMessage()]) == 1
        consumer.close()
    finally:
        fresh.close()


def test_batch_receive_gets_the_good_messages_then_the_error_once(
        root: Path, client: Client, new_process: Any) -> None:
    damaged = _three_segments(root, client)
    _truncate(damaged)
    new_process()
    fresh = Client(str(root))
    try:
        policy = ConsumerBatchReceivePolicy(max_num_message=10, timeout_ms=300)
        consumer = fresh.subscribe(T, "s", initial_position=InitialPosition.Earliest, batch_receive_policy=policy)
        got = []
        while len(got) < 2:  # the messages before the damage (in one batch or more)
            got += [m.data() for m in consumer.batch_receive()]
        assert got == [b"m0", b"m1"]
        deadline = time.monotonic() + 10
        with pytest.raises(SegmentCorrupted, match=damaged.name):
            while time.monotonic() < deadline:  # (a batch may come back empty before the dispatcher met it)
                assert consumer.batch_receive() == []
        assert consumer.batch_receive() == []  # surfaced once, not again and again
        consumer.close()
    finally:
        fresh.close()


def test_a_listener_consumer_hands_the_error_to_the_application_once(
        root: Path, client: Client, new_process: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    damaged = _three_segments(root, client)
    _truncate(damaged)
    new_process()
    reported: list[BaseException | None] = []
    heard = threading.Event()

    def hook(args: Any) -> None:
        reported.append(args.exc_value)
        heard.set()

    monkeypatch.setattr(threading, "excepthook", hook)
    fresh = Client(str(root))
    try:
        got: list[bytes] = []
        consumer = fresh.subscribe(T, "s", initial_position=InitialPosition.Earliest,
                                   message_listener=lambda c, m: (got.append(m.data()), c.acknowledge(m)))
        assert heard.wait(10)
        assert got == [b"m0", b"m1"]  # every good message first
        assert len(reported) == 1 and isinstance(reported[0], SegmentCorrupted)
        assert damaged.name in str(reported[0])
        consumer.close()
        assert len(reported) == 1  # once, though the dispatcher kept meeting the damage
    finally:
        fresh.close()


def test_a_reader_listener_hands_the_error_to_the_application_once_and_keeps_going(
        root: Path, client: Client, new_process: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader listener's thread survives damaged storage: the error reaches ``threading.excepthook``
    once (not once per retry), a raising listener is logged, and the reader still runs."""
    damaged = _three_segments(root, client)
    _truncate(damaged)
    new_process()
    reported: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: reported.append(args.exc_value))
    fresh = Client(str(root), broker_config=BrokerConfig(new_entries_check_max_delay_millis=20))
    try:
        got: list[bytes] = []

        def listener(_reader: Any, msg: Any) -> None:
            got.append(msg.data())
            if msg.data() == b"m0":
                raise RuntimeError("the application's own bug")

        reader = fresh.create_reader(T, MessageId.earliest, reader_listener=listener)
        attempts = threading.Semaphore(0)
        read_next = reader.read_next

        def counting_read_next(*args: Any, **kwargs: Any) -> Any:
            attempts.release()
            return read_next(*args, **kwargs)

        reader.read_next = counting_read_next  # type: ignore[method-assign]
        for _ in range(4):  # the damage met again and again (a 20 ms backoff cap between tries)
            assert attempts.acquire(timeout=10)
        assert got == [b"m0", b"m1"]  # every good message first, past a listener that raised
        assert len(reported) == 1 and isinstance(reported[0], SegmentCorrupted)
        assert damaged.name in str(reported[0])
        assert reader._listener_thread is not None and reader._listener_thread.is_alive()
        reader.close()
    finally:
        fresh.close()


def test_a_segment_with_fewer_rows_than_its_log_entry_is_corrupt(root: Path, client: Client) -> None:
    damaged = _three_segments(root, client)
    snap = TopicLog(LocalFileIO(str(root)), TOPIC_DIR).snapshot()
    damaged.write_bytes((root / TOPIC_DIR / snap.segments[0].path).read_bytes())  # 2 rows, but other ones
    produce(client, [b"x"])  # a valid segment of 1 row placed over a 2-row one
    one_row = root / TOPIC_DIR / TopicLog(LocalFileIO(str(root)), TOPIC_DIR).snapshot().segments[-1].path
    damaged.write_bytes(one_row.read_bytes())
    with pytest.raises(SegmentCorrupted, match="holds 1 rows"):
        TopicLog(LocalFileIO(str(root)), TOPIC_DIR).read(2, 4)


def test_a_corrupt_checkpoint_falls_back_to_the_json_commits(root: Path, client: Client, new_process: Any,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    produce(client, [f"m{i}".encode() for i in range(4)], batches=4)
    version = TopicLog(LocalFileIO(str(root)), TOPIC_DIR).log.checkpoint()
    (root / checkpoint_path(TOPIC_DIR, version)).write_bytes(b"PAR1 not a checkpoint")
    new_process()
    fresh = Client(str(root))
    try:
        with caplog.at_level(logging.WARNING):
            reader = fresh.create_reader(T, start_message_id=MessageId.earliest)
            got = [reader.read_next(1000).data() for _ in range(4)]
        assert got == [b"m0", b"m1", b"m2", b"m3"]
        assert any("damaged checkpoint" in r.getMessage() for r in caplog.records)
        produce(fresh, [b"m4"])  # writers go on too
    finally:
        fresh.close()


def test_a_corrupt_newest_cursor_version_falls_back_to_an_older_one_and_says_so(
        root: Path, client: Client, new_process: Any, caplog: pytest.LogCaptureFixture) -> None:
    produce(client, [f"m{i}".encode() for i in range(4)])
    consumer = client.subscribe(T, "s", consumer_type=ConsumerType.Shared, initial_position=InitialPosition.Earliest)
    for _ in range(2):
        consumer.acknowledge(consumer.receive(5000))
    consumer.close()
    cursors = root / TOPIC_DIR / "_cursors" / "s"
    newest = max(cursors.glob("*.json"))
    older = int(newest.name[:20]) - 1
    newest.write_bytes(newest.read_bytes()[:10])  # torn
    new_process()
    with caplog.at_level(logging.WARNING):
        version, cursor = CursorStore(LocalFileIO(str(root)), TOPIC_DIR, "s").load()
    assert cursor is not None and version == int(newest.name[:20])  # numbered above the damage
    expected = CursorStore(LocalFileIO(str(root)), TOPIC_DIR, "s").state._read(older)
    assert cursor.to_json()["markDelete"] == (expected or {})["markDelete"]
    assert any(newest.name in r.getMessage() for r in caplog.records)
    fresh = Client(str(root))
    try:  # subscribe, stats and retention of the topic work on
        fresh.subscribe(T, "s", consumer_type=ConsumerType.Shared).close()
        from broker_core.broker.stats import topic_stats

        assert "s" in json.dumps(topic_stats(fresh._broker, T), default=str)
        version_after, _ = CursorStore(LocalFileIO(str(root)), TOPIC_DIR, "s").load()
        assert version_after > version  # the next update was written after the damaged version
    finally:
        fresh.close()


def test_a_cursor_document_that_is_json_but_not_a_cursor_is_skipped_too(root: Path, client: Client) -> None:
    produce(client, [b"a"])
    consumer = client.subscribe(T, "s", initial_position=InitialPosition.Earliest)
    consumer.acknowledge(consumer.receive(5000))
    consumer.close()
    io = LocalFileIO(str(root))
    cursors = root / TOPIC_DIR / "_cursors" / "s"
    newest = max(cursors.glob("*.json"))
    newest.write_text(json.dumps({"markDelete": "not a number"}))
    version, cursor = CursorStore(io, TOPIC_DIR, "s").load()
    assert cursor is not None and version == int(newest.name[:20])


@pytest.mark.parametrize("content", [b"{", b"[1]", b'{"partitions": "many"}', b'{"partitions": -3}', b"{}"])
def test_a_corrupt_partition_record_is_a_typed_error_naming_the_file(root: Path, client: Client,
                                                                     content: bytes) -> None:
    admin = Admin(LocalFileIO(str(root)), BrokerConfig(fsync_enabled=False))
    admin.create_partitioned_topic("persistent://public/default/p", 3)
    record = max((root / "public/default/persistent/_partitioned/p").glob("*.json"))
    record.write_bytes(content)
    fresh = Admin(LocalFileIO(str(root)), BrokerConfig(fsync_enabled=False))
    with pytest.raises(LogCorrupted, match=record.name) as info:
        fresh.partitioned_topic_metadata("persistent://public/default/p")
    assert isinstance(info.value, PulsarException)


@pytest.mark.parametrize("content", [b"{", b"[]", b'{"policies": {"retention_time_in_minutes": "x"}}',
                                     b'{"policies": 7}'])
def test_a_corrupt_policy_record_is_a_typed_error_naming_the_file(root: Path, client: Client,
                                                                  content: bytes) -> None:
    from broker_core.broker.broker import Broker

    record = max((root / "public/default/_namespace").glob("*.json"))
    record.write_bytes(content)
    with pytest.raises(LogCorrupted, match=record.name):
        broker = Broker(LocalFileIO(str(root)), BrokerConfig(fsync_enabled=False))
        broker.policies.effective(TopicName.parse(T))
