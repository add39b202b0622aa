"""A root written by ``main`` before issues 26-28 (``tests/golden/roots/pre_issue26_root``, made by
``make_pre_issue26_root.py`` with commit 6fcbcd8) reads, resumes, checks and takes writes today.

What those issues changed of the format: checkpoints carry a summary (D130), cursor entries a
``holder`` (D137) and an ``activity`` record (D161), object-store roots a marker (D150).  A root
without them must behave as it did: nothing refused, nothing redelivered, nothing lost.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from broker_core import BrokerConfig, Client, ConsumerType, InitialPosition, MessageId
from broker_core.cli import main
from broker_core.errors import ConsumerBusy, Timeout

GOLDEN = Path(__file__).parent.parent / "golden" / "roots" / "pre_issue26_root"
ALL = [f"m{i}".encode() for i in range(10)]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    copy = tmp_path / "root"
    shutil.copytree(GOLDEN, copy)
    return copy


def _client(root: Path) -> Client:
    return Client(str(root), broker_config=BrokerConfig(fsync_enabled=False, broker_deduplication_enabled=True))


def test_every_message_reads_through_the_old_checkpoint(root: Path) -> None:
    client = _client(root)
    reader = client.create_reader("t", MessageId.earliest)
    got = [reader.read_next(timeout_millis=5000).data() for _ in range(10)]
    assert got == ALL and not reader.has_message_available()
    client.close()


def test_the_subscription_resumes_after_its_acks_and_the_compacted_view_reads(root: Path) -> None:
    client = _client(root)
    consumer = client.subscribe("t", "s", consumer_type=ConsumerType.Shared,
                                initial_position=InitialPosition.Earliest)
    got = []
    for _ in range(6):
        msg = consumer.receive(timeout_millis=5000)
        got.append(msg.data())
        consumer.acknowledge(msg)
    assert sorted(got) == ALL[4:]
    with pytest.raises(Timeout):
        consumer.receive(timeout_millis=200)
    compacted = client.create_reader("t", MessageId.earliest, is_read_compacted=True)
    latest = {}
    while compacted.has_message_available():
        msg = compacted.read_next(timeout_millis=5000)
        latest[msg.partition_key()] = msg.data()
    assert latest == {f"k{i}": f"m{i + 5}".encode() for i in range(5)}
    client.close()


def test_an_old_lease_is_waited_out_and_named(root: Path) -> None:
    client = _client(root)
    with pytest.raises(ConsumerBusy) as caught:
        client.subscribe("t", "e", consumer_type=ConsumerType.Exclusive)
    assert "gone" in str(caught.value) and "lease" in str(caught.value)
    client.close()


def test_check_passes_and_writes_continue_with_dedup_and_a_new_checkpoint(
        root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--root", str(root), "topics", "check", "t"]) == 0
    client = _client(root)
    producer = client.create_producer("t", producer_name="p", batching_enabled=False)
    producer.send(b"m9", partition_key="k4", sequence_id=9)  # a retry: dropped as a duplicate
    producer.send(b"m10", partition_key="k0", sequence_id=10)
    producer.close()
    client.close()
    assert main(["--root", str(root), "checkpoint", "t"]) == 0
    assert main(["--root", str(root), "topics", "check", "t"]) == 0
    assert main(["--root", str(root), "vacuum", "t", "--min-age", "7d"]) == 0  # a dry run, not refused
    capsys.readouterr()
    client = _client(root)
    reader = client.create_reader("t", MessageId.earliest)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(timeout_millis=5000).data())
    assert got == [*ALL, b"m10"]
    client.close()
