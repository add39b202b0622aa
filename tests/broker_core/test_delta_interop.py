"""An independent Delta reader (``deltalake``) sees an internal topic as exactly its messages.

Every check runs ``deltalake`` in a subprocess (``delta_probe.py``): delta-rs intermittently aborts
at interpreter exit (reference notes section 6), which would fail the whole pytest run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from delta_probe import sorted_rows, values_digest
from log_helpers import TOPIC_DIR, open_topic, producer_table, read_all, segment_table
from processes import run_probe

from broker_core.errors import LogCorrupted
from broker_core.log.actions import Action, Remove
from broker_core.log.checkpoint import LOG_DIR
from broker_core.log.snapshot import Snapshot
from broker_core.topic.topic_log import TopicLog

pytest.importorskip("deltalake")

PROBE = Path(__file__).with_name("delta_probe.py")


def probe(root: Path, **args: Any) -> dict[str, Any]:
    """What deltalake reads from the topic directory under ``root``."""
    return run_probe(PROBE, payload={"path": str(root / TOPIC_DIR), **args})


def expected(topic: TopicLog) -> list[dict[str, Any]]:
    table, _ = read_all(topic)
    return sorted_rows(table)


def _rows(start: int, n: int, *, producer: str = "p") -> list[dict[str, Any]]:
    """Varied messages: tombstones, empty values, keys, properties, distinct publish times."""
    out: list[dict[str, Any]] = []
    for seq in range(start, start + n):
        kind = seq % 5
        out.append(
            {
                "value": None if kind == 0 else b"" if kind == 1 else f"v{seq}".encode() * (seq % 3 + 1),
                "key": None if kind == 2 else f"k{seq % 4}",
                "ordering_key": b"ok" if kind == 3 else None,
                "properties": None if kind == 4 else {"seq": str(seq), "empty": ""} if kind else {},
                "producer_name": producer,
                "sequence_id": seq,
                "publish_time": 1_700_000_000_000 + seq * 7,
                "event_time": None if kind else 1_600_000_000_000 + seq,
            }
        )
    return out


def _append(topic: TopicLog, start: int, n: int, *, producer: str = "p") -> None:
    topic.append(segment_table(_rows(start, n, producer=producer)), layout=[-n], dedup=True)


def test_deltalake_reads_exactly_the_committed_messages(tmp_path: Path) -> None:
    topic = open_topic(tmp_path, fsync=False)
    _append(topic, 0, 10)
    _append(topic, 5, 10)  # a resend: rows 5-9 are dropped as duplicates
    _append(topic, 0, 3, producer="q")
    snap = topic.snapshot()
    assert snap.next_offset == 18
    seen = probe(tmp_path, rows=True, app_ids=["p", "q", "nobody"])
    assert seen["version"] == snap.version
    assert seen["protocol"] == [1, 2]
    assert seen["num_rows"] == 18
    assert seen["num_files"] == len(snap.segments)
    assert seen["rows"] == expected(topic)
    assert seen["txns"] == {"p": 14, "q": 2, "nobody": None}
    values = {r["sequence_id"]: r["value"] for r in seen["rows"] if r["producer_name"] == "p"}
    assert values[0] is None  # a tombstone stays null
    assert values[1] == ""  # and an empty value stays empty
    times = {r["sequence_id"]: r["publish_time"] for r in seen["rows"] if r["producer_name"] == "p"}
    assert times[3] == (1_700_000_000_000 + 21) * 1000


def test_deltalake_reads_the_same_before_and_after_checkpoints(tmp_path: Path) -> None:
    topic = open_topic(tmp_path, checkpoint_interval=5, fsync=False)
    for i in range(4):
        _append(topic, i * 4, 4)
    log_dir = tmp_path / TOPIC_DIR / LOG_DIR
    assert not list(log_dir.glob("*.checkpoint.parquet"))
    before = probe(tmp_path, rows=True, app_ids=["p"])
    assert before["version"] == 4
    assert before["rows"] == expected(topic)
    assert before["txns"] == {"p": 15}

    for i in range(4, 7):  # version 5 writes a checkpoint; 6 and 7 follow it as JSON
        _append(topic, i * 4, 4)
    assert (log_dir / f"{5:020d}.checkpoint.parquet").exists()
    after = probe(tmp_path, rows=True, app_ids=["p"])
    assert after["version"] == 7
    assert after["rows"] == expected(topic)
    assert after["txns"] == {"p": 27}

    # with the commits the checkpoint covers gone, deltalake must take everything from it
    topic.log.checkpoint()
    for version in range(7):
        (log_dir / f"{version:020d}.json").unlink()
    only_checkpoint = probe(tmp_path, rows=True, app_ids=["p", "pubsub.nextOffset"])
    assert only_checkpoint["version"] == 7
    assert only_checkpoint["rows"] == expected(topic)
    assert only_checkpoint["txns"] == {"p": 27, "pubsub.nextOffset": 28}


def test_deltalake_does_not_see_removed_segments(tmp_path: Path) -> None:
    topic = open_topic(tmp_path, checkpoint_interval=5, fsync=False)
    for i in range(3):
        _append(topic, i * 3, 3)
    first = topic.snapshot().segments[0]

    def remove(snap: Snapshot) -> list[Action]:
        return [Remove(path=first.path, data_change=True, deletion_timestamp=int(time.time() * 1000))]

    topic.log.commit(remove, operation="DELETE")
    _append(topic, 9, 3)  # version 5: a checkpoint with the tombstone
    snap = topic.snapshot()
    assert snap.first_offset == 3
    seen = probe(tmp_path, rows=True)
    assert seen["num_rows"] == 9
    assert seen["rows"] == expected(topic)
    assert {r["sequence_id"] for r in seen["rows"]} == set(range(3, 12))


def test_deltalake_after_many_commits_and_time_travel(tmp_path: Path) -> None:
    topic = open_topic(tmp_path, fsync=False)  # the default interval: checkpoints at 100 and 200
    seq = 0
    for i in range(230):
        n = i % 7 + 1
        topic.append(producer_table(f"p{i % 3}", range(seq, seq + n)), layout=[n], dedup=True)
        seq += n
    snap = topic.snapshot()
    assert snap.version == 230
    app_ids = ["p0", "p1", "p2"]
    seen = probe(tmp_path, app_ids=app_ids)
    table, _ = read_all(topic)
    assert seen["num_rows"] == table.num_rows == seq
    assert seen["digest"] == values_digest(table)
    assert seen["txns"] == {a: snap.txn_version(a) for a in app_ids}
    assert seen["num_files"] == 230
    old = probe(tmp_path, version=150)
    assert old["version"] == 150
    at_150 = sum(i % 7 + 1 for i in range(150))
    assert old["num_rows"] == at_150
    assert old["digest"] == values_digest(topic.read(0, at_150)[0])


def test_a_checkpoint_written_by_deltalake_opens_to_the_same_state(tmp_path: Path) -> None:
    topic = open_topic(tmp_path, fsync=False)
    for i in range(7):
        _append(topic, i * 3, 3)
    before = topic.snapshot()
    seen = probe(tmp_path, create_checkpoint=True, app_ids=["p"])
    log_dir = tmp_path / TOPIC_DIR / LOG_DIR
    assert (log_dir / f"{7:020d}.checkpoint.parquet").exists()
    assert json.loads((log_dir / "_last_checkpoint").read_text())["version"] == 7
    assert seen["txns"] == {"p": 20}
    for version in range(7):  # only deltalake's checkpoint can tell the state now
        (log_dir / f"{version:020d}.json").unlink()
    reopened = open_topic(tmp_path, create=False, fsync=False)
    snap = reopened.snapshot()
    assert snap.version == 7
    assert (snap.next_offset, snap.next_entry_id, snap.txn_version("p")) == (21, 21, 20)
    assert [(s.path, s.base_offset, s.layout) for s in snap.segments] == [
        (s.path, s.base_offset, s.layout) for s in before.segments
    ]
    assert expected(reopened) == expected(topic)
    # and the topic goes on: dedup still knows producer p
    result = reopened.append(segment_table(_rows(20, 2)), layout=[-2], dedup=True)
    assert result.kept.tolist() == [False, True]


@pytest.mark.parametrize("checkpointed", [False, True], ids=["json", "checkpoint"])
def test_a_foreign_append_is_reported_not_misread(tmp_path: Path, checkpointed: bool) -> None:
    topic = open_topic(tmp_path, fsync=False)
    _append(topic, 0, 3)
    seen = probe(tmp_path, append_foreign=True, create_checkpoint=checkpointed)
    assert seen["num_rows"] == 4  # deltalake itself is fine with it
    with pytest.raises(LogCorrupted, match="pubsub tags"):
        open_topic(tmp_path, create=False).snapshot()

