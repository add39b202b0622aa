"""The transaction log of one internal topic: load, poll and commit.

Commits are ``_delta_log/<20-digit version>.json`` files created with put-if-absent.  A writer that
loses the race for version v+1 applies the winner's commit to its snapshot, calls its ``build``
function again against the new state (so dedup, fencing and offsets are re-validated) and tries
v+2.  Nothing is ever overwritten.

Polling for new data is a read attempt of the next version's file, never a directory listing, and
opening replays at most ``checkpoint_interval`` commits after the newest checkpoint, so neither gets
slower as the log grows (``docs/PROTOCOL.md``).

A deleted topic's log ends with a tombstone (``Admin.delete_topic``): no commit can follow it, and a
handle never replays past it.  Once the tombstoned log is gone, the handle follows whatever is at the
path, possibly a re-created topic that starts again at version 0; a writer therefore checks, before
it commits, that the version its state is at is still the commit it read (``live_snapshot``), unless
it committed that version itself a moment ago: then it goes straight to the conditional put, whose
refusal is all it needs to hear of another writer (``writer_tip``).  Opening (``opening``) and
background checkpoints (``checkpointer``) live beside this module.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from broker_core.errors import (
    BrokerPersistenceError,
    CommitConflict,
    DirectoryGone,
    TopicDeleted,
    TopicNotFound,
)
from broker_core.log import writer_tip
from broker_core.log.actions import Action, CommitInfo, Metadata, Protocol, decode_actions, encode_actions
from broker_core.log.checkpoint import LAST_CHECKPOINT, LOG_DIR, write_checkpoint
from broker_core.log.checkpointer import Checkpointer
from broker_core.log.gaps import check_no_gap, commit_path, first_commit_above, gap_error, verify_period_s
from broker_core.log.opening import starting_state
from broker_core.log.protocol_versions import check_readable, check_writable, writable
from broker_core.log.snapshot import Snapshot
from broker_core.log.writer_tip import OwnCommit
from broker_core.storage import FileIO

_LOG = logging.getLogger(__name__)
ENGINE_INFO = "spark-pubsub/0.1"


class NothingToCommit(Exception):
    """Raised by a ``build`` function when, against the latest state, there is nothing to write."""


@dataclass(frozen=True, slots=True)
class CommitResult:
    version: int
    snapshot: Snapshot
    attempts: int


class TransactionLog:
    """Loads, polls and commits the Delta-style log of one table directory.

    Args:
        io: the storage.
        table_path: the internal topic's directory, relative to the root.
        checkpoint_interval: write a checkpoint every this many versions.
        max_retries: attempts before a commit gives up with ``CommitConflict``.
    """

    def __init__(
        self,
        io: FileIO,
        table_path: str,
        *,
        checkpoint_interval: int = 100,
        max_retries: int = 1000,
        background_checkpoints: bool = False,
    ) -> None:
        self.io = io
        self.table_path = table_path
        self.checkpoint_interval = checkpoint_interval
        self.max_retries = max_retries
        self._checkpoints = Checkpointer(io, table_path, background=background_checkpoints)
        self._lock = threading.RLock()
        self._snapshot: Snapshot | None = None
        self._verify_period_s = verify_period_s(io)  # idle checks of the tip: 1 s on a folder, 10 s remote
        self._verified_s = time.monotonic()
        self._last_gap_probe_s = self._verified_s
        self._tip: tuple[int, int] | None = None  # (version, hash of its commit file) of ``_snapshot``
        self._own: OwnCommit | None = None  # this handle's last commit, while it may be trusted (writer_tip)
        self.on_polled: Callable[[Snapshot, list[Action]], None] | None = None
        """Called (under the log's lock: must not block) with each commit a poll finds after the cached
        state, as soon as it is parsed and before the poll reads on (``topic.prefetch``)."""

    # -- reading ------------------------------------------------------------------------------------

    def exists(self) -> bool:
        """Version 0, or a checkpoint hint once log cleanup removed the oldest commits."""
        snap = self._snapshot
        return ((snap is not None and not snap.deleted) or self.io.exists(commit_path(self.table_path, 0))
                or self.io.exists(f"{self.table_path}/{LOG_DIR}/{LAST_CHECKPOINT}"))

    def _read_commit(self, version: int) -> tuple[list[Action], int] | None:
        """The actions of a commit and a hash of its file (which tells two topics' version v apart)."""
        data = self.io.read_bytes(commit_path(self.table_path, version))
        if data is None:
            return None
        return decode_actions(data, version=version), hash(data)

    def _load(self) -> Snapshot:
        """Open the log: the starting checkpoint (``log.opening``), then the commits after it.  An
        opener lists the log once to make sure no commit is missing below the newest (``log.gaps``)."""
        self._tip = None
        listed: list[str] = []
        snapshot = self._replay_from(starting_state(self.io, self.table_path, listed=listed))
        # a listing made while opening that shows no commit above the replayed one leaves no gap to find:
        # a commit is only ever created on top of the one before it (``log.gaps``)
        if not snapshot.deleted and not (listed and first_commit_above(listed, snapshot.version) is None):
            check_no_gap(self.io, self.table_path, snapshot.version, listed=True)
        return snapshot

    def _replay_from(self, snapshot: Snapshot, *, verify: bool = True) -> Snapshot:
        check_readable(snapshot, self.table_path)
        if snapshot.deleted:
            # the tombstone ends this log: a version after it would belong to a topic re-created at this
            # path, so never probe for one; reload once the tombstoned log is gone (at most every second)
            if verify and self._snapshot is not None and self._cleaned_up_below(snapshot, rate_limited=True):
                return self._reload()
            self._snapshot = snapshot
            return snapshot
        replayed = 0
        tip = None
        while not snapshot.deleted:
            read = self._read_commit(snapshot.version + 1)
            if read is None:
                if replayed == 0 and verify and self._verify_tip(snapshot):
                    return self._reload()
                break
            actions, tip = read
            snapshot = snapshot.apply(snapshot.version + 1, actions)
            check_readable(snapshot, self.table_path)  # (a protocol upgrade in this commit)
            replayed += 1
            if self.on_polled is not None and self._snapshot is not None:  # a poll, not an opening
                self.on_polled(snapshot, actions)
        self._snapshot = snapshot
        if tip is not None:
            self._tip = (snapshot.version, tip)
        if replayed > self.checkpoint_interval and not snapshot.deleted:
            self._heal(snapshot)
        return snapshot

    def _heal(self, snapshot: Snapshot) -> None:
        """A writer died before checkpointing: write the checkpoint it owed, so the next opener
        replays little.

        This is a reader's favour to the log, never part of the read: a reader may have no write
        permission (a read-only mount, an object store it may only read), so a failed write is
        ignored and the read goes on.  Nothing half-done is left: a failed put-if-absent creates no
        checkpoint, and a failed hint replacement leaves a complete checkpoint beside a hint that
        names an older one (a stale hint only means more replay, and listing finds the newer
        checkpoint).
        """
        if not writable(snapshot):  # a newer writer's log: a reader's favour is no write either
            return
        try:
            write_checkpoint(self.io, self.table_path, snapshot)
        except (BrokerPersistenceError, OSError) as exc:  # OSError: PermissionError and pyarrow's fs
            _LOG.debug("not healing the log of %s at version %d: %s", self.table_path, snapshot.version, exc)

    def _verify_tip(self, snapshot: Snapshot) -> bool:
        """At most once per verify period while idle (``gaps.verify_period_s``): True when cleanup
        removed our version (reload), and ``LogCorrupted`` when the next version is missing though a
        later one exists (a gap)."""
        if self._cleaned_up_below(snapshot, rate_limited=True):
            return True
        if self._verified_s == self._last_gap_probe_s:
            return False
        self._last_gap_probe_s = self._verified_s
        check_no_gap(self.io, self.table_path, snapshot.version, listed=False)
        return False

    def _cleaned_up_below(self, snapshot: Snapshot, *, rate_limited: bool) -> bool:
        """Did log cleanup delete the commit our cached state is at (``jobs.log_maintenance``)?

        Cleanup keeps the newest old-enough checkpoint's own commit and everything after it, so a
        missing ``<v>.json`` means newer versions and a newer checkpoint exist: a handle idle for
        longer than the log retention would otherwise see "no next version" forever, and a commit
        from it would re-create a deleted version number that no reader replays.  Idle polling
        pays for the extra ``stat`` at most once per ``gaps.verify_period_s`` (1 s on a folder, 10 s on
        an object store, where it is a billed HEAD).
        """
        if rate_limited:
            now = time.monotonic()
            if now - self._verified_s < self._verify_period_s:
                return False
            self._verified_s = now
        return not self.io.exists(commit_path(self.table_path, snapshot.version))

    def _reload(self) -> Snapshot:
        """Load afresh; a log that vanished from under a loaded handle was deleted (``TopicDeleted``)."""
        previous, self._snapshot = self._snapshot, None
        self._verified_s = time.monotonic()
        try:
            return self._load()
        except TopicNotFound as exc:
            if previous is None or isinstance(exc, TopicDeleted):
                raise
            raise self._deleted(previous) from exc

    def _same_log(self, snapshot: Snapshot) -> bool:
        """Is ``<v>.json`` still the commit this state was built on (v = the state's version)?

        Existence alone cannot tell: a topic deleted and re-created under the same name starts again
        at version 0, and a handle that slept through both would otherwise commit on top of the new
        topic's version v as if it were its own.  One small read, paid by writers only.
        """
        data = self.io.read_bytes(commit_path(self.table_path, snapshot.version))
        if data is None:
            return False
        if self._tip is None or self._tip[0] != snapshot.version:
            self._tip = (snapshot.version, hash(data))  # loaded from a checkpoint: first look at it
            return True
        return self._tip[1] == hash(data)

    def _deleted(self, snapshot: Snapshot) -> TopicDeleted:
        name = snapshot.metadata.name or self.table_path
        return TopicDeleted(f"topic {name} was deleted; nothing more can be written to it", topic=name)

    def _past_deletion(self, snapshot: Snapshot) -> Snapshot:
        """A tombstoned state.  While the tombstoned log is still there (a deletion under way, or one
        that was killed: delete again), the topic is deleted; once it is gone, whatever is at the path
        is a new topic, which this shared handle follows (its writers check that it is theirs)."""
        if self.io.exists(commit_path(self.table_path, snapshot.version)):
            raise self._deleted(snapshot)
        fresh = self._reload()
        if fresh.deleted:
            raise self._deleted(fresh)
        return fresh

    def live_snapshot(self) -> Snapshot:
        """The latest state as a writer must see it: of the topic now at this path, never deleted.

        Unlike ``snapshot`` it first checks that the cached version is still the commit it read, and
        it raises ``TopicDeleted`` for a topic whose deletion has begun.  Writers pin the topic's
        identity (``metadata.id``) from here.
        """
        with self._lock:
            if self._snapshot is not None and not self._same_log(self._snapshot):
                self._reload()
            snapshot = self.snapshot()
            return self._past_deletion(snapshot) if snapshot.deleted else snapshot

    def writer_snapshot(self) -> Snapshot:
        """The state a commit builds on: this handle's own last commit while it may be trusted
        without reading anything (``writer_tip``), else ``live_snapshot``."""
        with self._lock:
            own, snap = self._own, self._snapshot
            if own is not None and snap is not None and own.vouches_for(snap):
                return snap
            self._own = None
            return self.live_snapshot()

    def snapshot(self, *, verify: bool = True) -> Snapshot:
        """The latest state (polls the next version files; loads on first use).

        ``verify=False`` skips the idle checks of the cached tip (``_verify_tip``, extra HEADs on an
        object store) for a poller that makes them on a schedule of its own (the metrics exporter).
        """
        with self._lock:
            if self._snapshot is None:
                return self._load()
            return self._replay_from(self._snapshot, verify=verify)

    def cached_snapshot(self) -> Snapshot:
        """The last known state without touching storage (loads on first use)."""
        snap = self._snapshot
        if snap is None:
            return self.snapshot()
        return snap

    def has_newer_version(self) -> bool:
        """A cheap poll: does the next version's commit exist?  (Never after a tombstone.)"""
        snap = self._snapshot
        if snap is None:
            return self.exists()
        return not snap.deleted and self.io.exists(commit_path(self.table_path, snap.version + 1))

    # -- writing ------------------------------------------------------------------------------------

    def create(self, metadata: Metadata, *, operation: str = "CREATE TABLE") -> bool:
        """Write version 0 (protocol + metaData); return False if the table exists already."""
        actions: list[Action] = [
            Protocol(min_reader_version=1, min_writer_version=2),
            metadata,
            CommitInfo(timestamp=int(time.time() * 1000), operation=operation, engine_info=ENGINE_INFO),
        ]
        return self.io.put_if_absent(commit_path(self.table_path, 0), encode_actions(actions))

    def commit(
        self,
        build: Callable[[Snapshot], list[Action]],
        *,
        operation: str,
        parameters: dict[str, object] | None = None,
    ) -> CommitResult:
        """Commit the actions ``build`` returns for the latest snapshot, retrying on conflicts.

        ``build`` is called once per attempt with the snapshot the commit would follow; it may raise
        ``NothingToCommit`` (propagated) or any error of its own (propagated, nothing written).
        Nothing is committed after a deletion's tombstone (``TopicDeleted``), and no commit ever
        re-creates a removed topic directory.
        """
        with self._lock:
            # a stale handle must never re-create a cleaned-up version nor build on another topic's:
            # live_snapshot checks the cached version's commit, unless this handle wrote it a moment
            # ago (``writer_tip``); later attempts replay what they lost to
            snapshot = self.writer_snapshot()
            trusted = snapshot is self._snapshot and self._own is not None
            for attempt in range(1, self.max_retries + 1):
                if snapshot.deleted:  # a deletion won the race for this version
                    raise self._deleted(snapshot)
                check_writable(snapshot, self.table_path)
                actions = build(snapshot)
                info = CommitInfo(
                    timestamp=int(time.time() * 1000),
                    operation=operation,
                    operation_parameters=parameters or {},
                    read_version=snapshot.version,
                    is_blind_append=False,
                    engine_info=ENGINE_INFO,
                )
                version = snapshot.version + 1
                if not trusted and self.io.exists(commit_path(self.table_path, version + 1)):  # never fill a gap
                    if not self.io.exists(commit_path(self.table_path, version)):
                        raise gap_error(self.table_path, version, version + 1)
                    snapshot = self._replay_from(snapshot)  # lost the race to two commits already
                    continue
                payload = encode_actions([*actions, info])
                # apply before writing: actions the log could not replay (LogCorrupted) must never
                # reach storage, where they would poison every later reader
                applied = snapshot.apply(version, actions)
                self._own = None
                started_s = writer_tip.monotonic_s()
                try:
                    created = self.io.put_if_absent(commit_path(self.table_path, version), payload,
                                                    anchor=self.table_path)
                except DirectoryGone as exc:  # the topic was deleted (its directory renamed away)
                    raise self._deleted(snapshot) from exc
                if created:
                    snapshot = applied
                    self._snapshot, self._tip = snapshot, (version, hash(payload))
                    if not self.io.is_local:
                        self._own = OwnCommit.now(snapshot, started_s)
                    if version % self.checkpoint_interval == 0:
                        self._checkpoints.owe(snapshot)
                    return CommitResult(version=version, snapshot=snapshot, attempts=attempt)
                # lost the race: catch up and re-validate
                trusted = False
                snapshot = self._replay_from(snapshot)
                if attempt > 8:
                    time.sleep(random.uniform(0, min(0.05, 0.001 * attempt)))
            raise CommitConflict(
                f"gave up committing to {self.table_path!r} after {self.max_retries} conflicting attempts; "
                "too many writers on one partition: add partitions or raise commitMaxRetries",
                path=self.table_path,
            )

    def wait_for_checkpoints(self, timeout_s: float = 30.0) -> None:
        """Block until background checkpoints are written (tests, clean shutdown)."""
        self._checkpoints.wait(timeout_s)

    def checkpoint(self) -> int:
        """Write a checkpoint of the latest version now; return that version."""
        with self._lock:
            snapshot = self.snapshot()
            write_checkpoint(self.io, self.table_path, snapshot)
            return snapshot.version


__all__ = ["CommitResult", "NothingToCommit", "TransactionLog", "commit_path"]
