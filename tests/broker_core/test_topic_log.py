"""TopicLog: appends and reads by offset, dedup, fencing, idempotent txns, id and time lookups."""

from __future__ import annotations

import errno
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from log_helpers import TOPIC_DIR, open_topic, producer_table, read_all, segment_table

from broker_core.errors import BrokerPersistenceError, CommitNotDurable, ProducerFenced
from broker_core.log.segment import SEGMENT_SCHEMA, CompressionType
from broker_core.log.segment_ref import layout_messages
from broker_core.message_id import MessageId
from broker_core.storage import LocalFileIO
from broker_core.topic.topic_log import TopicLog


@pytest.fixture
def topic(tmp_path: Path) -> TopicLog:
    return open_topic(tmp_path, fsync=False)


def _values(table: pa.Table) -> list[bytes | None]:
    return table.column("value").to_pylist()


def _segment_files(topic: TopicLog) -> list[str]:
    return sorted(n for n in topic.io.list_dir(topic.path) if n.endswith(".parquet"))


def _live_paths(topic: TopicLog) -> list[str]:
    return sorted(s.path for s in topic.snapshot().segments)


# --- append and read -------------------------------------------------------------------------------


def test_append_assigns_dense_offsets_and_entry_ids(topic: TopicLog) -> None:
    r1 = topic.append(producer_table("p", range(3)), layout=[3])
    r2 = topic.append(producer_table("p", range(3, 7)), layout=[-4])
    r3 = topic.append(producer_table("p", range(7, 13)), layout=[2, -1, 3])
    assert [r.version for r in (r1, r2, r3)] == [1, 2, 3]
    segs = [r.segment for r in (r1, r2, r3)]
    assert all(s is not None for s in segs)
    assert [(s.base_offset, s.end_offset) for s in segs if s] == [(0, 3), (3, 7), (7, 13)]
    assert [(s.base_entry_id, s.end_entry_id) for s in segs if s] == [(0, 1), (1, 5), (5, 8)]
    assert all(r.kept.all() and r.num_written == len(r.kept) for r in (r1, r2, r3))
    snap = topic.snapshot()
    assert (snap.next_offset, snap.next_entry_id, snap.first_offset) == (13, 8, 0)
    assert _segment_files(topic) == _live_paths(topic)


def test_read_ranges_across_segments(topic: TopicLog) -> None:
    for start, layout in [(0, [3]), (3, [-4]), (7, [2, -1, 3])]:
        topic.append(producer_table("p", range(start, start + layout_messages(layout))), layout=layout)
    expected = [f"p:{i}".encode() for i in range(13)]
    for start, end in [(0, 13), (2, 9), (3, 7), (6, 8), (12, 13), (0, 1), (5, 100)]:
        table, offsets = topic.read(start, end)
        stop = min(end, 13)
        assert _values(table) == expected[start:stop], (start, end)
        assert offsets.tolist() == list(range(start, stop))
        assert table.schema == SEGMENT_SCHEMA
    for start, end in [(5, 5), (13, 20), (100, 200), (7, 3)]:
        table, offsets = topic.read(start, end)
        assert table.num_rows == 0
        assert len(offsets) == 0
        assert table.schema == SEGMENT_SCHEMA


def test_read_uses_the_given_snapshot(topic: TopicLog) -> None:
    topic.append(producer_table("p", range(2)), layout=[2])
    old = topic.snapshot()
    topic.append(producer_table("p", range(2, 4)), layout=[2])
    assert _values(topic.read(0, 10, snapshot=old)[0]) == [b"p:0", b"p:1"]
    assert len(topic.read(0, 10)[0]) == 4


def test_messages_round_trip_every_column(topic: TopicLog) -> None:
    rows: list[dict[str, Any]] = [
        {
            "value": None,
            "key": "k",
            "ordering_key": b"ok",
            "properties": {"a": "1", "b": ""},
            "producer_name": "p",
            "sequence_id": 0,
            "publish_time": 1_700_000_000_123,
            "event_time": 5,
            "deliver_at": 1_700_000_001_000,
            "schema_version": b"\x00\x01",
        },
        {"value": b"", "key": None, "properties": {}, "publish_time": 1_700_000_000_124},
        {"value": b"\x00" * 1000, "key": "", "properties": None, "publish_time": 1_700_000_000_125},
    ]
    table = segment_table(rows)
    topic.append(table, layout=[-3])
    read, _ = read_all(open_topic(topic.io.abs_path(""), create=False))
    assert read.to_pylist() == table.to_pylist()
    assert _values(read)[:2] == [None, b""]  # a tombstone is not an empty value


@pytest.mark.parametrize("small_below_bytes", [0, 1 << 20], ids=["parallel-decode", "small-file-decode"])
def test_both_decode_paths_read_every_column_and_column_subsets(
    topic: TopicLog, monkeypatch: pytest.MonkeyPatch, small_below_bytes: int
) -> None:
    """Segments under 1 MiB decode on the calling thread (``segment.SMALL_SEGMENT_BYTES``), larger
    ones with ``read_table``; both give exactly ``SEGMENT_SCHEMA`` and the same rows."""
    from broker_core.log import segment

    table = producer_table("p", range(50))
    data = segment.encode_segment(table)
    monkeypatch.setattr(segment, "SMALL_SEGMENT_BYTES", small_below_bytes)
    assert segment.decode_segment(pa.BufferReader(data)).equals(table)
    subset = segment.decode_segment(pa.BufferReader(data), columns=["sequence_id", "value"])
    assert subset.column_names == ["sequence_id", "value"]
    assert subset.equals(table.select(["sequence_id", "value"]))


@pytest.mark.parametrize("compression", list(CompressionType))
def test_every_compression_reads_back(tmp_path: Path, compression: CompressionType) -> None:
    topic = open_topic(tmp_path, fsync=False)
    table = producer_table("p", range(100))
    result = topic.append(table, layout=[100], compression=compression)
    assert result.segment is not None
    if compression != CompressionType.NONE:
        assert compression.name.lower() in result.segment.path
    read, _ = read_all(open_topic(tmp_path, create=False))
    assert read.equals(table)


def test_a_layout_that_does_not_cover_the_rows_is_refused(topic: TopicLog) -> None:
    with pytest.raises(ValueError, match="does not cover"):
        topic.append(producer_table("p", range(3)), layout=[2])
    assert topic.snapshot().version == 0
    assert _segment_files(topic) == []


def test_another_topic_log_on_the_same_directory_sees_appends(topic: TopicLog) -> None:
    other = open_topic(topic.io.abs_path(""), create=False)
    assert other.snapshot().next_offset == 0
    topic.append(producer_table("p", range(5)), layout=[5])
    assert other.snapshot().next_offset == 5
    other.append(producer_table("q", range(2)), layout=[-2])
    assert _values(read_all(topic)[0]) == [*(f"p:{i}".encode() for i in range(5)), b"q:0", b"q:1"]


def test_create_is_idempotent_and_keeps_the_ledger_id(topic: TopicLog) -> None:
    ledger = topic.snapshot().ledger_id
    assert ledger > 0
    assert topic.create(name="again") is False
    assert open_topic(topic.io.abs_path(""), create=False).snapshot().ledger_id == ledger


# --- dedup --------------------------------------------------------------------------------------------


def test_a_resend_of_the_same_sequence_ids_writes_nothing(topic: TopicLog) -> None:
    first = topic.append(producer_table("p", range(5)), layout=[5], dedup=True)
    assert first.kept.all()
    files = _segment_files(topic)
    again = topic.append(producer_table("p", range(5)), layout=[5], dedup=True)
    assert again.version is None
    assert again.segment is None
    assert not again.kept.any()
    assert again.num_written == 0
    assert not again.skipped_by_txn
    assert topic.snapshot().version == 1
    assert _segment_files(topic) == files  # the rewritten-away segment was discarded
    assert topic.snapshot().txn_version("p") == 4


def test_a_partially_overlapping_resend_writes_only_the_new_rows(topic: TopicLog) -> None:
    topic.append(producer_table("p", range(5)), layout=[-5], dedup=True)
    result = topic.append(producer_table("p", range(3, 9)), layout=[-6], dedup=True)
    assert result.kept.tolist() == [False, False, True, True, True, True]
    assert result.segment is not None
    assert (result.segment.base_offset, result.segment.num_records) == (5, 4)
    assert result.segment.layout == [-4]
    assert _values(read_all(topic)[0]) == [f"p:{i}".encode() for i in range(9)]
    assert topic.snapshot().txn_version("p") == 8


def test_a_partial_batch_keeps_its_entry_shape(topic: TopicLog) -> None:
    topic.append(producer_table("p", range(4)), layout=[4], dedup=True)
    result = topic.append(producer_table("p", range(2, 10)), layout=[4, -2, 2], dedup=True)
    assert result.kept.tolist() == [False, False, True, True, True, True, True, True]
    assert result.segment is not None
    assert result.segment.layout == [2, -2, 2]  # the half-duplicate batch is one entry of 2
    assert (result.segment.base_entry_id, result.segment.end_entry_id) == (1, 5)


def test_dedup_inside_one_table_and_per_producer(topic: TopicLog) -> None:
    table = pa.concat_tables(
        [
            producer_table("a", [0, 1, 1, 3, 2]),
            producer_table("b", [7, 7]),
            producer_table(None, [0, 0]),  # no producer name: never a duplicate
            producer_table("a", [4]),
        ]
    )
    result = topic.append(table, layout=[-10], dedup=True)
    assert result.kept.tolist() == [True, True, False, True, False, True, False, True, True, True]
    snap = topic.snapshot()
    assert (snap.txn_version("a"), snap.txn_version("b"), snap.txn_version("anon")) == (4, 7, None)
    # a later append by b only: a's state is untouched
    result = topic.append(producer_table("b", [7, 8]), layout=[2], dedup=True)
    assert result.kept.tolist() == [False, True]
    assert topic.snapshot().txn_version("a") == 4


def test_rows_without_a_sequence_id_are_kept(topic: TopicLog) -> None:
    table = segment_table([{"producer_name": "p", "value": b"x"}, {"producer_name": "p", "value": b"y"}])
    assert topic.append(table, layout=[-2], dedup=True).kept.all()
    assert topic.append(table, layout=[-2], dedup=True).kept.all()
    assert topic.snapshot().txn_version("p") is None


def test_without_dedup_duplicates_are_written_and_the_high_water_mark_is_not_raised(topic: TopicLog) -> None:
    topic.append(producer_table("p", range(3)), layout=[3], dedup=True)
    result = topic.append(producer_table("p", range(5)), layout=[5])
    assert result.kept.all()
    assert topic.snapshot().next_offset == 8
    assert topic.snapshot().txn_version("p") == 2


def _chunked_rows(seq: int, count: int, *, uuid: str) -> list[dict[str, object]]:
    return [
        {
            "value": f"{uuid}/{i}".encode(),
            "producer_name": "p",
            "sequence_id": seq,
            "chunk_uuid": uuid,
            "chunk_id": i,
            "num_chunks": count,
            "chunk_total_size_bytes": 100,
        }
        for i in range(count)
    ]


def _plain_row(seq: int) -> dict[str, object]:
    return {"value": f"m{seq}".encode(), "producer_name": "p", "sequence_id": seq}


def test_chunk_continuations_follow_their_head_under_dedup(topic: TopicLog) -> None:
    rows = [_plain_row(0), *_chunked_rows(1, 3, uuid="u1"), _plain_row(2)]
    first = topic.append(segment_table(rows), layout=[-5], dedup=True)
    # chunks 1 and 2 share sequence id 1 with chunk 0, yet they are not duplicates
    assert first.kept.all()
    assert topic.snapshot().txn_version("p") == 2
    # the same message again: every chunk is a duplicate
    again = topic.append(segment_table(rows[1:4]), layout=[-3], dedup=True)
    assert again.version is None
    assert not again.kept.any()
    # a resend overlapping an old chunked message and carrying a new one
    resend = [*_chunked_rows(1, 3, uuid="u1"), _plain_row(2), *_chunked_rows(3, 2, uuid="u3"), _plain_row(4)]
    result = topic.append(segment_table(resend), layout=[-7], dedup=True)
    assert result.kept.tolist() == [False, False, False, False, True, True, True]
    read, _ = read_all(topic)
    assert _values(read) == [b"m0", b"u1/0", b"u1/1", b"u1/2", b"m2", b"u3/0", b"u3/1", b"m4"]
    assert read.column("chunk_id").to_pylist() == [None, 0, 1, 2, None, 0, 1, None]


class _HookedIO(LocalFileIO):
    """Real local storage that runs ``hook`` once, just before the first write matching ``when``.

    It lets a test put another writer's commit exactly between an append's steps.
    """

    def __init__(self, root: str, *, when: str, hook: Callable[[], None]) -> None:
        super().__init__(root, fsync=False)
        self._when, self._hook = when, hook

    def _maybe_hook(self, path: str) -> None:
        if self._when in path and self._hook is not None:
            hook, self._hook = self._hook, None  # type: ignore[assignment]
            hook()

    def write_new(self, path: str, data: bytes, **kwargs: Any) -> None:  # type: ignore[override]
        self._maybe_hook(path)
        super().write_new(path, data, **kwargs)

    def put_if_absent(self, path: str, data: bytes, **kwargs: Any) -> bool:
        self._maybe_hook(path)
        return super().put_if_absent(path, data, **kwargs)


def test_a_rival_commit_of_the_same_producer_makes_the_append_drop_new_duplicates(tmp_path: Path) -> None:
    open_topic(tmp_path, fsync=False)
    rival = open_topic(tmp_path, fsync=False, create=False)

    def rival_sends() -> None:  # the same producer's retry lands first (another process, say)
        assert rival.append(producer_table("p", range(0, 4)), layout=[4], dedup=True).kept.all()

    io = _HookedIO(str(tmp_path), when=".parquet", hook=rival_sends)
    topic = TopicLog(io, TOPIC_DIR)
    result = topic.append(producer_table("p", range(2, 6)), layout=[-4], dedup=True)
    assert result.kept.tolist() == [False, False, True, True]
    assert result.segment is not None
    assert (result.segment.base_offset, result.segment.layout) == (4, [-2])
    assert _values(read_all(topic)[0]) == [f"p:{i}".encode() for i in range(6)]
    assert _segment_files(topic) == _live_paths(topic)  # the first, stale segment was discarded


def test_a_lost_commit_race_moves_the_append_behind_the_winner(tmp_path: Path) -> None:
    open_topic(tmp_path, fsync=False)
    rival = open_topic(tmp_path, fsync=False, create=False)

    def rival_commits() -> None:
        rival.append(producer_table("q", range(3)), layout=[-3], dedup=True)

    io = _HookedIO(str(tmp_path), when="_delta_log/00000000000000000001.json", hook=rival_commits)
    topic = TopicLog(io, TOPIC_DIR)
    result = topic.append(producer_table("p", range(2)), layout=[2], dedup=True)
    assert result.version == 2
    assert result.segment is not None
    assert (result.segment.base_offset, result.segment.base_entry_id) == (3, 3)
    assert _values(read_all(topic)[0]) == [b"q:0", b"q:1", b"q:2", b"p:0", b"p:1"]
    assert _segment_files(topic) == _live_paths(topic)


# --- fencing and txn idempotence -------------------------------------------------------------------------


def test_a_commit_linked_but_not_made_durable_keeps_its_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed directory fsync after the link must not delete the segments of a commit readers
    may already see: the writer gets ``CommitNotDurable`` (outcome unknown) and the log stays whole."""
    topic = open_topic(tmp_path, fsync=True)
    topic.append(producer_table("p", range(2)), layout=[2])
    real_fsync_dir = LocalFileIO._fsync_dir

    def failing(directory: str) -> None:
        if directory.endswith("_delta_log"):
            raise OSError(errno.EIO, "Input/output error")
        real_fsync_dir(directory)

    monkeypatch.setattr(LocalFileIO, "_fsync_dir", staticmethod(failing))
    with pytest.raises(CommitNotDurable, match="visible but its directory fsync failed") as caught:
        topic.append(producer_table("p", range(2, 5)), layout=[3])
    assert isinstance(caught.value, BrokerPersistenceError)
    monkeypatch.setattr(LocalFileIO, "_fsync_dir", staticmethod(real_fsync_dir))
    fresh = open_topic(tmp_path, create=False)
    table, offsets = read_all(fresh)
    assert table.num_rows == 5 and offsets.tolist() == [0, 1, 2, 3, 4]
    assert _segment_files(fresh) == _live_paths(fresh)


def test_a_stale_producer_epoch_is_fenced_and_writes_nothing(topic: TopicLog) -> None:
    assert topic.snapshot().producer_epoch == 0
    topic.append(producer_table("old", [0]), layout=[1], producer_epoch=0, dedup=True)
    assert topic.bump_producer_epoch(to=1) == 1
    version, files = topic.snapshot().version, _segment_files(topic)
    with pytest.raises(ProducerFenced, match="epoch") as info:
        topic.append(producer_table("old", [1, 2]), layout=[2], producer_epoch=0, dedup=True)
    assert info.value.context["topic"] == TOPIC_DIR
    assert topic.snapshot().version == version
    assert _segment_files(topic) == files
    assert topic.snapshot().txn_version("old") == 0
    # a topic log opened elsewhere sees the same epoch and fences too
    elsewhere = open_topic(topic.io.abs_path(""), create=False)
    with pytest.raises(ProducerFenced):
        elsewhere.append(producer_table("old", [1]), layout=[1], producer_epoch=0)
    # the new holder writes with the new epoch; a caller without an epoch is not checked
    assert topic.append(producer_table("new", [0]), layout=[1], producer_epoch=1).version is not None
    assert topic.append(producer_table("x", [0]), layout=[1]).version is not None
    assert topic.bump_producer_epoch(to=2) == 2
    assert topic.bump_producer_epoch(to=1) == 2  # never lowered
    assert _values(read_all(topic)[0]) == [b"old:0", b"new:0", b"x:0"]


def test_a_txn_already_committed_is_skipped(topic: TopicLog) -> None:
    first = topic.append(producer_table("s", range(3)), layout=[3], txn=("sink-1", 5))
    assert first.version == 1
    assert not first.skipped_by_txn
    for version in (5, 4, 0):
        again = topic.append(producer_table("s", range(3)), layout=[3], txn=("sink-1", version))
        assert again.skipped_by_txn
        assert again.version is None
        assert not again.kept.any()
    assert topic.snapshot().version == 1
    assert _segment_files(topic) == _live_paths(topic)
    # a newer batch id and another app id both commit
    assert topic.append(producer_table("s", range(3)), layout=[3], txn=("sink-1", 6)).version == 2
    assert topic.append(producer_table("s", range(3)), layout=[3], txn=("sink-2", 5)).version == 3
    snap = topic.snapshot()
    assert (snap.txn_version("sink-1"), snap.txn_version("sink-2"), snap.next_offset) == (6, 5, 9)


def test_a_txn_commits_even_when_every_row_is_a_duplicate(topic: TopicLog) -> None:
    topic.append(producer_table("p", range(3)), layout=[3], dedup=True)
    result = topic.append(producer_table("p", range(3)), layout=[3], dedup=True, txn=("sink", 1))
    assert result.version == 2
    assert result.segment is None
    assert not result.kept.any()
    assert topic.snapshot().txn_version("sink") == 1
    assert topic.snapshot().next_offset == 3


# --- message ids and publish times ----------------------------------------------------------------------


@pytest.fixture
def layered(topic: TopicLog) -> TopicLog:
    """Entries: 0 = batch of 3 (offsets 0-2), 1 and 2 single (3, 4), 3 = batch of 2 (5, 6), 4 single (7),
    5 = batch of 1 (8)."""
    topic.append(producer_table("p", range(3)), layout=[3])
    topic.append(producer_table("p", range(3, 5)), layout=[-2])
    topic.append(producer_table("p", range(5, 8)), layout=[2, -1])
    topic.append(producer_table("p", range(8, 9)), layout=[1])
    return topic


def _mid(topic: TopicLog, entry: int, batch: int = -1) -> MessageId:
    return MessageId(partition=-1, ledger_id=topic.snapshot().ledger_id, entry_id=entry, batch_index=batch)


def test_message_id_of_each_offset(layered: TopicLog) -> None:
    ids = [layered.message_id(o, 2) for o in range(9)]
    expected = [(0, 0), (0, 1), (0, 2), (1, -1), (2, -1), (3, 0), (3, 1), (4, -1), (5, 0)]
    assert [(m.entry_id(), m.batch_index()) for m in ids] == expected
    assert {m.partition() for m in ids} == {2}
    assert {m.ledger_id() for m in ids} == {layered.snapshot().ledger_id}
    entries, batches = layered.ids_for_offsets(np.arange(9, dtype=np.int64))
    assert list(zip(entries.tolist(), batches.tolist(), strict=True)) == expected
    assert ids == sorted(ids)


@pytest.mark.parametrize("chosen", [[4], [0, 2, 8], [1, 3, 6, 7], [2, 5, 6], [3, 4, 5, 6, 7, 8], [7, 8]])
def test_ids_of_sparse_offsets_match_each_message_id(layered: TopicLog, chosen: list[int]) -> None:
    """The vectorised mapping (one-part layouts by arithmetic, mixed ones per segment) gives each
    offset the id ``message_id`` gives it alone, whichever segments a selection spans or skips."""
    entries, batches = layered.ids_for_offsets(np.array(chosen, dtype=np.int64))
    expected = [(m.entry_id(), m.batch_index()) for m in (layered.message_id(o, -1) for o in chosen)]
    assert list(zip(entries.tolist(), batches.tolist(), strict=True)) == expected
    assert entries.dtype == np.int64 and batches.dtype == np.int32


@pytest.mark.parametrize(
    ("entry", "batch", "inclusive", "offset"),
    [
        # batched entry 0: a batch index selects one message
        (0, 0, True, 0),
        (0, 0, False, 1),
        (0, 1, True, 1),
        (0, 1, False, 2),
        (0, 2, False, 3),
        (0, 7, True, 2),  # a batch index past the entry clamps to its last message
        (0, 7, False, 3),
        (0, -1, True, 0),  # the entry as a whole
        (0, -1, False, 3),
        # single entries
        (1, -1, True, 3),
        (1, -1, False, 4),
        (2, -1, True, 4),
        (2, -1, False, 5),
        (1, 0, True, 3),  # a batch index on a non-batched entry is ignored
        (1, 0, False, 4),
        (3, 1, True, 6),
        (3, 1, False, 7),
        (4, -1, False, 8),
        # entry 5 is a batch of one
        (5, 0, True, 8),
        (5, 0, False, 9),
        (5, -1, True, 8),
        (5, -1, False, 9),
        # past the end
        (6, -1, True, 9),
        (6, -1, False, 9),
        (1000, 0, True, 9),
    ],
)
def test_offset_for_message_id(
    layered: TopicLog, entry: int, batch: int, inclusive: bool, offset: int
) -> None:
    assert layered.offset_for_message_id(_mid(layered, entry, batch), inclusive=inclusive) == offset


def test_offset_for_message_id_round_trips_every_message(layered: TopicLog) -> None:
    for offset in range(9):
        mid = layered.message_id(offset, -1)
        assert layered.offset_for_message_id(mid, inclusive=True) == offset
        assert layered.offset_for_message_id(mid, inclusive=False) == offset + 1


def test_offset_for_earliest_latest_and_other_ledgers(layered: TopicLog) -> None:
    ledger = layered.snapshot().ledger_id
    for inclusive in (True, False):
        assert layered.offset_for_message_id(MessageId.earliest, inclusive=inclusive) == 0
        assert layered.offset_for_message_id(MessageId(-1, ledger - 1, 5, -1), inclusive=inclusive) == 0
        assert layered.offset_for_message_id(MessageId(-1, ledger + 1, 0, -1), inclusive=inclusive) == 9
    assert layered.offset_for_message_id(MessageId.latest, inclusive=False) == 9
    assert layered.offset_for_message_id(MessageId.latest, inclusive=True) == 8  # the last message


def test_offset_for_latest_on_an_empty_topic(topic: TopicLog) -> None:
    for inclusive in (True, False):
        assert topic.offset_for_message_id(MessageId.latest, inclusive=inclusive) == 0
        assert topic.offset_for_message_id(MessageId.earliest, inclusive=inclusive) == 0


def test_offset_for_publish_time_is_inclusive_at_the_millisecond(topic: TopicLog) -> None:
    topic.append(producer_table("p", range(3), publish_ms=[1000, 2000, 2000]), layout=[3])
    # 2500.5 ms in microseconds: published within millisecond 2500
    table = producer_table("p", range(3, 5), publish_ms=[2500, 3000])
    micros = pa.array([2_500_500, 3_000_000], type=pa.int64()).cast(SEGMENT_SCHEMA.field("publish_time").type)
    table = table.set_column(table.schema.get_field_index("publish_time"), "publish_time", micros)
    topic.append(table, layout=[-2])
    cases = {0: 0, 999: 0, 1000: 0, 1001: 1, 1999: 1, 2000: 1, 2001: 3, 2500: 3, 2501: 4, 3000: 4, 3001: 5}
    for millis, offset in cases.items():
        assert topic.offset_for_publish_time(millis) == offset, millis


# --- a model of the log ---------------------------------------------------------------------------------


LAYOUTS = st.lists(st.integers(min_value=-5, max_value=5).filter(bool), min_size=1, max_size=5)
PRODUCERS = st.sampled_from(["a", "b", "c", None])
SEQS = st.integers(min_value=-1, max_value=30).map(lambda s: None if s < 0 else s)


class TopicModel(RuleBasedStateMachine):
    """Random appends (dedup mostly on) against a list-and-dict model of the topic."""

    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="topic-model-")
        self.topic = open_topic(self.root, checkpoint_interval=3, fsync=False)
        self.values: list[bytes] = []
        self.entries = 0
        self.high: dict[str, int] = {}
        self.counter = 0

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _table(self, producers: list[str | None], seqs: list[int | None]) -> pa.Table:
        rows = []
        for producer, seq in zip(producers, seqs, strict=True):
            rows.append({"value": f"v{self.counter}".encode(), "producer_name": producer, "sequence_id": seq})
            self.counter += 1
        return segment_table(rows)

    def _apply(self, table: pa.Table, layout: list[int], keep: list[bool]) -> None:
        values = table.column("value").to_pylist()
        self.values.extend(v for v, k in zip(values, keep, strict=True) if k)
        pos = 0
        for part in layout:
            kept = sum(keep[pos : pos + abs(part)])
            pos += abs(part)
            self.entries += (1 if kept else 0) if part > 0 else kept

    @rule(data=st.data(), layout=LAYOUTS)
    def append_with_dedup(self, data: st.DataObject, layout: list[int]) -> None:
        n = layout_messages(layout)
        producers = data.draw(st.lists(PRODUCERS, min_size=n, max_size=n))
        if data.draw(st.booleans()):  # a retry: consecutive ids starting at or below the high-water mark
            start = data.draw(st.integers(min_value=0, max_value=max(self.high.values(), default=0) + 2))
            seqs: list[int | None] = list(range(start, start + n))
        else:
            seqs = data.draw(st.lists(SEQS, min_size=n, max_size=n))
        keep = []
        high = dict(self.high)
        for producer, seq in zip(producers, seqs, strict=True):
            if producer is None or seq is None:
                keep.append(True)
            else:
                keep.append(seq > high.get(producer, -1))
                high[producer] = max(seq, high.get(producer, -1))
        table = self._table(producers, seqs)
        result = self.topic.append(table, layout=layout, dedup=True)
        assert result.kept.tolist() == keep
        assert (result.version is None) == (not any(keep))
        if result.segment is not None:
            assert result.segment.base_offset == len(self.values)
            assert result.segment.base_entry_id == self.entries
        self._apply(table, layout, keep)
        self.high = high

    @rule(layout=LAYOUTS, producer=PRODUCERS)
    def append_without_dedup(self, layout: list[int], producer: str | None) -> None:
        n = layout_messages(layout)
        table = self._table([producer] * n, [0] * n)
        result = self.topic.append(table, layout=layout)
        assert result.kept.all()
        self._apply(table, layout, [True] * n)

    @precondition(lambda self: self.values)
    @rule()
    def reopen(self) -> None:
        self.topic = open_topic(self.root, checkpoint_interval=3, fsync=False, create=False)

    @invariant()
    def log_matches_model(self) -> None:
        snap = self.topic.snapshot()
        table, offsets = self.topic.read(0, snap.next_offset, snapshot=snap)
        assert _values(table) == self.values
        assert offsets.tolist() == list(range(len(self.values)))
        assert snap.next_offset == len(self.values)
        assert snap.next_entry_id == self.entries
        for producer in ("a", "b", "c"):
            assert snap.txn_version(producer) == self.high.get(producer)
        if len(offsets):
            entries, batches = self.topic.ids_for_offsets(offsets, snapshot=snap)
            assert np.all(np.diff(entries) >= 0)
            assert np.unique(entries).tolist() == list(range(self.entries))
            ids = list(zip(entries.tolist(), batches.tolist(), strict=True))
            assert len(set(ids)) == len(ids)
        assert _segment_files(self.topic) == sorted(s.path for s in snap.segments)


TopicModel.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestTopicModel = TopicModel.TestCase
