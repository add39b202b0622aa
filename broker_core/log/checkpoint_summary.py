"""What a checkpoint says about itself, and the checks that catch a checkpoint that decodes but lies.

A checkpoint replaces the JSON commits it summarises: once log cleanup has deleted them, a reader
cannot compare, and vacuum deletes every file the checkpoint does not name.  So a checkpoint that
decodes but is wrong (edited by hand, written by a buggy or foreign writer, its rows shuffled by a
tool) would make readers skip messages silently and vacuum delete live segments.  Three guards:

- **a summary written with it**: the Parquet file's key-value metadata ``pubsub.checkpoint`` holds
  ``{"version", "numAdds", "nextOffset", "nextEntryId", "sha256"}``, the digest over every live
  segment's (path, base offset, rows, base entry id) and every txn (app id, version).  A reader
  recomputes it from what it decoded: any disagreement is ``LogCorrupted`` (Delta readers and older
  versions of this library ignore Parquet metadata; ``docs/PROTOCOL.md`` section 4.6);
- **structure**, for every checkpoint: live segments never overlap and no path is live twice; for a
  checkpoint without the summary (written by an earlier version), a hole between live segments
  must be documented by a data-loss record (a tombstone holding its ``pubsub.*`` tags);
- **the JSON commits**, where they still exist (``checkpoint_verify``): ``topics check`` and vacuum
  replay them and compare (``disagreement``).
"""

from __future__ import annotations

import hashlib
import json

from broker_core.errors import LogCorrupted
from broker_core.log.segment_ref import TAG_BASE_OFFSET, TAG_NUM_RECORDS
from broker_core.log.snapshot import Snapshot

SUMMARY_KEY = b"pubsub.checkpoint"


def state_digest(snapshot: Snapshot) -> str:
    """SHA-256 over the live segments and the txns, in a fixed text form."""
    lines = [f"{s.path}\t{s.base_offset}\t{s.num_records}\t{s.base_entry_id}\n" for s in snapshot.segments]
    lines += [f"txn\t{app}\t{txn.version}\n" for app, txn in sorted(snapshot.txns.items())]
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def summary_of(snapshot: Snapshot) -> bytes:
    """The summary written into the checkpoint of ``snapshot``."""
    return json.dumps({
        "version": snapshot.version,
        "numAdds": len(snapshot.segments),
        "nextOffset": snapshot.next_offset,
        "nextEntryId": snapshot.next_entry_id,
        "sha256": state_digest(snapshot),
    }, separators=(",", ":")).encode()


def check_checkpoint(snapshot: Snapshot, summary: bytes | None, where: str, *, trust_holes: bool = False) -> None:
    """Raise ``LogCorrupted`` when a decoded checkpoint contradicts itself or its summary.

    A hole only an older checkpoint's structure reveals carries ``unverified=True`` in the error's
    context: the opener then prefers any other starting point, but uses it (``trust_holes``) when
    nothing else is left, as earlier versions did.
    """
    version = snapshot.version
    previous = None
    for seg in snapshot.segments:
        if previous is not None and seg.base_offset < previous.end_offset:
            raise LogCorrupted(f"{where} has overlapping segments {previous.path!r} (offsets {previous.base_offset}.."
                               f"{previous.end_offset - 1}) and {seg.path!r} (from {seg.base_offset}): its messages "
                               "would be delivered twice", version=version)
        previous = seg
    if len({s.path for s in snapshot.segments}) != len(snapshot.segments):
        raise LogCorrupted(f"{where} names a live segment twice", version=version)
    if summary is not None:
        _check_summary(snapshot, summary, where)
        return
    if trust_holes:
        return
    lost = undocumented_holes(snapshot)
    if lost:
        raise LogCorrupted(f"{where} (written without a summary) leaves offsets {lost[0][0]}..{lost[0][1] - 1} to no "
                           "segment and no data-loss record documents them: it disagrees with the log it summarises",
                           version=version, unverified=True)


def _check_summary(snapshot: Snapshot, summary: bytes, where: str) -> None:
    try:
        doc = json.loads(summary)
        expected = {k: doc[k] for k in ("version", "numAdds", "nextOffset", "nextEntryId", "sha256")}
    except (ValueError, KeyError, TypeError) as exc:
        raise LogCorrupted(f"{where} has an unreadable summary ({exc!r})", version=snapshot.version) from exc
    found = json.loads(summary_of(snapshot))
    wrong = [k for k in expected if expected[k] != found[k]]
    if wrong:
        detail = ", ".join(f"{k} {found[k]!r} instead of {expected[k]!r}" for k in wrong)
        raise LogCorrupted(f"{where} disagrees with the summary written with it ({detail}): it was changed after it "
                           "was written", version=snapshot.version)


def undocumented_holes(snapshot: Snapshot) -> list[tuple[int, int]]:
    """Offset ranges between the first live offset and the next offset that no live segment holds and
    no tombstone's ``pubsub.*`` tags (a repair's data-loss record) account for."""
    lost = snapshot.holes(snapshot.first_offset, snapshot.next_offset)
    if not lost:
        return []
    documented = []
    for rm in snapshot.tombstones.values():
        tags = rm.tags or {}
        try:
            base = int(tags[TAG_BASE_OFFSET])
            documented.append((base, base + int(tags[TAG_NUM_RECORDS])))
        except (KeyError, ValueError):
            continue
    documented.sort()
    out = []
    for lo, hi in lost:
        pos = lo
        for a, b in documented:
            if a <= pos < b:
                pos = b
        if pos < hi:
            out.append((pos, hi))
    return out


def disagreement(replayed: Snapshot, loaded: Snapshot) -> str | None:
    """How ``loaded`` (a checkpoint's state) differs from the same version replayed from the JSON
    commits, or None when they agree (tombstones aside: vacuum's checkpoint expires old ones)."""
    mine = {s.path: (s.base_offset, s.num_records, s.base_entry_id) for s in loaded.segments}
    truth = {s.path: (s.base_offset, s.num_records, s.base_entry_id) for s in replayed.segments}
    if mine != truth:
        missing = sorted(set(truth) - set(mine))
        extra = sorted(set(mine) - set(truth))
        moved = sorted(p for p in set(mine) & set(truth) if mine[p] != truth[p])
        parts = [f"{label} {', '.join(paths[:3])}" for label, paths in
                 (("leaves out", missing), ("adds", extra), ("moves", moved)) if paths]
        return "; ".join(parts)
    if (loaded.next_offset, loaded.next_entry_id) != (replayed.next_offset, replayed.next_entry_id):
        return (f"next offset {loaded.next_offset} / entry id {loaded.next_entry_id} instead of "
                f"{replayed.next_offset} / {replayed.next_entry_id}")
    if {a: t.version for a, t in loaded.txns.items()} != {a: t.version for a, t in replayed.txns.items()}:
        return "its txn (deduplication) entries differ"
    return None


__all__ = ["SUMMARY_KEY", "check_checkpoint", "disagreement", "state_digest", "summary_of", "undocumented_holes"]
