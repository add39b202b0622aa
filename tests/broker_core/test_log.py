"""The Delta-style transaction log: actions, commits and conflicts, checkpoints, segment id math."""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.errors import BrokerPersistenceError, CommitConflict, LogCorrupted, TopicNotFound
from broker_core.log.actions import (
    Action,
    Add,
    CommitInfo,
    Format,
    Metadata,
    Protocol,
    Remove,
    Txn,
    decode_actions,
    encode_actions,
)
from broker_core.log.checkpoint import LAST_CHECKPOINT, LOG_DIR, checkpoint_path, read_last_checkpoint
from broker_core.log.segment import delta_schema_string
from broker_core.log.segment_ref import (
    SegmentRef,
    layout_entries,
    layout_from_str,
    layout_messages,
    layout_to_str,
    normalise_layout,
)
from broker_core.log.snapshot import TXN_NEXT_ENTRY_ID, TXN_NEXT_OFFSET, Snapshot
from broker_core.log.transaction_log import NothingToCommit, TransactionLog, commit_path
from broker_core.storage import LocalFileIO

TABLE = "public/default/persistent/log-test"


def _metadata() -> Metadata:
    return Metadata(
        id=str(uuid.uuid4()),
        name="persistent://public/default/log-test",
        schema_string=delta_schema_string(),
        configuration={"pubsub.ledgerId": "1234"},
        created_time=1_700_000_000_000,
    )


def _new_log(root: Path, *, checkpoint_interval: int = 100, **kwargs: Any) -> TransactionLog:
    log = TransactionLog(LocalFileIO(str(root)), TABLE, checkpoint_interval=checkpoint_interval, **kwargs)
    assert log.create(_metadata()) is True
    return log


def _reopen(root: Path, *, checkpoint_interval: int = 100) -> TransactionLog:
    return TransactionLog(LocalFileIO(str(root)), TABLE, checkpoint_interval=checkpoint_interval)


def _segment_name(offset: int, tag: str = "") -> str:
    """A valid segment name (only those may appear in a log) that still tells offset and tag apart."""
    return f"part-{hashlib.md5(f'{offset}{tag}'.encode()).hexdigest()}.parquet"


def _append_actions(snap: Snapshot, layout: list[int], *, tag: str = "") -> list[Action]:
    """What an append of one segment with ``layout`` commits against ``snap`` (no real file)."""
    seg = SegmentRef(
        path=_segment_name(snap.next_offset, tag),
        base_offset=snap.next_offset,
        num_records=layout_messages(layout),
        base_entry_id=snap.next_entry_id,
        layout=layout,
        size_bytes=100 + snap.next_offset,
        min_publish_ms=1_000 + snap.next_offset,
        max_publish_ms=2_000 + snap.next_offset,
        modification_time_ms=1_700_000_000_000 + snap.version,
    )
    return [
        Add(path=seg.path, size=seg.size_bytes, modification_time=seg.modification_time_ms, tags=seg.tags()),
        Txn(app_id=TXN_NEXT_OFFSET, version=seg.end_offset, last_updated=1),
        Txn(app_id=TXN_NEXT_ENTRY_ID, version=seg.end_entry_id, last_updated=1),
    ]


def _segment_key(seg: SegmentRef) -> tuple[object, ...]:
    return (
        seg.path,
        seg.base_offset,
        seg.num_records,
        seg.base_entry_id,
        list(seg.layout),
        seg.size_bytes,
        seg.min_publish_ms,
        seg.max_publish_ms,
        seg.modification_time_ms,
    )


def _state(snap: Snapshot) -> dict[str, object]:
    """Everything a snapshot means, in comparable form."""
    return {
        "version": snap.version,
        "protocol": snap.protocol,
        "metadata": snap.metadata,
        "segments": [_segment_key(s) for s in snap.segments],
        "txns": dict(snap.txns),
        "tombstones": dict(snap.tombstones),
        "next_offset": snap.next_offset,
        "next_entry_id": snap.next_entry_id,
        "first_offset": snap.first_offset,
    }


def _base(actions: list[Action]) -> str:
    add = next(a for a in actions if isinstance(a, Add))
    assert add.tags is not None
    return add.tags["pubsub.baseOffset"]


def _full_replay(io: LocalFileIO) -> Snapshot:
    """The state by replaying every JSON commit from version 0 (no checkpoint involved)."""
    first = io.read_bytes(commit_path(TABLE, 0))
    assert first is not None
    snap = Snapshot.from_actions(0, decode_actions(first, version=0))
    while (data := io.read_bytes(commit_path(TABLE, snap.version + 1))) is not None:
        snap = snap.apply(snap.version + 1, decode_actions(data, version=snap.version + 1))
    return snap


# --- actions ----------------------------------------------------------------------------------------


def _all_kinds_of_actions() -> list[Action]:
    seg_tags = {"pubsub.baseOffset": "0", "pubsub.numRecords": "3", "pubsub.entryLayout": "2,-1"}
    return [
        Protocol(min_reader_version=1, min_writer_version=2),
        Metadata(
            id="id-1",
            name="n",
            description="d",
            format=Format(provider="parquet", options={"o": "v"}),
            schema_string=delta_schema_string(),
            partition_columns=[],
            configuration={"pubsub.ledgerId": "7", "delta.appendOnly": "false"},
            created_time=5,
        ),
        Add(
            path=_segment_name(1),
            partition_values={},
            size=10,
            modification_time=11,
            data_change=True,
            stats='{"numRecords":3}',
            tags=seg_tags,
        ),
        Remove(
            path=_segment_name(0), data_change=True, deletion_timestamp=12, extended_file_metadata=True, size=9
        ),
        Txn(app_id="producer-\u00e9\u2028x", version=2**62, last_updated=13),
        CommitInfo(
            timestamp=14,
            operation="WRITE",
            operation_parameters={"mode": "Append", "n": 3},
            read_version=0,
            is_blind_append=False,
            engine_info="x",
            customField={"nested": [1, 2]},  # type: ignore[call-arg]
        ),
    ]


def test_actions_round_trip_through_a_commit_file() -> None:
    actions = _all_kinds_of_actions()
    data = encode_actions(actions)
    assert data.endswith(b"\n")
    assert len(data.splitlines()) == len(actions)  # one action per line
    for line in data.decode().split("\n")[:-1]:
        assert len(json.loads(line)) == 1
    assert decode_actions(data, version=3) == actions


def test_encoded_actions_use_the_delta_field_names() -> None:
    lines = [json.loads(line) for line in encode_actions(_all_kinds_of_actions()).splitlines()]
    kinds = [next(iter(obj)) for obj in lines]
    assert kinds == ["protocol", "metaData", "add", "remove", "txn", "commitInfo"]
    assert lines[0] == {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
    required = {"path", "partitionValues", "size", "modificationTime", "dataChange", "tags"}
    assert set(lines[2]["add"]) >= required
    assert lines[4]["txn"] == {"appId": "producer-\u00e9\u2028x", "version": 2**62, "lastUpdated": 13}
    assert lines[5]["commitInfo"]["customField"] == {"nested": [1, 2]}


@given(
    app_id=st.text(min_size=1, max_size=20),
    version=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    tags=st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=4),
)
def test_txn_and_add_round_trip_any_text(app_id: str, version: int, tags: dict[str, str]) -> None:
    actions: list[Action] = [
        Txn(app_id=app_id, version=version),
        Add(path=_segment_name(0, app_id), size=1, modification_time=2, tags=tags),
    ]
    assert decode_actions(encode_actions(actions), version=1) == actions


def test_decode_skips_blank_lines_and_unknown_actions_and_fields() -> None:
    data = (
        b'\n{"cdc":{"path":"x"}}\n\n{"txn":{"appId":"a","version":3,"futureField":1}}\r\n'
        b'{"domainMetadata":{"domain":"d","configuration":"{}","removed":false}}\n'
    )
    assert decode_actions(data, version=4) == [Txn(app_id="a", version=3)]


def test_decode_keeps_a_raw_line_separator_inside_a_string() -> None:
    # JSON allows U+2028 unescaped in strings and delta-rs (serde_json) writes it raw
    data = '{"commitInfo":{"operation":"a\u2028b\u0085c"}}\n{"txn":{"appId":"x","version":1}}\n'.encode()
    actions = decode_actions(data, version=2)
    assert actions == [CommitInfo(operation="a\u2028b\u0085c"), Txn(app_id="x", version=1)]


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b'{"txn":{"appId":"a","version":1}}\n{"add": {"path": ', "line 2 is not JSON"),
        (b"not json at all\n", "line 1 is not JSON"),
        (b"[1, 2]\n", "not a single action"),
        (b'{"txn":{"appId":"a","version":1},"add":{}}\n', "not a single action"),
        (b'"txn"\n', "not a single action"),
        (b'{"add":{"path":"p"}}\n', "malformed 'add'"),
        (b'{"add":5}\n', "malformed 'add'"),
        (b'{"txn":{"appId":"a","version":"x"}}\n', "malformed 'txn'"),
        (b'{"metaData":{"id":"x"}}\n', "malformed 'metaData'"),
        (b'{"txn":{"appId":"\xff\xfe","version":1}}\n', "not UTF-8"),
    ],
)
def test_decode_of_a_malformed_commit_raises_log_corrupted(data: bytes, fragment: str) -> None:
    with pytest.raises(LogCorrupted, match=fragment) as info:
        decode_actions(data, version=42)
    assert info.value.context["version"] == 42
    assert "version 42" in str(info.value)


# --- create, commit, snapshot -------------------------------------------------------------------------


def test_create_writes_version_zero_once(tmp_path: Path) -> None:
    log = _new_log(tmp_path)
    assert log.exists()
    assert log.create(_metadata()) is False  # the first create wins; nothing replaced
    snap = log.snapshot()
    assert snap.version == 0
    assert snap.protocol == Protocol(min_reader_version=1, min_writer_version=2)
    assert snap.metadata.configuration["pubsub.ledgerId"] == "1234"
    assert snap.ledger_id == 1234
    assert snap.segments == ()
    assert (snap.next_offset, snap.next_entry_id, snap.first_offset) == (0, 0, 0)
    text = (tmp_path / TABLE / LOG_DIR / f"{0:020d}.json").read_text()
    lines = [json.loads(line) for line in text.splitlines()]
    assert [next(iter(obj)) for obj in lines] == ["protocol", "metaData", "commitInfo"]


def test_snapshot_of_a_missing_table_is_topic_not_found(tmp_path: Path) -> None:
    log = TransactionLog(LocalFileIO(str(tmp_path)), TABLE)
    assert not log.exists()
    with pytest.raises(TopicNotFound):
        log.snapshot()


def test_commits_are_dense_versions_and_a_fresh_log_sees_them(tmp_path: Path) -> None:
    log = _new_log(tmp_path)
    r1 = log.commit(lambda s: _append_actions(s, [3]), operation="WRITE")
    r2 = log.commit(lambda s: _append_actions(s, [-2, 4]), operation="WRITE", parameters={"mode": "Append"})
    assert (r1.version, r2.version) == (1, 2)
    assert (r1.attempts, r2.attempts) == (1, 1)
    snap = log.snapshot()
    assert snap is r2.snapshot or _state(snap) == _state(r2.snapshot)
    assert [(s.base_offset, s.end_offset, s.base_entry_id, s.end_entry_id) for s in snap.segments] == [
        (0, 3, 0, 1),
        (3, 9, 1, 4),
    ]
    assert (snap.next_offset, snap.next_entry_id) == (9, 4)
    fresh = _reopen(tmp_path)
    assert _state(fresh.snapshot()) == _state(snap)
    info = json.loads((tmp_path / TABLE / LOG_DIR / f"{2:020d}.json").read_text().splitlines()[-1])
    assert info["commitInfo"]["readVersion"] == 1
    assert info["commitInfo"]["operationParameters"] == {"mode": "Append"}


def test_polling_sees_another_writers_commits(tmp_path: Path) -> None:
    reader = _new_log(tmp_path)
    writer = _reopen(tmp_path)
    assert reader.snapshot().version == 0
    assert not reader.has_newer_version()
    writer.commit(lambda s: _append_actions(s, [1]), operation="WRITE")
    assert reader.has_newer_version()
    assert reader.cached_snapshot().version == 0  # no storage access
    assert reader.snapshot().version == 1
    assert not reader.has_newer_version()


def test_nothing_to_commit_and_build_errors_write_nothing(tmp_path: Path) -> None:
    log = _new_log(tmp_path)

    def nothing(snap: Snapshot) -> list[Action]:
        raise NothingToCommit("no rows")

    def broken(snap: Snapshot) -> list[Action]:
        raise RuntimeError("boom")

    with pytest.raises(NothingToCommit):
        log.commit(nothing, operation="WRITE")
    with pytest.raises(RuntimeError, match="boom"):
        log.commit(broken, operation="WRITE")
    assert log.snapshot().version == 0
    assert not (tmp_path / TABLE / LOG_DIR / f"{1:020d}.json").exists()


def test_a_lost_race_rebuilds_against_the_winner_and_takes_the_next_version(tmp_path: Path) -> None:
    a = _new_log(tmp_path)
    b = _reopen(tmp_path)
    seen: list[tuple[int, int]] = []

    def build(snap: Snapshot) -> list[Action]:
        seen.append((snap.version, snap.next_offset))
        if len(seen) == 1:  # b commits version 1 while a is building its version 1
            b.commit(
                lambda s: [*_append_actions(s, [5], tag="-b"), Txn(app_id="b", version=1)], operation="WRITE"
            )
        return [*_append_actions(snap, [2], tag="-a"), Txn(app_id="a", version=1)]

    result = a.commit(build, operation="WRITE")
    assert seen == [(0, 0), (1, 5)]  # re-validated against b's commit, offsets moved
    assert (result.version, result.attempts) == (2, 2)
    # nothing overwritten: version 1 is still b's commit, version 2 is a's
    v1 = decode_actions((tmp_path / TABLE / LOG_DIR / f"{1:020d}.json").read_bytes(), version=1)
    v2 = decode_actions((tmp_path / TABLE / LOG_DIR / f"{2:020d}.json").read_bytes(), version=2)
    assert Txn(app_id="b", version=1) in v1
    assert Txn(app_id="a", version=1) in v2
    snap = _reopen(tmp_path).snapshot()
    segments = [(s.path, s.base_offset) for s in snap.segments]
    assert segments == [(_segment_name(0, "-b"), 0), (_segment_name(5, "-a"), 5)]
    assert (snap.txn_version("a"), snap.txn_version("b")) == (1, 1)


def test_threads_with_separate_logs_commit_dense_versions_without_overwrites(tmp_path: Path) -> None:
    _new_log(tmp_path)
    writers, commits_each = 4, 25
    barrier = threading.Barrier(writers)
    results: dict[int, list[int]] = {i: [] for i in range(writers)}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        log = _reopen(tmp_path, checkpoint_interval=10)
        try:
            barrier.wait()
            for k in range(commits_each):

                def build(snap: Snapshot, k: int = k) -> list[Action]:
                    return [*_append_actions(snap, [i + 1], tag=f"-w{i}-{k}"), Txn(app_id=f"w{i}", version=k)]

                results[i].append(log.commit(build, operation="WRITE").version)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    versions = sorted(v for vs in results.values() for v in vs)
    assert versions == list(range(1, writers * commits_each + 1))
    for i, vs in results.items():
        assert vs == sorted(vs)  # each writer's own commits are ordered
        for k, version in enumerate(vs):
            data = (tmp_path / TABLE / LOG_DIR / f"{version:020d}.json").read_bytes()
            actions = decode_actions(data, version=version)
            assert Txn(app_id=f"w{i}", version=k) in actions  # the file still holds what this writer wrote
            paths = [a.path for a in actions if isinstance(a, Add)]
            assert paths == [_segment_name(_base(actions), f"-w{i}-{k}")]
    snap = _reopen(tmp_path).snapshot()
    assert snap.version == writers * commits_each
    offsets = [(s.base_offset, s.end_offset) for s in snap.segments]
    assert offsets[0][0] == 0
    assert all(prev[1] == nxt[0] for prev, nxt in itertools.pairwise(offsets))
    assert snap.next_offset == commits_each * sum(range(1, writers + 1))
    assert [s.base_entry_id for s in snap.segments] == list(range(writers * commits_each))
    assert {snap.txn_version(f"w{i}") for i in range(writers)} == {commits_each - 1}
    assert _state(snap) == _state(_full_replay(LocalFileIO(str(tmp_path))))


def test_commit_gives_up_with_commit_conflict_after_max_retries(tmp_path: Path) -> None:
    log = _new_log(tmp_path, max_retries=3)
    rival = _reopen(tmp_path)

    def build(snap: Snapshot) -> list[Action]:
        rival.commit(lambda s: _append_actions(s, [1], tag="-rival"), operation="WRITE")  # always first
        return _append_actions(snap, [1], tag="-loser")

    with pytest.raises(CommitConflict, match="3 conflicting attempts"):
        log.commit(build, operation="WRITE")
    snap = _reopen(tmp_path).snapshot()
    assert snap.version == 3
    assert [s.path for s in snap.segments] == [_segment_name(s.base_offset, "-rival") for s in snap.segments]


# --- checkpoints ---------------------------------------------------------------------------------------


def _build_history(log: TransactionLog, commits: int) -> None:
    """Appends, a remove of the first segment, and producer txns: something of every kind."""
    for i in range(commits):
        actions: list[Action]
        if i == 3:
            actions = [Remove(path=log.snapshot().segments[0].path, deletion_timestamp=99, data_change=True)]

            def remove(s: Snapshot, actions: list[Action] = actions) -> list[Action]:
                return actions

            log.commit(remove, operation="DELETE")
        else:
            layout = [[2], [-3], [1, -2, 4]][i % 3]
            producer_txn = Txn(app_id=f"p{i % 2}", version=i)

            def build(s: Snapshot, layout: list[int] = layout, txn: Txn = producer_txn) -> list[Action]:
                return [*_append_actions(s, layout), txn]

            log.commit(build, operation="WRITE")


def test_checkpoint_every_n_versions_and_reopening_equals_full_replay(tmp_path: Path) -> None:
    log = _new_log(tmp_path, checkpoint_interval=5)
    _build_history(log, 12)
    log_dir = tmp_path / TABLE / LOG_DIR
    checkpoints = sorted(p.name for p in log_dir.glob("*.checkpoint.parquet"))
    assert checkpoints == [f"{5:020d}.checkpoint.parquet", f"{10:020d}.checkpoint.parquet"]
    assert json.loads((log_dir / LAST_CHECKPOINT).read_text())["version"] == 10
    io = LocalFileIO(str(tmp_path))
    replayed = _full_replay(io)
    assert replayed.version == 12
    assert replayed.tombstones  # the remove is part of the compared state
    assert replayed.first_offset > 0
    assert _state(_reopen(tmp_path, checkpoint_interval=5).snapshot()) == _state(replayed)
    assert _state(log.snapshot()) == _state(replayed)
    # prove the reopen really starts at the checkpoint: drop the commits it covers
    for version in range(10):
        (log_dir / f"{version:020d}.json").unlink()
    assert _state(_reopen(tmp_path, checkpoint_interval=5).snapshot()) == _state(replayed)


def test_reopening_at_exactly_a_checkpoint_version(tmp_path: Path) -> None:
    log = _new_log(tmp_path, checkpoint_interval=5)
    _build_history(log, 5)  # versions 1..5 (one of them a remove)
    assert log.snapshot().version == 5
    replayed = _full_replay(LocalFileIO(str(tmp_path)))
    for version in range(5):
        (tmp_path / TABLE / LOG_DIR / f"{version:020d}.json").unlink()
    assert _state(_reopen(tmp_path, checkpoint_interval=5).snapshot()) == _state(replayed)


@pytest.mark.parametrize("hint", [None, b"not json", b'{"size": 3}', b'{"version": 9999, "size": 1}'])
def test_a_missing_or_unusable_hint_falls_back_to_listing(tmp_path: Path, hint: bytes | None) -> None:
    log = _new_log(tmp_path, checkpoint_interval=5)
    _build_history(log, 13)
    log_dir = tmp_path / TABLE / LOG_DIR
    replayed = _full_replay(LocalFileIO(str(tmp_path)))
    if hint is None:
        (log_dir / LAST_CHECKPOINT).unlink()
    else:
        (log_dir / LAST_CHECKPOINT).write_bytes(hint)
    # with the commits before the newest checkpoint gone, only listing can find that checkpoint
    for version in range(10):
        (log_dir / f"{version:020d}.json").unlink()
    assert _state(_reopen(tmp_path, checkpoint_interval=5).snapshot()) == _state(replayed)


def test_a_stale_hint_still_gives_the_latest_state(tmp_path: Path) -> None:
    log = _new_log(tmp_path, checkpoint_interval=5)
    _build_history(log, 13)
    log_dir = tmp_path / TABLE / LOG_DIR
    (log_dir / LAST_CHECKPOINT).write_text(json.dumps({"version": 5, "size": 1}))
    replayed = _full_replay(LocalFileIO(str(tmp_path)))
    assert _state(_reopen(tmp_path, checkpoint_interval=5).snapshot()) == _state(replayed)


def test_opening_a_long_uncheckpointed_log_heals_it(tmp_path: Path) -> None:
    log = _new_log(tmp_path, checkpoint_interval=1000)  # a writer that never checkpointed
    _build_history(log, 12)
    log_dir = tmp_path / TABLE / LOG_DIR
    assert not list(log_dir.glob("*.checkpoint.parquet"))
    snap = _reopen(tmp_path, checkpoint_interval=5).snapshot()
    assert (log_dir / f"{snap.version:020d}.checkpoint.parquet").exists()
    assert read_last_checkpoint(LocalFileIO(str(tmp_path)), TABLE) == snap.version


class ReadOnlyIO:
    """Storage this process may read but not write (a read-only mount, an object store the reader
    has no write permission on).  Tests run as root, where ``chmod`` does not stop writes, so the
    refusal is simulated: every write raises ``error`` before touching anything."""

    def __init__(self, inner: LocalFileIO, error: Exception, refused: tuple[str, ...] = ()) -> None:
        self.inner = inner
        self.error = error
        self.refused = refused or ("put_if_absent", "write_new", "replace", "delete")
        self.attempts: list[tuple[str, str]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in self.refused:
            return attr

        def refuse(path: str, *args: Any, **kwargs: Any) -> Any:
            self.attempts.append((name, path))
            raise self.error

        return refuse


def _log_files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / TABLE / LOG_DIR).iterdir())


@pytest.mark.parametrize(
    "error",
    [PermissionError(13, "Permission denied"), BrokerPersistenceError("storage commit failed: Read-only file system")],
    ids=["PermissionError", "BrokerPersistenceError"],
)
def test_a_reader_on_read_only_storage_reads_a_long_uncheckpointed_log(tmp_path: Path, error: Exception) -> None:
    log = _new_log(tmp_path, checkpoint_interval=1000)  # a writer that never checkpointed
    _build_history(log, 12)
    before = _log_files(tmp_path)
    io = ReadOnlyIO(LocalFileIO(str(tmp_path)), error)
    reader = TransactionLog(io, TABLE, checkpoint_interval=5)  # type: ignore[arg-type]
    expected = _state(_full_replay(LocalFileIO(str(tmp_path))))
    assert _state(reader.snapshot()) == expected  # the healing write failed; the read did not
    assert io.attempts, "the replay was long enough to try healing"
    assert _log_files(tmp_path) == before  # no checkpoint, no hint, no temp file
    assert _state(reader.snapshot()) == expected  # and the handle keeps polling
    log.commit(lambda s: _append_actions(s, [1]), operation="WRITE")
    assert reader.snapshot().version == 13


def test_a_failed_hint_after_a_healing_checkpoint_leaves_a_usable_log(tmp_path: Path) -> None:
    """The checkpoint is complete before the hint is replaced; when only the hint cannot be written,
    the checkpoint stays (whole, found by listing) and the hint keeps naming an older state."""
    log = _new_log(tmp_path, checkpoint_interval=1000)
    _build_history(log, 12)
    io = ReadOnlyIO(LocalFileIO(str(tmp_path)), PermissionError(13, "Permission denied"), refused=("replace",))
    expected = _state(_full_replay(LocalFileIO(str(tmp_path))))
    assert _state(TransactionLog(io, TABLE, checkpoint_interval=5).snapshot()) == expected  # type: ignore[arg-type]
    assert io.attempts == [("replace", f"{TABLE}/{LOG_DIR}/{LAST_CHECKPOINT}")]
    assert not [n for n in _log_files(tmp_path) if n.startswith(".") or n == LAST_CHECKPOINT]
    assert _state(_reopen(tmp_path, checkpoint_interval=5).snapshot()) == expected


def test_explicit_checkpoint_and_an_unreadable_checkpoint(tmp_path: Path) -> None:
    log = _new_log(tmp_path, checkpoint_interval=1000)
    _build_history(log, 5)
    assert log.checkpoint() == 5
    path = tmp_path / checkpoint_path(TABLE, 5)
    assert path.exists()
    assert _state(_reopen(tmp_path).snapshot()) == _state(_full_replay(LocalFileIO(str(tmp_path))))
    path.write_bytes(b"PAR1 garbage")
    # the JSON commits hold the same state: a damaged checkpoint only costs replay (as in Delta)
    assert _state(_reopen(tmp_path).snapshot()) == _state(_full_replay(LocalFileIO(str(tmp_path))))
    for version in range(5):  # once the commits before it were cleaned up, nothing can stand in for it
        (tmp_path / TABLE / LOG_DIR / f"{version:020d}.json").unlink()
    with pytest.raises(LogCorrupted, match="unreadable"):
        _reopen(tmp_path).snapshot()


def test_a_commit_the_log_could_not_replay_is_refused_before_it_is_written(tmp_path: Path) -> None:
    log = _new_log(tmp_path)
    with pytest.raises(LogCorrupted, match="without pubsub tags"):
        log.commit(lambda s: [Add(path="untagged.parquet", size=1, modification_time=1)], operation="WRITE")
    assert not (tmp_path / TABLE / LOG_DIR / f"{1:020d}.json").exists()
    assert _reopen(tmp_path).snapshot().version == 0
    assert log.commit(lambda s: _append_actions(s, [1]), operation="WRITE").version == 1


def test_an_add_without_pubsub_tags_is_reported_as_foreign(tmp_path: Path) -> None:
    log = _new_log(tmp_path)
    foreign = Add(path="foreign.parquet", size=1, modification_time=1)  # as deltalake's writer would add
    log.io.put_if_absent(commit_path(TABLE, 1), encode_actions([foreign]))
    with pytest.raises(LogCorrupted, match="foreign writer"):
        _reopen(tmp_path).snapshot()


def test_an_add_with_malformed_pubsub_tags_is_log_corrupted(tmp_path: Path) -> None:
    log = _new_log(tmp_path)
    tags = {"pubsub.baseOffset": "zero"}
    bad = Add(path="bad.parquet", size=1, modification_time=1, tags=tags)
    log.io.put_if_absent(commit_path(TABLE, 1), encode_actions([bad]))
    with pytest.raises(LogCorrupted, match=r"bad\.parquet"):
        _reopen(tmp_path).snapshot()


# --- segment_ref layout math -----------------------------------------------------------------------------


def _segment(layout: list[int], *, base_offset: int = 10, base_entry_id: int = 7) -> SegmentRef:
    return SegmentRef(
        path="p",
        base_offset=base_offset,
        num_records=layout_messages(layout),
        base_entry_id=base_entry_id,
        layout=layout,
        size_bytes=1,
        min_publish_ms=0,
        max_publish_ms=0,
        modification_time_ms=0,
    )


@pytest.mark.parametrize(
    ("layout", "ids", "entry_ranges"),
    [
        ([3], [(7, 0), (7, 1), (7, 2)], {7: (10, 13)}),
        ([-4], [(7, -1), (8, -1), (9, -1), (10, -1)], {7: (10, 11), 8: (11, 12), 9: (12, 13), 10: (13, 14)}),
        (
            [2, -1, 3],
            [(7, 0), (7, 1), (8, -1), (9, 0), (9, 1), (9, 2)],
            {7: (10, 12), 8: (12, 13), 9: (13, 16)},
        ),
        ([1, 1], [(7, 0), (8, 0)], {7: (10, 11), 8: (11, 12)}),
    ],
)
def test_segment_ref_layout_math(
    layout: list[int], ids: list[tuple[int, int]], entry_ranges: dict[int, tuple[int, int]]
) -> None:
    seg = _segment(layout)
    assert seg.end_offset == 10 + len(ids)
    assert seg.num_entries == len(entry_ranges)
    assert seg.end_entry_id == 7 + len(entry_ranges)
    assert [seg.id_of(10 + i) for i in range(len(ids))] == ids
    assert {e: seg.offsets_of_entry(e) for e in entry_ranges} == entry_ranges
    entry_ids, batch_indexes = seg.ids_of_rows()
    assert list(zip(entry_ids, batch_indexes, strict=True)) == ids


def test_layout_helpers() -> None:
    assert normalise_layout([-2, -3, 0, 4, 0, -1]) == [-5, 4, -1]
    assert normalise_layout([2, 3]) == [2, 3]  # two batched entries never merge
    assert layout_from_str(layout_to_str([2, -1, 3])) == [2, -1, 3]
    assert layout_from_str("") == []
    assert layout_messages([2, -1, 3]) == 6
    assert layout_entries([2, -1, 3]) == 3


LAYOUTS = st.lists(st.integers(min_value=-6, max_value=6).filter(bool), min_size=1, max_size=8)


@given(
    layout=LAYOUTS,
    base_offset=st.integers(min_value=0, max_value=2**40),
    base_entry_id=st.integers(min_value=0, max_value=2**40),
)
def test_offsets_and_ids_map_to_each_other_for_any_layout(
    layout: list[int], base_offset: int, base_entry_id: int
) -> None:
    seg = _segment(layout, base_offset=base_offset, base_entry_id=base_entry_id)
    offsets = range(seg.base_offset, seg.end_offset)
    ids = [seg.id_of(o) for o in offsets]
    for offset, (entry, batch) in zip(offsets, ids, strict=True):
        start, end = seg.offsets_of_entry(entry)
        assert start <= offset < end
        if batch >= 0:
            assert start + batch == offset  # (entry, batch) -> offset gives the offset back
        else:
            assert (start, end) == (offset, offset + 1)  # an unbatched entry holds one message
    # (entry, batch) order is offset order, and ids are unique
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    # entry ids are dense over the segment
    assert sorted({e for e, _ in ids}) == list(range(seg.base_entry_id, seg.end_entry_id))
    assert seg.num_entries == layout_entries(normalise_layout(layout))
    # bulk and single lookups agree; tags round trip
    entry_ids, batch_indexes = seg.ids_of_rows()
    assert list(zip(entry_ids, batch_indexes, strict=True)) == ids
    again = SegmentRef.from_add(seg.path, seg.size_bytes, seg.modification_time_ms, seg.tags())
    assert [again.id_of(o) for o in offsets] == ids
