"""The state of an internal topic at one log version, built by replaying actions.

A ``Snapshot`` is treated as immutable once published: ``apply`` returns a new snapshot that
shares unchanged containers, so readers on other threads never see a half-applied commit.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from broker_core.errors import LogCorrupted
from broker_core.log.actions import INT64_MAX, Action, Add, Metadata, Protocol, Remove, Txn
from broker_core.log.segment import codec_of
from broker_core.log.segment_ref import TAG_BASE_OFFSET, SegmentRef

# Reserved txn app ids.  Producer names may not start with "pubsub." so they never collide.
TXN_NEXT_OFFSET = "pubsub.nextOffset"
TXN_NEXT_ENTRY_ID = "pubsub.nextEntryId"
TXN_PRODUCER_EPOCH = "pubsub.producerEpoch"
TXN_DELETED = "pubsub.deleted"
"""The tombstone of a deleted topic (version: the deletion time in ms); no commit may follow it."""
RESERVED_TXN_PREFIX = "pubsub."

LEDGER_ID_KEY = "pubsub.ledgerId"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Live segments, dedup state and metadata of an internal topic at ``version``."""

    version: int
    protocol: Protocol
    metadata: Metadata
    segments: tuple[SegmentRef, ...] = ()
    txns: dict[str, Txn] = field(default_factory=dict)
    tombstones: dict[str, Remove] = field(default_factory=dict)
    next_offset: int = 0
    next_entry_id: int = 0
    _base_offsets: list[int] = field(default_factory=list)
    _by_path: list[dict[str, SegmentRef] | None] = field(default_factory=lambda: [None], compare=False, repr=False)
    """A path index of live segments shared along a chain of appends (built on first use): it may
    also hold paths of segments no longer live here (a lost commit attempt), so a hit counts only when
    that very segment is live in this snapshot (``_live_segment``)."""

    # -- queries ------------------------------------------------------------------------------------

    @property
    def ledger_id(self) -> int:
        return int(self.metadata.configuration.get(LEDGER_ID_KEY, "0"))

    @property
    def first_offset(self) -> int:
        """The lowest offset still readable (``next_offset`` when the topic is empty)."""
        return self.segments[0].base_offset if self.segments else self.next_offset

    @property
    def producer_epoch(self) -> int:
        txn = self.txns.get(TXN_PRODUCER_EPOCH)
        return txn.version if txn else 0

    @property
    def deleted(self) -> bool:
        """The topic was deleted at this version (``Admin.delete_topic`` committed its tombstone)."""
        return TXN_DELETED in self.txns

    def txn_version(self, app_id: str) -> int | None:
        txn = self.txns.get(app_id)
        return None if txn is None else txn.version

    def segment_index_for(self, offset: int) -> int:
        """Index of the segment holding ``offset``, or of the first one after it (len if none)."""
        i = bisect.bisect_right(self._base_offsets, offset) - 1
        if i >= 0 and offset < self.segments[i].end_offset:
            return i
        return i + 1

    def holes(self, start: int, end: int) -> list[tuple[int, int]]:
        """Offset ranges within ``[start, end)`` and above ``first_offset`` that no live segment holds.

        Retention only removes from the front and merges replace segments in place, so a hole is
        a segment ``pubsub topics check --repair`` set aside as damaged (its ``remove`` carries the
        ``pubsub.dataLoss`` record, ``docs/PROTOCOL.md``).  Readers skip holes like retained data;
        a reader that must not lose data silently (``failOnDataLoss``) checks this first.
        """
        out: list[tuple[int, int]] = []
        pos = max(start, self.first_offset)
        for seg in self.segments[self.segment_index_for(pos):]:
            if seg.base_offset >= end:
                break
            if seg.base_offset > pos:
                out.append((pos, seg.base_offset))
            pos = max(pos, seg.end_offset)
        if pos < min(end, self.next_offset):
            out.append((pos, min(end, self.next_offset)))
        return out

    def segment_for_entry(self, entry_id: int) -> SegmentRef | None:
        """The live segment holding an entry id, if any (segments are ordered by entry id too)."""
        lo, hi = 0, len(self.segments)
        while lo < hi:
            mid = (lo + hi) // 2
            seg = self.segments[mid]
            if entry_id < seg.base_entry_id:
                hi = mid
            elif entry_id >= seg.end_entry_id:
                lo = mid + 1
            else:
                return seg
        return None

    def _path_index(self) -> dict[str, SegmentRef]:
        index = self._by_path[0]
        if index is None:
            index = {s.path: s for s in self.segments}
            self._by_path[0] = index
        return index

    def _live_segment(self, path: str) -> SegmentRef | None:
        """The live segment at ``path``, if any: O(log n) once the path index exists."""
        seg = self._path_index().get(path)
        if seg is None:
            return None
        i = self.segment_index_for(seg.base_offset)
        return seg if i < len(self.segments) and self.segments[i] is seg else None

    def _check_readds(self, version: int, added: list[SegmentRef], removed: set[str]) -> None:
        """Refuse an ``add`` of a path that is already live (and not removed by the same commit), or
        added twice by it: one file at two offsets would deliver its messages twice."""
        seen: set[str] = set()
        for seg in added:
            live = None if seg.path in removed else self._live_segment(seg.path)
            if seg.path in seen or live is not None:
                where = f"at offset {live.base_offset}" if live is not None else "by the same commit"
                raise duplicate_add_error(version, seg.path, where)
            seen.add(seg.path)

    # -- replay -------------------------------------------------------------------------------------

    def apply(self, version: int, actions: list[Action]) -> Snapshot:
        """Return the snapshot after the commit ``version`` holding ``actions``."""
        if version != self.version + 1:
            raise LogCorrupted(
                f"log gap: snapshot at version {self.version} cannot apply version {version}", version=version
            )
        protocol, metadata = self.protocol, self.metadata
        txns = self.txns
        tombstones = self.tombstones
        added: list[SegmentRef] = []
        removed: set[str] = set()
        for action in actions:
            if isinstance(action, Add):
                added.append(_segment_from_add(action, version))
            elif isinstance(action, Remove):
                check_segment_path(action.path, version=version, action="remove")
                removed.add(action.path)
                if tombstones is self.tombstones:
                    tombstones = dict(tombstones)
                tombstones[action.path] = action
            elif isinstance(action, Txn):
                if txns is self.txns:
                    txns = dict(txns)
                _apply_txn(txns, action)
            elif isinstance(action, Metadata):
                metadata = action
            elif isinstance(action, Protocol):
                protocol = action
        if added:
            self._check_readds(version, added, removed)
        segments = self.segments
        base_offsets: list[int] | None = None
        by_path: list[dict[str, SegmentRef] | None] | None = None
        if added and any(a.path in tombstones for a in added):
            readded = {a.path for a in added}
            tombstones = {k: v for k, v in tombstones.items() if k not in readded}
        if removed:
            segments = tuple(s for s in segments if s.path not in removed)
        if added:
            added.sort(key=lambda s: s.base_offset)
            if not removed and (not segments or added[0].base_offset >= segments[-1].end_offset):
                # the common case, an append: O(1) work per commit apart from the copies
                base_offsets = self._base_offsets + [a.base_offset for a in added]
                segments = segments + tuple(added)
                self._path_index().update((a.path, a) for a in added)
                by_path = self._by_path
            else:
                segments = tuple(sorted(segments + tuple(added), key=lambda s: s.base_offset))
        elif not removed:
            base_offsets = self._base_offsets
            by_path = self._by_path
        return _build(version, protocol, metadata, segments, txns, tombstones, base_offsets, by_path)

    @classmethod
    def from_actions(cls, version: int, actions: list[Action]) -> Snapshot:
        """Build a snapshot from a full list of actions (version 0 or a checkpoint's content)."""
        protocol: Protocol | None = None
        metadata: Metadata | None = None
        segments: dict[str, SegmentRef] = {}
        txns: dict[str, Txn] = {}
        tombstones: dict[str, Remove] = {}
        for action in actions:
            if isinstance(action, Protocol):
                protocol = action
            elif isinstance(action, Metadata):
                metadata = action
            elif isinstance(action, Add):
                if action.path in segments:
                    raise duplicate_add_error(version, action.path, f"at offset {segments[action.path].base_offset}")
                segments[action.path] = _segment_from_add(action, version)
                tombstones.pop(action.path, None)
            elif isinstance(action, Remove):
                check_segment_path(action.path, version=version, action="remove")
                segments.pop(action.path, None)
                tombstones[action.path] = action
            elif isinstance(action, Txn):
                _apply_txn(txns, action)
        if protocol is None or metadata is None:
            raise LogCorrupted(f"log version {version} has no protocol or metaData action", version=version)
        ordered = tuple(sorted(segments.values(), key=lambda s: s.base_offset))
        return _build(version, protocol, metadata, ordered, txns, tombstones)


def assemble_snapshot(
    version: int,
    protocol: Protocol,
    metadata: Metadata,
    segments: list[SegmentRef],
    txns: dict[str, Txn],
    tombstones: dict[str, Remove],
) -> Snapshot:
    """A snapshot from already-decoded parts (the columnar checkpoint reader uses this)."""
    return _build(version, protocol, metadata, tuple(sorted(segments, key=lambda s: s.base_offset)), txns, tombstones)


def duplicate_add_error(version: int, path: str, where: str) -> LogCorrupted:
    return LogCorrupted(
        f"log version {version} adds {path!r}, which is live already ({where}): one segment at two offsets "
        "would deliver its messages twice, so the log is corrupt (edited by hand or by a foreign writer). "
        "Restore the commit from a backup; `pubsub topics check` reports it",
        version=version, path=path,
    )


def is_expired_txn(txn: Txn) -> bool:
    """A negative version retires a dedup entry (``jobs.log_maintenance.vacuum``, ``docs/PROTOCOL.md``).

    Sequence ids and batch numbers are never negative, so the marker cannot collide with a real
    version; the library's own ``pubsub.`` counters never expire.
    """
    return txn.version < 0 and not txn.app_id.startswith(RESERVED_TXN_PREFIX)


def _apply_txn(txns: dict[str, Txn], txn: Txn) -> None:
    # every replayer drops an expired entry the same way, so all processes agree on dedup state
    if is_expired_txn(txn):
        txns.pop(txn.app_id, None)
    else:
        txns[txn.app_id] = txn


def check_segment_path(path: object, *, version: int, action: str, where: str | None = None) -> str:
    """Refuse a path an ``add`` or ``remove`` may not carry: only segment names this library makes.

    Paths in the log are joined under the topic's directory by readers and deleted by vacuum, so a
    hand-written ``../`` (or an absolute path, or a nested one) would read or delete files outside
    the topic: the log is then corrupt, and the error names the commit (``docs/PROTOCOL.md`` 4.2).
    """
    if not isinstance(path, str) or codec_of(path) is None:
        place = where or f"log version {version}"
        raise LogCorrupted(
            f"{place} has a {action} of {path!r}, which is not a segment name (part-<32 hex>[.<codec>].parquet): "
            "the log was edited by hand or written by a foreign writer; nothing outside the topic is read "
            "or deleted. Run `pubsub topics check` to see the damage",
            version=version,
        )
    return path


def _segment_from_add(action: Add, version: int) -> SegmentRef:
    tags = action.tags or {}
    if TAG_BASE_OFFSET not in tags:
        raise LogCorrupted(
            f"log version {version} adds {action.path!r} without pubsub tags: a foreign writer changed "
            "this topic; only spark-pubsub may write to a topic's table",
            version=version,
        )
    check_segment_path(action.path, version=version, action="add")
    try:
        return SegmentRef.from_add(action.path, action.size, action.modification_time, tags)
    except (KeyError, ValueError) as exc:
        raise LogCorrupted(
            f"log version {version} adds {action.path!r} with malformed pubsub tags ({exc!r})",
            version=version,
        ) from exc


_COUNTERS = (TXN_NEXT_OFFSET, TXN_NEXT_ENTRY_ID, TXN_PRODUCER_EPOCH)


def _check_counters(version: int, metadata: Metadata, txns: dict[str, Txn]) -> None:
    """Refuse a ledger id or a counter of the library's own outside ``[0, 2**63 - 1]`` (int64, as in
    message ids and checkpoints): a hand edit, named here with its field rather than met later as a
    ``ValueError`` or ``OverflowError`` in every reader's poll."""
    ledger = metadata.configuration.get(LEDGER_ID_KEY)
    if ledger is not None and not (ledger.isascii() and ledger.isdigit() and int(ledger) <= INT64_MAX):
        raise LogCorrupted(
            f"log version {version} (or the checkpoint it was read from) has metaData configuration "
            f"{LEDGER_ID_KEY} = {ledger!r}, which is not a ledger id (a decimal integer from 0 to 2**63 - 1): "
            "the log was edited by hand; restore the commit that changed the metaData from a backup",
            version=version, field=LEDGER_ID_KEY,
        )
    for app_id in _COUNTERS:
        txn = txns.get(app_id)
        if txn is not None and txn.version < 0:
            raise LogCorrupted(
                f"log version {version} (or the checkpoint it was read from) has txn {app_id} = {txn.version}, "
                "which is negative: the log was edited by hand; restore the commit from a backup",
                version=version, field=app_id,
            )


def _build(
    version: int,
    protocol: Protocol,
    metadata: Metadata,
    segments: tuple[SegmentRef, ...],
    txns: dict[str, Txn],
    tombstones: dict[str, Remove],
    base_offsets: list[int] | None = None,
    by_path: list[dict[str, SegmentRef] | None] | None = None,
) -> Snapshot:
    _check_counters(version, metadata, txns)
    next_offset = max(
        segments[-1].end_offset if segments else 0,
        txns[TXN_NEXT_OFFSET].version if TXN_NEXT_OFFSET in txns else 0,
    )
    next_entry = max(
        max((s.end_entry_id for s in segments[-4:]), default=0),
        txns[TXN_NEXT_ENTRY_ID].version if TXN_NEXT_ENTRY_ID in txns else 0,
    )
    return Snapshot(
        version=version,
        protocol=protocol,
        metadata=metadata,
        segments=segments,
        txns=txns,
        tombstones=tombstones,
        next_offset=next_offset,
        next_entry_id=next_entry,
        _base_offsets=base_offsets if base_offsets is not None else [s.base_offset for s in segments],
        _by_path=by_path if by_path is not None else [None],
    )


__all__ = [
    "LEDGER_ID_KEY",
    "RESERVED_TXN_PREFIX",
    "TXN_DELETED",
    "TXN_NEXT_ENTRY_ID",
    "TXN_NEXT_OFFSET",
    "TXN_PRODUCER_EPOCH",
    "Snapshot",
    "assemble_snapshot",
    "check_segment_path",
    "duplicate_add_error",
    "is_expired_txn",
]
