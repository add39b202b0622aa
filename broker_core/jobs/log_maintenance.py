"""Log checkpoints, old-log cleanup and vacuum: keep a topic's directory small and Delta-readable.

- ``checkpoint`` writes a classic checkpoint of the latest version (a second call finds it written).
- ``cleanup_logs`` applies the Delta metadata-cleanup rule (``reference/delta-log-notes.md`` section
  5): take the newest readable checkpoint whose version was committed at or before ``now -
  retention_ms``, keep it, **its own** ``<v>.json`` and everything after, and delete only older
  commits, checkpoints and ``.crc`` files, oldest first; with no such checkpoint delete nothing.
  Before ``00000000000000000000.json`` can go, ``_last_checkpoint`` is made to name the kept
  checkpoint (or a newer one): openers (``TransactionLog``, ``deltalake``) and topic-existence checks
  rely on it.  A process whose cached log state is older than the cutoff notices the missing commit
  and reloads (``TransactionLog``), so it neither stalls nor re-creates a deleted version.
- ``vacuum`` deletes (a) the files of ``remove`` tombstones whose ``deletionTimestamp`` is older than
  ``min_age_ms`` and (b) orphan segments: top-level ``part-<hex>[.<codec>].parquet`` files named by no
  live ``add``, no tombstone and no staged-write manifest (``_pubsub/txn``), whose mtime is older than
  ``orphan_min_age_ms`` (default ``min_age_ms``; left by a killed writer or an aborted Spark batch).
  It never touches hidden or state paths (``_delta_log``, ``_cursors``, ``_producers``, anything
  starting with ``_`` or ``.``), nor files it does not recognise (they are reported).  It then commits
  one ``VACUUM END`` commit which also expires deduplication entries beyond
  ``brokerDeduplicationMaxNumberOfProducers`` (the least recently updated go; ``txn`` with version -1,
  which every replayer drops, see
  ``log.snapshot.is_expired_txn``), and checkpoints that version without the tombstones older than
  ``tombstone_retention_ms`` whose files are gone.  Delta has no action that forgets a tombstone;
  checkpoints dropping expired ones is how Delta itself expires them.  A process that loaded the log
  earlier may write them into a later checkpoint again; the next vacuum drops them again.

Vacuum also deletes crash temp files (``.<name>.<uuid>.tmp``) of the topic's state directories older
than ``orphan_min_age_ms``.  Neither job deletes anything on a plan made below a missing commit (a gap,
``log.gaps``): the commits after the gap reference files that would look unreferenced.  Vacuum also
re-checks the commits that landed while it planned, and keeps every file they name.

Deletion is destructive, so both cleanup and vacuum default to ``dry_run=True`` and, unless
``enforce_min_age=False``, refuse ages under ``MIN_SAFE_AGE_MS``: a shorter age can delete the file
of a write that is about to commit, or a version a slow reader is replaying.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq

from broker_core.broker.broker import Broker
from broker_core.broker.tenancy import topic_dir
from broker_core.errors import LogCorrupted
from broker_core.jobs.leftovers import crash_temp_files, require_no_gap
from broker_core.jobs.progress import (
    JobSummary,
    check_age,
    check_flag,
    check_ms,
    existing_log,
    now_or,
    resolve_targets,
    run_each,
)
from broker_core.log.actions import Action, Txn
from broker_core.log.checkpoint import (
    LAST_CHECKPOINT,
    LOG_DIR,
    checkpoint_path,
    read_checkpoint,
    read_last_checkpoint,
    write_checkpoint,
)
from broker_core.log.checkpoint_verify import verify_checkpoint, verify_state
from broker_core.log.protocol_versions import check_writable
from broker_core.log.segment import codec_of
from broker_core.log.snapshot import RESERVED_TXN_PREFIX, Snapshot
from broker_core.log.transaction_log import TransactionLog, commit_path
from broker_core.naming import TopicName
from broker_core.producer.bulk import STAGED_TXN_DIR
from broker_core.storage import FileIO

_LOG_FILE = re.compile(r"^(\d{20})\.(json|crc|checkpoint(\.\d{10}\.\d{10})?\.parquet)$")
_CLASSIC_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_NEVER_CHECKPOINT = 1 << 62


# --- checkpoint ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckpointResult:
    """The checkpoint of one internal topic: its version and whether this call wrote it."""

    topic: str
    version: int | None
    created: bool

    @property
    def changed(self) -> bool:
        return self.created

    def describe(self) -> str:
        if self.version is None:
            return "the partition has no log yet"
        return f"checkpoint at version {self.version} " + ("written" if self.created else "already there")


def checkpoint(broker: Broker, topic: str | TopicName) -> JobSummary[CheckpointResult]:
    """Write a checkpoint of the latest version of each internal topic (then the ``_last_checkpoint`` hint).

    Raises:
        TopicNotFound, NamespaceNotFound: the target does not exist.
    """
    target, partitions = resolve_targets(broker, topic)
    return run_each("checkpoint", target, partitions, lambda part: _checkpoint(broker, part), dry_run=False)


def _checkpoint(broker: Broker, topic: TopicName) -> CheckpointResult:
    log = existing_log(broker, topic)
    if log is None:
        return CheckpointResult(str(topic), None, False)
    snap = log.snapshot()
    return CheckpointResult(str(topic), snap.version, write_checkpoint(broker.io, log.path, snap))


# --- cleanup_logs ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanupResult:
    """Old log files of one internal topic deleted (or, in a dry run, that would be)."""

    topic: str
    kept_checkpoint: int | None
    deleted: tuple[str, ...]
    dry_run: bool
    reason: str

    @property
    def changed(self) -> bool:
        return not self.dry_run and bool(self.deleted)

    def describe(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        return f"{self.reason}; {verb} {len(self.deleted)} log file(s)"


def cleanup_logs(broker: Broker, topic: str | TopicName, *, retention_ms: int, dry_run: bool = True,
                 now_ms: int | None = None, enforce_min_age: bool = True) -> JobSummary[CleanupResult]:
    """Delete log commits and checkpoints older than the newest checkpoint committed before the
    cutoff ``now - retention_ms`` (Delta's metadata cleanup; see the module docstring).

    Raises:
        TopicNotFound, NamespaceNotFound: the target does not exist.
        InvalidConfiguration: a bad argument, or a retention under ``MIN_SAFE_AGE_MS`` while enforced.
    """
    check_flag(dry_run, "dry_run")
    cutoff = now_or(now_ms) - check_age(retention_ms, "retention_ms", enforce=enforce_min_age)
    target, partitions = resolve_targets(broker, topic)
    return run_each("cleanup-logs", target, partitions,
                    lambda part: _cleanup(broker, part, cutoff_ms=cutoff, dry_run=dry_run), dry_run=dry_run)


def _kept_checkpoint(io: FileIO, path: str, names: list[str], latest: int, cutoff_ms: int) -> Snapshot | None:
    """The newest readable checkpoint whose version was committed at or before the cutoff."""
    versions = sorted((int(m.group(1)) for n in names if (m := _CLASSIC_CHECKPOINT.match(n))), reverse=True)
    for version in versions:
        committed = io.stat(commit_path(path, version)) or io.stat(checkpoint_path(path, version))
        file = io.stat(checkpoint_path(path, version))
        if version > latest or committed is None or file is None or file.size_bytes == 0:
            continue
        if committed.mtime_ms > cutoff_ms:
            continue
        try:
            snap = read_checkpoint(io, path, version)
        except LogCorrupted:
            continue  # readers skip it too; an older one may still serve
        if snap is not None:
            return snap
    return None


def _cleanup(broker: Broker, topic: TopicName, *, cutoff_ms: int, dry_run: bool) -> CleanupResult:
    log = existing_log(broker, topic)
    if log is None:
        return CleanupResult(str(topic), None, (), dry_run, "the partition has no log yet")
    io, path = broker.io, log.path
    latest_snap = log.snapshot()
    latest = latest_snap.version
    if not dry_run:
        check_writable(latest_snap, path)  # a newer writer's log: delete nothing
    names = io.list_dir(f"{path}/{LOG_DIR}")
    kept = _kept_checkpoint(io, path, names, latest, cutoff_ms)
    if kept is None:
        return CleanupResult(str(topic), None, (), dry_run, "no checkpoint committed before the cutoff")
    doomed = sorted((int(m.group(1)), n) for n in names
                    if (m := _LOG_FILE.match(n)) and int(m.group(1)) < kept.version)
    if not dry_run and doomed:
        require_no_gap(io, path, latest)
        wrong = verify_checkpoint(io, path, kept)
        if wrong is not None:  # the commits about to go are the only witness against it
            raise LogCorrupted(f"{checkpoint_path(path, kept.version)} disagrees with the JSON commits ({wrong}): "
                               "nothing is deleted. Run `pubsub topics check --repair` to rebuild it from the "
                               "commits", version=kept.version, path=path)
        hint = read_last_checkpoint(io, path)
        if hint is None or hint < kept.version:  # version 0 may go: openers must find the checkpoint
            rows = pq.ParquetFile(io.open_input(checkpoint_path(path, kept.version))).metadata.num_rows
            hint_doc = {"version": kept.version, "size": rows, "numOfAddFiles": len(kept.segments)}
            io.replace(f"{path}/{LOG_DIR}/{LAST_CHECKPOINT}", json.dumps(hint_doc).encode(), anchor=path)
        for _, name in doomed:  # oldest first: a kill leaves a contiguous log after some version
            io.delete(f"{path}/{LOG_DIR}/{name}")
    return CleanupResult(str(topic), kept.version, tuple(n for _, n in doomed), dry_run,
                         f"kept checkpoint {kept.version} and every version after it")


# --- vacuum ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VacuumResult:
    """What vacuum deleted (or would) on one internal topic, and what it kept and why.

    Attributes:
        deleted_removed: files of expired ``remove`` tombstones.
        deleted_orphans: segment files nothing references.
        kept_young: unreferenced or tombstoned files still under the minimum age.
        unknown: non-hidden files that are not segments (never deleted).
        expired_txns: deduplication entries retired (least recently updated first).
        dropped_tombstones: tombstones left out of the vacuum checkpoint.
        version: the ``VACUUM END`` commit (None: nothing committed).
        deleted_temps: temp files of writes killed before their link (``.<name>.<uuid>.tmp``), by path.
    """

    topic: str
    deleted_removed: tuple[str, ...]
    deleted_orphans: tuple[str, ...]
    deleted_bytes: int
    kept_young: int
    unknown: tuple[str, ...]
    expired_txns: tuple[str, ...]
    dropped_tombstones: int
    version: int | None
    dry_run: bool
    deleted_temps: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        deleted = self.deleted_removed or self.deleted_orphans or self.deleted_temps
        return not self.dry_run and (bool(deleted) or self.version is not None)

    def describe(self) -> str:
        return (f"{'would delete' if self.dry_run else 'deleted'} {len(self.deleted_removed)} removed and "
                f"{len(self.deleted_orphans)} orphan file(s) ({self.deleted_bytes} bytes); {self.kept_young} "
                f"too young; {len(self.unknown)} unknown kept; {len(self.expired_txns)} dedup entries "
                f"expired; {self.dropped_tombstones} tombstones dropped; {len(self.deleted_temps)} crash temp "
                "file(s)")


def staged_paths(io: FileIO) -> set[str]:
    """Segment names recorded by staged-write manifests (``_pubsub/txn``): a replayed batch commits them."""
    out: set[str] = set()
    for app in io.list_dir(STAGED_TXN_DIR):
        for name in io.list_dir(f"{STAGED_TXN_DIR}/{app}"):
            data = io.read_bytes(f"{STAGED_TXN_DIR}/{app}/{name}") if name.endswith(".json") else None
            try:
                topics = json.loads(data)["topics"] if data else {}
                out.update(seg["path"] for segs in topics.values() for seg in segs)
            except (ValueError, KeyError, TypeError, RecursionError):
                continue
    return out


def expired_txns(snap: Snapshot, max_producers: int) -> list[str]:
    """Deduplication entries beyond ``max_producers``, least recently updated first (reserved ids never)."""
    entries = [t for t in snap.txns.values() if not t.app_id.startswith(RESERVED_TXN_PREFIX)]
    entries.sort(key=lambda t: (t.last_updated or 0, t.app_id))
    return [t.app_id for t in entries[: max(0, len(entries) - max_producers)]]


def vacuum(broker: Broker, topic: str | TopicName, *, min_age_ms: int, dry_run: bool = True,
           now_ms: int | None = None, tombstone_retention_ms: int | None = None,
           max_producers: int | None = None, enforce_min_age: bool = True,
           orphan_min_age_ms: int | None = None) -> JobSummary[VacuumResult]:
    """Delete expired removed segments and old orphan segments, expire surplus dedup entries and old
    tombstones (see the module docstring).

    Args:
        min_age_ms: files younger than this (since removal, or since written for orphans) stay.
        dry_run: report only (the default).
        now_ms: "now" (defaults to the wall clock; compared with file times and deletion timestamps).
        tombstone_retention_ms: tombstones older than this whose files are gone leave the checkpoint
            (default: ``min_age_ms``).
        max_producers: dedup entries kept (default: ``brokerDeduplicationMaxNumberOfProducers``).
        enforce_min_age: refuse a ``min_age_ms`` under ``MIN_SAFE_AGE_MS``.
        orphan_min_age_ms: files no commit names (and crash temp files) younger than this stay (default:
            ``min_age_ms``); never under ``MIN_SAFE_AGE_MS``, because a staged write may still commit
            them (``pubsub maintain`` passes a short ``min_age_ms`` with ``enforce_min_age=False``, D180).

    Raises:
        TopicNotFound, NamespaceNotFound: the target does not exist.
        InvalidConfiguration: a bad argument (nothing changed).
    """
    check_flag(dry_run, "dry_run")
    age = check_age(min_age_ms, "min_age_ms", enforce=enforce_min_age)
    orphan_age = age if orphan_min_age_ms is None else check_age(orphan_min_age_ms, "orphan_min_age_ms", enforce=True)
    tomb_age = check_ms(tombstone_retention_ms, "tombstone_retention_ms", allow_none=True)
    keep = check_ms(max_producers, "max_producers", allow_none=True, minimum=1)
    options: dict[str, Any] = {
        "now": now_or(now_ms), "age": age, "orphan_age": orphan_age, "tomb_age": age if tomb_age is None else tomb_age,
        "max_producers": broker.config.broker_deduplication_max_number_of_producers if keep is None else keep,
        "dry_run": dry_run,
    }
    target, partitions = resolve_targets(broker, topic)
    staged = staged_paths(broker.io)
    return run_each("vacuum", target, partitions, lambda part: _vacuum(broker, part, staged, **options),
                    dry_run=dry_run)


def _vacuum(broker: Broker, topic: TopicName, staged: set[str], *, now: int, age: int, orphan_age: int,
            tomb_age: int, max_producers: int, dry_run: bool) -> VacuumResult:
    if existing_log(broker, topic) is None:
        return VacuumResult(str(topic), (), (), 0, 0, (), (), 0, None, dry_run)
    io, path = broker.io, topic_dir(topic)
    # a private handle loads what a fresh opener sees (the newest checkpoint, so tombstones an earlier
    # vacuum dropped stay dropped) and never checkpoints by itself (the vacuum checkpoint is ours)
    log = TransactionLog(io, path, checkpoint_interval=_NEVER_CHECKPOINT,
                         max_retries=broker.config.commit_max_retries)
    snap = log.snapshot()
    if not dry_run:
        check_writable(snap, path)  # a newer writer's log: delete nothing
    verify_state(io, path, snap)  # a checkpoint that lies about the live segments: delete nothing
    live = {seg.path for seg in snap.segments}
    referenced = _named(snap) | staged
    removed: list[str] = []
    orphans: list[str] = []
    missing: set[str] = set()  # tombstoned files already deleted
    sizes: dict[str, int] = {}
    young = 0
    for rm in snap.tombstones.values():
        if codec_of(rm.path) is None:  # decoders refuse such paths already; deletion checks again
            continue
        stat = io.stat(f"{path}/{rm.path}")
        if stat is None:
            missing.add(rm.path)
        if rm.path in live or stat is None:
            continue
        if (rm.deletion_timestamp or 0) <= now - age:
            removed.append(rm.path)
            sizes[rm.path] = stat.size_bytes
        else:
            young += 1
    unknown: list[str] = []
    for name in io.list_dir(path):
        if name.startswith(("_", ".")) or name in referenced:
            continue  # hidden state, or a file the log (or a staged write) still names
        stat = io.stat(f"{path}/{name}") if codec_of(name) is not None else None
        if stat is None:
            unknown.append(name)  # not a segment of ours (a directory, a stray file): never deleted
        elif stat.mtime_ms <= now - orphan_age:
            orphans.append(name)
            sizes[name] = stat.size_bytes
        else:
            young += 1
    # tombstones old enough to leave the checkpoint, once their files are gone
    gone = {p for p in missing | set(removed)
            if p not in live and (snap.tombstones[p].deletion_timestamp or 0) <= now - tomb_age}
    temps = crash_temp_files(io, path, older_than_ms=now - orphan_age)
    result = VacuumResult(str(topic), tuple(sorted(removed)), tuple(sorted(orphans)), sum(sizes.values()),
                          young, tuple(unknown), tuple(expired_txns(snap, max_producers)), len(gone), None,
                          dry_run, tuple(temps))
    if dry_run or not (removed or orphans or result.expired_txns or gone or temps):
        return result
    if require_no_gap(io, path, snap.version):
        # commits landed while we planned: one may name a file we took for an orphan; replay them
        now_named = _named(log.snapshot())
        orphans = [name for name in orphans if name not in now_named]
        removed = [name for name in removed if name not in {seg.path for seg in log.snapshot().segments}]
        result = dataclasses.replace(result, deleted_removed=tuple(sorted(removed)),
                                     deleted_orphans=tuple(sorted(orphans)))
    for name in sorted(removed) + sorted(orphans):
        io.delete(f"{path}/{name}")
    for temp in temps:
        io.delete(temp)
    if not (removed or orphans or result.expired_txns or gone):
        return result
    committed, expiring = _commit_vacuum(log, result, max_producers=max_producers, now=now)
    kept = {p: rm for p, rm in committed.tombstones.items() if p not in gone or io.exists(f"{path}/{p}")}
    written = write_checkpoint(io, path, dataclasses.replace(committed, tombstones=kept))
    return dataclasses.replace(result, version=committed.version, expired_txns=tuple(expiring),
                               dropped_tombstones=len(committed.tombstones) - len(kept) if written else 0)


def _named(snap: Snapshot) -> set[str]:
    """Every file a snapshot names, live or tombstoned."""
    return {seg.path for seg in snap.segments} | set(snap.tombstones)


def _commit_vacuum(log: TransactionLog, result: VacuumResult, *, max_producers: int,
                   now: int) -> tuple[Snapshot, list[str]]:
    """One ``VACUUM END`` commit: the audit record, plus the expiry of surplus dedup entries."""
    parameters: dict[str, object] = {}
    expiring: list[str] = []

    def build(snap: Snapshot) -> list[Action]:
        expiring[:] = expired_txns(snap, max_producers)  # re-evaluated: a producer may have just written
        parameters.clear()  # commit() renders commitInfo from this dict after build returns
        parameters.update(numDeletedFiles=len(result.deleted_removed) + len(result.deleted_orphans),
                          numDeletedBytes=result.deleted_bytes, numExpiredTxns=len(expiring), nowMs=now)
        return [Txn(app_id=app_id, version=-1, last_updated=now) for app_id in expiring]

    return log.commit(build, operation="VACUUM END", parameters=parameters).snapshot, expiring


__all__ = [
    "CheckpointResult",
    "CleanupResult",
    "VacuumResult",
    "checkpoint",
    "cleanup_logs",
    "expired_txns",
    "staged_paths",
    "vacuum",
]
