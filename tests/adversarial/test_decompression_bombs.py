"""Decompression bombs: a segment of a few kilobytes of zstd that inflates far beyond ``maxMessageSize``.

Readers (consumers of every subscription type, readers, ``peek``, the engines' scan) refuse it with
``SegmentTooLarge`` naming the file, before decompressing it (D125), deliver what precedes it, and
lose nothing: with a limit that admits it, the same subscription receives it.  The bomb here is a
10 MB value read with ``maxMessageSize`` = 64 KiB, so the test stays small; a subprocess checks that
refusing a 64 MB one does not cost its size in memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from adversarial_helpers import TOPIC_DIR, T
from moto_s3 import Root

from broker_core import Client, CompressionType, ConsumerType, InitialPosition, MessageId
from broker_core.config import BrokerConfig
from broker_core.errors import SegmentCorrupted, SegmentTooLarge, Timeout
from broker_core.storage import file_io_for
from broker_core.topic.scan import ScanTask, scan
from broker_core.topic.topic_log import TopicLog

LIMIT_BYTES = 64 * 1024
BOMB_BYTES = 10 * 1000 * 1000


def _client(root: Root, max_message_size: int) -> Client:
    return Client(root.url, storage_options=root.storage_options,
                  broker_config=BrokerConfig(fsync_enabled=False, max_message_size=max_message_size))


def _plant_bomb(root: Root, bomb_bytes: int = BOMB_BYTES) -> str:
    """``before``, a zstd segment holding one message of ``bomb_bytes`` zeros, ``after``, each its own
    segment (written by a producer whose limit allowed it); returns the bomb's file name."""
    writer = _client(root, 2 * bomb_bytes)
    try:
        producer = writer.create_producer(T, batching_enabled=False, compression_type=CompressionType.ZSTD)
        producer.send(b"before")
        producer.send(bytes(bomb_bytes))
        producer.send(b"after")
        producer.close()
    finally:
        writer.close()
    log = TopicLog(file_io_for(root.url, fsync=False, storage_options=root.storage_options), TOPIC_DIR)
    segments = log.snapshot().segments
    assert len(segments) == 3 and segments[1].size_bytes < 64 * 1024  # a small file...
    return segments[1].path


def _check(error: BaseException, name: str) -> None:
    assert isinstance(error, SegmentTooLarge) and isinstance(error, SegmentCorrupted)
    text = str(error)
    assert name in text and f"maxMessageSize={LIMIT_BYTES}" in text and "--repair" in text


@pytest.mark.parametrize("kind", [ConsumerType.Exclusive, ConsumerType.Shared, ConsumerType.Failover,
                                  ConsumerType.KeyShared])
def test_a_consumer_gets_the_messages_before_a_bomb_then_the_error_and_loses_nothing(
        any_root: Root, new_process: Any, kind: ConsumerType) -> None:
    name = _plant_bomb(any_root)
    new_process()
    client = _client(any_root, LIMIT_BYTES)
    try:
        consumer = client.subscribe(T, "s", consumer_type=kind, initial_position=InitialPosition.Earliest)
        msg = consumer.receive(5000)
        assert msg.data() == b"before"
        consumer.acknowledge(msg)
        with pytest.raises(SegmentTooLarge) as info:
            consumer.receive(5000)
        _check(info.value, name)
        with pytest.raises(Timeout):  # surfaced once, not in a loop
            consumer.receive(300)
        consumer.close()
    finally:
        client.close()
    new_process()
    client = _client(any_root, 2 * BOMB_BYTES)  # a limit that admits it: nothing was lost or skipped
    try:
        consumer = client.subscribe(T, "s", consumer_type=kind)
        assert len(consumer.receive(5000).data()) == BOMB_BYTES
        assert consumer.receive(5000).data() == b"after"
    finally:
        client.close()


def test_a_reader_gets_the_messages_before_a_bomb_then_the_error(any_root: Root, new_process: Any) -> None:
    name = _plant_bomb(any_root)
    new_process()
    client = _client(any_root, LIMIT_BYTES)
    try:
        reader = client.create_reader(T, start_message_id=MessageId.earliest)
        assert reader.read_next(5000).data() == b"before"
        with pytest.raises(SegmentTooLarge) as info:
            reader.read_next(5000)
        _check(info.value, name)
    finally:
        client.close()


def test_the_engines_scan_refuses_a_bomb(any_root: Root) -> None:
    name = _plant_bomb(any_root)
    task = ScanTask(root=any_root.url, topic_path=TOPIC_DIR, topic=T, partition=-1, ranges=((0, 3),),
                    storage_options=tuple(sorted(any_root.storage_options.items())), max_message_bytes=LIMIT_BYTES)
    with pytest.raises(SegmentTooLarge) as info:
        list(scan(task))
    _check(info.value, name)


def test_peek_json_refuses_a_bomb(root: Path, cli: Any, new_process: Any) -> None:
    name = _plant_bomb(Root("local", str(root), {}))
    new_process()
    (root / "_pubsub" / "broker.toml").write_text(f"fsyncEnabled = false\nmaxMessageSize = {LIMIT_BYTES}\n")
    code, out, err = cli("topics", "peek", "t", "--earliest", "-n", "3", "--json")
    assert code != 0 and not out, (code, out, err)
    assert name in err and f"maxMessageSize={LIMIT_BYTES}" in err, err


_MEASURE = textwrap.dedent("""
    import json, sys
    from broker_core import Client, MessageId
    from broker_core.config import BrokerConfig
    from broker_core.errors import SegmentTooLarge
    client = Client(sys.argv[1], broker_config=BrokerConfig(fsync_enabled=False, max_message_size=65536))
    def peak_kib():  # this process's peak RSS (``ru_maxrss`` would carry the parent's across exec)
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    start = peak_kib()
    reader = client.create_reader("persistent://public/default/t", start_message_id=MessageId.earliest)
    reader.read_next(5000)  # ``before`` (the reader may decode ahead)
    try:
        reader.read_next(5000)
        refused = False
    except SegmentTooLarge:
        refused = True
    grown = peak_kib() - start
    print(json.dumps({"refused": refused, "grown_kib": grown, "start_kib": start}))
    client.close()
""")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the peak RSS from /proc")
def test_refusing_a_bomb_does_not_cost_its_size_in_memory(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    root = Root("local", str(tmp_path / "root"), {})
    bomb_bytes = 64 * 1000 * 1000
    _plant_bomb(root, bomb_bytes)
    done = subprocess.run([sys.executable, "-c", _MEASURE, root.url], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["refused"], result
    assert result["grown_kib"] * 1024 < bomb_bytes // 8, result


def test_check_finds_a_bomb_and_repair_sets_it_aside(root: Path, cli: Any, new_process: Any) -> None:
    name = _plant_bomb(Root("local", str(root), {}))
    new_process()
    (root / "_pubsub" / "broker.toml").write_text(f"fsyncEnabled = false\nmaxMessageSize = {LIMIT_BYTES}\n")
    code, out, err = cli("topics", "check", "t")
    assert code != 0 and name in out + err, (code, out, err)
    code, out, err = cli("topics", "check", "t", "--repair", "--execute")
    assert code == 0, (code, out, err)
    new_process()
    client = Client(str(root))
    try:
        reader = client.create_reader(T, start_message_id=MessageId.earliest)
        assert reader.read_next(5000).data() == b"before"
        assert reader.read_next(5000).data() == b"after"  # (the bomb is recorded as lost)
    finally:
        client.close()


def _broker(root: Root, max_message_size: int) -> Any:
    from broker_core.broker.broker import Broker

    return Broker.for_url(root.url, BrokerConfig(fsync_enabled=False, max_message_size=max_message_size),
                          storage_options=root.storage_options)


def test_merge_segments_refuses_a_bomb_and_merges_nothing(any_root: Root, new_process: Any) -> None:
    from broker_core.jobs import merge_segments

    name = _plant_bomb(any_root)
    new_process()
    broker = _broker(any_root, LIMIT_BYTES)
    with pytest.raises(SegmentTooLarge) as caught:
        merge_segments(broker, T, min_age_ms=0, target_bytes=1 << 30, dry_run=False)
    _check(caught.value, name)
    log = TopicLog(file_io_for(any_root.url, fsync=False, storage_options=any_root.storage_options), TOPIC_DIR)
    assert [s.path for s in log.snapshot().segments][1] == name  # nothing was swapped


def test_compaction_reads_refuse_a_bomb(any_root: Root, new_process: Any) -> None:
    from broker_core.jobs.compaction import compaction_tasks, plan_compaction, read_compaction_task
    from broker_core.naming import TopicName

    name = _plant_bomb(any_root)
    new_process()
    broker = _broker(any_root, LIMIT_BYTES)
    plan = plan_compaction(broker.topic_log(TopicName.parse(T)), T)
    assert plan is not None and plan.max_message_bytes == LIMIT_BYTES
    io = file_io_for(any_root.url, fsync=False, storage_options=any_root.storage_options)
    bomb = next(t for t in compaction_tasks(plan) if t.path == name)
    with pytest.raises(SegmentTooLarge) as caught:
        read_compaction_task(io, plan.topic_path, bomb)
    assert name in str(caught.value)
