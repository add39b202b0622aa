"""Defect 2 of issue 10: a missing commit in the middle of the log is corruption, not its end."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from adversarial_helpers import TOPIC_DIR, T, commit_file, newest_version, produce

from broker_core import Client, LogCorrupted, MessageId
from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig
from broker_core.jobs import cleanup_logs, vacuum
from broker_core.storage import LocalFileIO
from broker_core.topic.topic_log import TopicLog


def _six_commits(root: Path, client: Client) -> list[str]:
    produce(client, [f"m{i}".encode() for i in range(6)], batches=6)
    assert newest_version(root) == 6
    return sorted(p.name for p in (root / TOPIC_DIR).glob("part-*.parquet"))


def test_a_reader_names_the_missing_version_instead_of_stopping_early(root: Path, client: Client,
                                                                      new_process: Any) -> None:
    _six_commits(root, client)
    commit_file(root, 3).unlink()
    with pytest.raises(LogCorrupted, match="missing version 3") as info:
        TopicLog(LocalFileIO(str(root)), TOPIC_DIR).snapshot()
    assert info.value.version == 3
    new_process()
    fresh = Client(str(root))
    try:
        with pytest.raises(LogCorrupted, match="missing version 3"):
            reader = fresh.create_reader(T, start_message_id=MessageId.earliest)
            while reader.has_message_available():
                reader.read_next(1000)
    finally:
        fresh.close()


def test_vacuum_refuses_a_log_with_a_gap_and_deletes_nothing(root: Path, client: Client, cli: Any,
                                                             new_process: Any) -> None:
    segments = _six_commits(root, client)
    new_process()
    commit_file(root, 3).unlink()
    old = time.time() - 7200
    for name in segments:
        __import__("os").utime(root / TOPIC_DIR / name, (old, old))
    code, _, err = cli("vacuum", "t", "--min-age", "1h", "--execute")
    assert code != 0 and "missing version 3" in err
    assert sorted(p.name for p in (root / TOPIC_DIR).glob("part-*.parquet")) == segments
    assert not commit_file(root, 3).exists()  # nothing was committed into the gap
    broker = Broker.for_url(str(root), BrokerConfig(fsync_enabled=False))
    with pytest.raises(LogCorrupted, match="missing version 3"):
        vacuum(broker, T, min_age_ms=3_600_000, dry_run=False)
    with pytest.raises(LogCorrupted, match="missing version 3"):
        cleanup_logs(broker, T, retention_ms=3_600_000, dry_run=False)


def test_a_writer_loaded_before_the_gap_refuses_to_fill_it(root: Path, client: Client) -> None:
    _six_commits(root, client)
    stale = TopicLog(LocalFileIO(str(root)), TOPIC_DIR)
    stale.snapshot()
    produce(client, [b"m6", b"m7"], batches=2)  # versions 7 and 8
    commit_file(root, 7).unlink()
    # the stale handle is at 6: version 7 is missing, 8 exists -> it must not write 7
    with pytest.raises(LogCorrupted, match="missing version 7"):
        stale.append(_one_row(), layout=[1])
    assert not commit_file(root, 7).exists()


def test_a_poller_notices_a_gap_while_idle(root: Path, client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    _six_commits(root, client)
    log = TopicLog(LocalFileIO(str(root)), TOPIC_DIR)
    log.snapshot()
    produce(client, [b"x", b"y"], batches=2)  # versions 7 and 8
    commit_file(root, 7).unlink()
    log.log._verified_s -= 10  # the idle check runs at most once a second
    with pytest.raises(LogCorrupted, match="missing version 7"):
        log.snapshot()


def test_a_zero_byte_commit_is_corruption_not_an_empty_version(root: Path, client: Client) -> None:
    _six_commits(root, client)
    commit_file(root, 6).write_bytes(b"")
    with pytest.raises(LogCorrupted, match="log version 6 is empty"):
        TopicLog(LocalFileIO(str(root)), TOPIC_DIR).snapshot()


def _one_row() -> Any:
    import pyarrow as pa

    from broker_core.log.segment import SEGMENT_SCHEMA

    row = {name: [None] for name in SEGMENT_SCHEMA.names}
    row.update(value=[b"v"], sticky_key_hash=[0], publish_time=[0])
    return pa.Table.from_pydict(row, schema=SEGMENT_SCHEMA)
