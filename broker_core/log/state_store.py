"""Small versioned JSON state committed with put-if-absent (registries, metadata, cursors).

Each version is a complete document ``<dir>/<20-digit version>.json``; an update reads the latest,
computes the next document and creates the next version, retrying on a lost race, exactly like a
log commit.  Old versions are deleted in ascending order, keeping the newest ``keep_versions``,
which lets a poller detect that its cached version was cleaned up: if version v+1 is missing *and*
v is gone too, it lists the directory once to find the latest.

State inside a topic (producer registry, cursors) is written with the topic's directory as the
``anchor``: a handle still writing after the topic was deleted fails with ``DirectoryGone`` rather
than re-create the directory.  Before an update builds on its cached version, it checks that the file
is still the one it read (its ``_writeId``): a topic re-created under the same name numbers its
versions from 0 again.
"""

from __future__ import annotations

import json
import logging
import random
import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from broker_core.errors import CommitConflict, LogCorrupted
from broker_core.log.gaps import verify_period_s
from broker_core.storage import FileIO

_LOG = logging.getLogger(__name__)
_VERSION_RE = re.compile(r"^(\d{20})\.json$")

Document = dict[str, Any]

# Every version records a random id and its parent's id (an audit trail of who built on what);
# callers never see these keys.  ``_floor`` records the cleanup cutoff before anything is deleted,
# which is how a paused writer learns that the version it just created had been cleaned up.
_ID = "_writeId"
_PARENT = "_parentId"
_FLOOR = "_floor"


def _strip(doc: Document) -> Document:
    doc.pop(_ID, None)
    doc.pop(_PARENT, None)
    return doc


class VersionedState:
    """A versioned JSON document in a directory.

    Args:
        io: the storage.
        directory: the state's directory, relative to the root.
        keep_versions: how many newest versions survive cleanup.
        anchor: a directory above ``directory`` that writes must never re-create (see the module doc).
        validate: decodes a document the way its user will (raising ``ValueError``, ``KeyError`` or
            ``TypeError`` when it cannot); a version that fails it counts as damaged, like one that
            is not JSON.  With ``fall_back`` a damaged version is skipped (logged once, the newest
            readable older version is used, and the next update writes after the damaged one);
            without it, reading it raises ``LogCorrupted`` naming the file.
    """

    def __init__(
        self, io: FileIO, directory: str, *, keep_versions: int = 20, max_retries: int = 1000,
        anchor: str | None = None, validate: Callable[[Document], object] | None = None, fall_back: bool = False,
    ) -> None:
        self.io = io
        self.validate = validate
        self.fall_back = fall_back
        self.damaged: dict[int, str] = {}  # version -> why, for the versions skipped so far
        self.directory = directory
        self.anchor = anchor
        self.keep_versions = keep_versions
        self.max_retries = max_retries
        self._lock = threading.RLock()
        self._version = -1
        self._doc: Document | None = None
        self._fresh = False  # the last ``latest`` read the current document (rather than trusting the cache)
        self._cleaner: threading.Thread | None = None
        self._verify_period_s = verify_period_s(io)
        self._verified_s = -float("inf")  # when the cached version was last seen or checked on storage

    def _path(self, version: int) -> str:
        return f"{self.directory}/{version:020d}.json"

    def _read(self, version: int) -> Document | None:
        data = self.io.read_bytes(self._path(version))
        if data is None:
            return None
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise LogCorrupted(f"state file {self._path(version)!r} is not JSON: {exc}", version=version) from exc
        except RecursionError:  # nested deeper than the parser's stack allows: no state document is
            raise LogCorrupted(f"state file {self._path(version)!r} is not a state document: its JSON nests "
                               "deeper than the parser allows", version=version) from None
        if not isinstance(doc, dict):
            raise LogCorrupted(f"state file {self._path(version)!r} is not a JSON object", version=version)
        if self.validate is not None:
            try:
                self.validate(_strip(dict(doc)))
            except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
                raise LogCorrupted(f"state file {self._path(version)!r} is malformed ({exc!r})",
                                   version=version) from exc
        return doc

    def _read_or_skip(self, version: int) -> Document | LogCorrupted | None:
        """As ``_read``, but with ``fall_back`` a damaged version is returned as its error."""
        try:
            return self._read(version)
        except LogCorrupted as exc:
            if not self.fall_back:
                raise
            if version not in self.damaged:
                self.damaged[version] = str(exc)
                _LOG.warning("%s; skipping it and using the newest readable older version (repair with "
                             "`pubsub topics check --repair`)", exc)
            return exc

    def _relist(self) -> None:
        self._fresh = True
        self._verified_s = time.monotonic()
        versions = sorted(int(m.group(1)) for n in self.io.list_dir(self.directory) if (m := _VERSION_RE.match(n)))
        newest_damaged: LogCorrupted | None = None
        top = -1
        for version in reversed(versions):
            doc = self._read_or_skip(version)
            if isinstance(doc, LogCorrupted):
                newest_damaged = newest_damaged or doc
                top = max(top, version)
                continue
            if doc is not None:
                self._version, self._doc = max(top, version), doc  # the next update goes above the damage
                return
        if newest_damaged is not None:
            raise newest_damaged  # no readable version is left to fall back to
        self._version, self._doc = -1, None

    def latest(self, *, verify: bool = True) -> tuple[int, Document | None]:
        """The newest version and document (-1, None when nothing was ever written).

        ``verify=False`` skips the cleaned-up check (``_cleaned_up``) for a poller that makes it on a
        schedule of its own (the metrics exporter): the poll is then one read of the next version."""
        return self._latest(verify=verify)

    def _latest(self, *, verify: bool) -> tuple[int, Document | None]:
        """``latest``; ``verify=False`` skips the cleaned-up check, for ``update``, which re-reads the
        cached version before building on it anyway (``_unchanged``)."""
        with self._lock:
            self._fresh = False
            if self._version < 0:
                self._relist()
            while True:
                nxt = self._read_or_skip(self._version + 1)
                if isinstance(nxt, LogCorrupted):  # keep the document we have, step over the damage
                    self._version += 1
                    continue
                if nxt is not None:
                    self._version, self._doc, self._fresh = self._version + 1, nxt, True
                    self._verified_s = time.monotonic()  # just read: it exists
                    continue
                if verify and self._version >= 0 and self._cleaned_up():
                    self._relist()  # our cached version was cleaned up: find the newest again
                    continue
                return self._version, None if self._doc is None else _strip(dict(self._doc))

    def _cleaned_up(self) -> bool:
        """Was the cached version deleted by cleanup (or the state re-created)?  Checked at most once per
        ``gaps.verify_period_s`` of a caller polling an unchanged state: those two requests (a HEAD and
        a GET of the floor) would otherwise double what an idle poll costs on an object store.  An
        update never builds on a stale cached version anyway: it first re-reads it (``_unchanged``)."""
        now = time.monotonic()
        if now - self._verified_s < self._verify_period_s:
            return False
        self._verified_s = now
        return not self.io.exists(self._path(self._version)) or self._version < self._floor()

    def update(self, fn: Callable[[Document | None], Document | None]) -> tuple[int, Document | None]:
        """Commit ``fn(latest)`` as the next version; ``fn`` returning None means no change.

        ``fn`` is re-run against the winner's document after a lost race, so it must be pure.
        """
        with self._lock:
            for attempt in range(1, self.max_retries + 1):
                version, doc = self._latest(verify=False)
                raw = self._doc
                if version >= 0 and not self._fresh and not self._unchanged(version, raw):
                    self._relist()  # the cached version is another document now (a re-created topic)
                    continue
                new_doc = fn(None if doc is None else json.loads(json.dumps(doc)))
                if new_doc is None:
                    return version, doc
                stamped = {**new_doc, _ID: uuid.uuid4().hex, _PARENT: (raw or {}).get(_ID)}
                data = json.dumps(stamped, separators=(",", ":"), sort_keys=True).encode()
                if self.io.put_if_absent(self._path(version + 1), data, anchor=self.anchor):
                    if version + 1 < self._floor():
                        # we re-created a version cleanup had removed while we were paused: newer
                        # versions exist that do not build on it, so it is invisible; do it again
                        self.io.delete(self._path(version + 1))
                        self._relist()
                        continue
                    self._version, self._doc = version + 1, stamped
                    self._verified_s = time.monotonic()
                    if (version + 1) % self.keep_versions == 0:
                        self._cleanup_soon(version + 1)
                    return self._version, new_doc
                if attempt > 8:
                    time.sleep(random.uniform(0, min(0.05, 0.001 * attempt)))
            raise CommitConflict(
                f"gave up updating {self.directory!r} after {self.max_retries} conflicting attempts",
                path=self.directory,
            )

    def _unchanged(self, version: int, raw: Document | None) -> bool:
        """Is ``<version>`` still the document we cached?  One small read, paid by updates only."""
        current = self._read_or_skip(version)
        if isinstance(current, LogCorrupted):  # the damaged version we stepped over: still the same
            return True
        return current is not None and current.get(_ID) == (raw or {}).get(_ID)

    def _floor(self) -> int:
        """Versions below this may have been deleted by cleanup (written before anything is deleted)."""
        data = self.io.read_bytes(f"{self.directory}/{_FLOOR}")
        try:
            return int(data) if data else 0
        except ValueError:
            return 0

    def _cleanup_soon(self, newest: int) -> None:
        """Clean up on a daemon thread: deleting dozens of files (and fsyncing the floor) must not
        stall the commit that crossed the threshold.  One cleanup runs at a time per handle."""
        if self._cleaner is not None and self._cleaner.is_alive():
            return
        self._cleaner = threading.Thread(target=self._cleanup_quietly, args=(newest,), daemon=True,
                                         name=f"pubsub-state-cleanup-{self.directory}")
        self._cleaner.start()

    def _cleanup_quietly(self, newest: int) -> None:
        try:
            self._cleanup(newest)
        except Exception:  # best effort: the next threshold tries again
            return

    def _cleanup(self, newest: int) -> None:
        cutoff = newest - self.keep_versions
        if cutoff <= 0:
            return
        if cutoff > self._floor():
            self.io.replace(f"{self.directory}/{_FLOOR}", str(cutoff).encode(), anchor=self.anchor)
        versions = sorted(int(m.group(1)) for n in self.io.list_dir(self.directory) if (m := _VERSION_RE.match(n)))
        for version in versions:  # ascending: see the module docstring
            if version >= cutoff:
                break
            self.io.delete(self._path(version))


__all__ = ["Document", "VersionedState"]
