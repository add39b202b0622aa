"""What an append may commit: deduplication, reserved app ids and the topic a writer is pinned to.

``TopicLog.append`` writes its segment before it knows which log version it lands in, so every
check here is a pure function of the rows and a ``Snapshot``: the commit function re-runs them
against the winner's state after a lost race, and a changed dedup answer makes the append rewrite
its (still invisible) segment with the rows that are left (``Rewrite``).  Keeping them free of I/O
is what makes that re-validation cheap and its result the same in every process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_core.errors import InvalidMessage, TopicDeleted
from broker_core.log.actions import Action, Txn
from broker_core.log.segment_ref import SegmentRef, normalise_layout
from broker_core.log.snapshot import RESERVED_TXN_PREFIX, Snapshot


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where an append landed.

    ``kept`` marks, per input row, whether it was written (False: dropped as a duplicate).  Row i of
    the input that was kept is offset ``segment.base_offset + rank`` where rank counts kept rows.
    """

    version: int | None
    segment: SegmentRef | None
    kept: np.ndarray
    skipped_by_txn: bool = False

    @property
    def num_written(self) -> int:
        return int(self.kept.sum())


class Rewrite(Exception):
    """Raised by an append's commit function when the state it lands on (a race's winner, or a
    batch ahead of it that failed) changed which rows are duplicates: the segments must be written
    again with ``keeps`` (one mask per segment of the commit) before committing."""

    def __init__(self, keeps: list[np.ndarray]) -> None:
        super().__init__("rewrite")
        self.keeps = keeps


def filter_layout(layout: list[int], keep: np.ndarray) -> list[int]:
    """The entry layout of the kept rows of a segment (dropped rows leave their entries)."""
    out: list[int] = []
    pos = 0
    for part in layout:
        size = abs(part)
        kept = int(keep[pos : pos + size].sum())
        pos += size
        if kept:
            out.append(kept if part > 0 else -kept)
    return normalise_layout(out)


def dedup_keep_mask(table: pa.Table, snapshot: Snapshot, floors: Mapping[str, int] | None = None) -> np.ndarray:
    """Rows to keep: a row is a duplicate if its sequence id is not above the highest one seen.

    "Seen" is the producer's ``txn`` version in the log, raised by ``floors`` (the highest sequence
    ids of batches expected to commit first) and by earlier rows of the same producer in this table
    (so a retried batch and repeats inside one batch are both dropped).
    """
    n = table.num_rows
    keep = np.ones(n, dtype=bool)
    producers = table.column("producer_name")
    seq_column = table.column("sequence_id")
    if producers.null_count == n or seq_column.null_count == n:
        return keep
    has_seq = seq_column.is_valid().to_numpy(zero_copy_only=False)
    seqs = seq_column.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    encoded = pc.dictionary_encode(producers).combine_chunks()
    names = encoded.dictionary.to_pylist()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    for code, name in enumerate(names):
        rows = np.nonzero((codes == code) & has_seq)[0]
        last = snapshot.txn_version(name)
        floor = -1 if last is None else last
        if floors is not None:
            floor = max(floor, floors.get(name, -1))
        group = seqs[rows]
        prior_max = np.maximum.accumulate(np.concatenate(([floor], group)))[:-1]
        keep[rows] = group > prior_max
    return _chunks_follow_head(table, keep)


def _chunks_follow_head(table: pa.Table, keep: np.ndarray) -> np.ndarray:
    """Continuation chunks (chunk id > 0) share their message's sequence id: they are kept exactly
    when the message's first chunk (the nearest preceding chunk-0 row) is kept."""
    chunk_ids = table.column("chunk_id")
    if chunk_ids.null_count == table.num_rows:
        return keep
    ids = chunk_ids.fill_null(0).to_numpy(zero_copy_only=False)
    heads = np.where(ids == 0, np.arange(len(ids)), 0)
    head_of = np.maximum.accumulate(heads)
    return keep[head_of]


def producer_txns(rows: pa.Table, now_ms: int) -> list[Action]:
    """One ``txn`` per producer in ``rows``, at its highest sequence id: the high-water marks that
    ``dedup_keep_mask`` compares later appends with."""
    names = rows.column("producer_name")
    if names.null_count == rows.num_rows:
        return []
    grouped = (
        rows.select(["producer_name", "sequence_id"]).group_by("producer_name").aggregate([("sequence_id", "max")])
    )
    out: list[Action] = []
    for name, seq in zip(
        grouped.column("producer_name").to_pylist(), grouped.column("sequence_id_max").to_pylist(), strict=True
    ):
        if name is not None and seq is not None:
            out.append(Txn(app_id=name, version=seq, last_updated=now_ms))
    return out


def check_txn_app_id(txn: tuple[str, int] | None) -> None:
    """A caller's txn app id shares the log's txn namespace with our reserved ``pubsub.`` ids."""
    if txn is not None and txn[0].startswith(RESERVED_TXN_PREFIX) and not txn[0].startswith("pubsub.sink."):
        raise InvalidMessage(f"txn app id {txn[0]!r} uses the reserved prefix {RESERVED_TXN_PREFIX!r}")


def check_app_ids(table: pa.Table, txn: tuple[str, int] | None) -> None:
    """Producer names and txn app ids share the log's txn namespace with our reserved ``pubsub.`` ids."""
    check_txn_app_id(txn)
    names = table.column("producer_name")
    if names.null_count < table.num_rows:
        reserved = pc.any(pc.starts_with(names, RESERVED_TXN_PREFIX)).as_py()
        if reserved:
            raise InvalidMessage(
                f"a producer name starts with the reserved prefix {RESERVED_TXN_PREFIX!r}; pick another name",
                column="producer_name",
            )


def check_topic_id(snapshot: Snapshot, topic_id: str | None) -> None:
    """A writer pinned to a topic must not write into another one re-created under its name."""
    if topic_id is not None and snapshot.metadata.id != topic_id:
        raise TopicDeleted(
            f"topic {snapshot.metadata.name} was deleted and created again since this writer connected",
            topic=snapshot.metadata.name,
        )


__all__ = [
    "AppendResult",
    "Rewrite",
    "check_app_ids",
    "check_topic_id",
    "check_txn_app_id",
    "dedup_keep_mask",
    "filter_layout",
    "producer_txns",
]
