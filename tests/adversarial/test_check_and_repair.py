"""Defect 6 of issue 10: `pubsub topics check` finds the damage, and `--repair --execute` fixes what it can."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from adversarial_helpers import TOPIC_DIR, T, commit_file, produce

from broker_core import Client, ConsumerType, DataLoss, InitialPosition, MessageId
from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig
from broker_core.jobs.check import DAMAGED_DIR, TAG_DATA_LOSS, check_topic
from broker_core.log.actions import Remove, decode_actions
from broker_core.log.checkpoint import checkpoint_path
from broker_core.storage import LocalFileIO
from broker_core.topic.scan import ScanTask, scan
from broker_core.topic.topic_log import TopicLog


def _damaged_topic(root: Path, client: Client) -> Path:
    produce(client, [f"m{i}".encode() for i in range(6)], batches=3)
    snap = TopicLog(LocalFileIO(str(root)), TOPIC_DIR).snapshot()
    damaged = root / TOPIC_DIR / snap.segments[1].path
    damaged.write_bytes(damaged.read_bytes()[:40])
    return damaged


def test_check_reports_a_healthy_topic_as_ok(root: Path, client: Client, cli: Any) -> None:
    produce(client, [b"a"])
    code, out, err = cli("topics", "check", "t")
    assert code == 0, err
    assert "ok" in out


def test_check_finds_a_damaged_segment_and_the_dry_run_changes_nothing(root: Path, client: Client,
                                                                     cli: Any) -> None:
    damaged = _damaged_topic(root, client)
    before = sorted(p.name for p in (root / TOPIC_DIR / "_delta_log").iterdir())
    code, out, _err = cli("topics", "check", "t", "--repair", "--json")
    assert code == 1
    [result] = json.loads(out)
    assert [f["kind"] for f in result["findings"]] == ["segment"]
    assert damaged.name in result["findings"][0]["file"] and result["repaired"] == []
    assert sorted(p.name for p in (root / TOPIC_DIR / "_delta_log").iterdir()) == before


def test_repair_sets_a_damaged_segment_aside_with_a_data_loss_record(root: Path, client: Client, cli: Any,
                                                                    new_process: Any) -> None:
    damaged = _damaged_topic(root, client)
    code, out, err = cli("topics", "check", "t", "--repair", "--execute")
    assert code == 0, out + err
    assert (root / TOPIC_DIR / DAMAGED_DIR / damaged.name).read_bytes() == damaged.read_bytes()
    newest = max((root / TOPIC_DIR / "_delta_log").glob("*.json"))
    [record] = [a for a in decode_actions(newest.read_bytes(), version=0) if isinstance(a, Remove)]
    assert record.path == damaged.name and TAG_DATA_LOSS in (record.tags or {})
    assert record.tags is not None and record.tags["pubsub.baseOffset"] == "2"
    assert cli("topics", "check", "t")[0] == 0  # nothing left to report
    new_process()
    fresh = Client(str(root))
    try:  # readers skip the hole (failOnDataLoss=false semantics) ...
        reader = fresh.create_reader(T, start_message_id=MessageId.earliest)
        got = []
        while reader.has_message_available():
            got.append(reader.read_next(1000).data())
        assert got == [b"m0", b"m1", b"m4", b"m5"]
        consumer = fresh.subscribe(T, "s", consumer_type=ConsumerType.Shared,
                                   initial_position=InitialPosition.Earliest)
        assert sorted(consumer.receive(5000).data() for _ in range(4)) == [b"m0", b"m1", b"m4", b"m5"]
        consumer.close()
    finally:
        fresh.close()
    task = ScanTask(root=str(root), topic_path=TOPIC_DIR, topic=T, partition=-1, ranges=((0, 6),))
    with pytest.raises(DataLoss, match=r"\[2, 4\)"):  # ... and a scan that must not lose data fails clearly
        list(scan(task))
    lenient = ScanTask(root=str(root), topic_path=TOPIC_DIR, topic=T, partition=-1, ranges=((0, 6),),
                       fail_on_data_loss=False)
    assert [int(o) for chunk in scan(lenient) for o in chunk.offsets] == [0, 1, 4, 5]


def test_repair_rebuilds_a_damaged_checkpoint_from_the_json_commits(root: Path, client: Client, cli: Any) -> None:
    produce(client, [f"m{i}".encode() for i in range(4)], batches=4)
    log = TopicLog(LocalFileIO(str(root)), TOPIC_DIR)
    version = log.log.checkpoint()
    good = (root / checkpoint_path(TOPIC_DIR, version)).read_bytes()
    (root / checkpoint_path(TOPIC_DIR, version)).write_bytes(b"garbage")
    (root / TOPIC_DIR / "_delta_log" / "_last_checkpoint").write_text("{not json")
    code, out, _ = cli("topics", "check", "t")
    assert code == 1 and "checkpoint" in out and "hint" in out
    code, out, err = cli("topics", "check", "t", "--repair", "--execute")
    assert code == 0, out + err
    assert (root / checkpoint_path(TOPIC_DIR, version)).read_bytes()[:4] == good[:4] == b"PAR1"
    for v in range(version):  # the rebuilt checkpoint alone serves the whole state
        commit_file(root, v).unlink()
    snap = TopicLog(LocalFileIO(str(root)), TOPIC_DIR).snapshot()
    assert snap.version == version and snap.next_offset == 4


def test_check_reports_a_gap_as_not_repairable(root: Path, client: Client, cli: Any) -> None:
    produce(client, [f"m{i}".encode() for i in range(3)], batches=3)
    commit_file(root, 2).unlink()
    code, out, _ = cli("topics", "check", "t", "--repair", "--execute")
    assert code == 1
    assert "version 2 is missing" in out and "restore it from a backup" in out


def test_repair_supersedes_a_damaged_cursor_version(root: Path, client: Client, cli: Any) -> None:
    produce(client, [b"a"])
    client.subscribe(T, "s", consumer_type=ConsumerType.Shared).close()
    newest = max((root / TOPIC_DIR / "_cursors" / "s").glob("*.json"))
    newest.write_text("{")
    assert cli("topics", "check", "t")[0] == 1
    assert cli("topics", "check", "t", "--repair", "--execute")[0] == 0
    assert cli("topics", "check", "t")[0] == 0


def test_check_of_a_namespace_and_bad_arguments(root: Path, client: Client, cli: Any) -> None:
    produce(client, [b"a"])
    assert cli("topics", "check", "--namespace", "public/default")[0] == 0
    assert cli("topics", "check")[0] == 2
    assert cli("topics", "check", "t", "--execute")[0] == 2
    broker = Broker.for_url(str(root), BrokerConfig(fsync_enabled=False))
    with pytest.raises(Exception, match="repair"):
        check_topic(broker, T, repair="yes")  # type: ignore[arg-type]


def test_check_reports_a_damaged_producer_registry(root: Path, client: Client, cli: Any) -> None:
    produce(client, [b"a"])
    newest = max((root / TOPIC_DIR / "_producers").glob("*.json"))
    newest.write_text("[")
    code, out, _ = cli("topics", "check", "t")
    assert code == 1 and "producers" in out and newest.name in out
