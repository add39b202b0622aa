"""An internal topic's compacted view: the latest message per key below a horizon, stored beside the log.

Pulsar's topic compaction keeps, for every key, only the newest message published before the
*compaction horizon*; a reader or consumer created with ``readCompacted`` reads that view for
positions below the horizon and the topic itself from the horizon on.  Here the view lives *beside*
the topic's Delta table and never in its log, so a Delta reader still sees exactly the committed
messages (DESIGN.md section 3)::

    <topic dir>/_compacted/<32 hex>.parquet    the surviving rows (``VIEW_SCHEMA``), ascending offset
    <topic dir>/_compacted/state/<v20>.json    the versioned pointer (``VersionedState``):
        {"horizon": H, "file": "_compacted/<32 hex>.parquet", "rows": n, "ledgerId": L,
         "previousHorizon": h, "createdMs": ms}

Why this shape:

- The rows keep their ``offset`` (not dense any more), ``entry_id`` and ``batch_index``, so a message
  read from the view has the very id it had in the log, and the view stays readable after retention
  has removed the segments it came from.
- A view file is written once under a fresh name (``write_new``, fsynced) and only then named by a
  new pointer version (put-if-absent).  Killing compaction at any instant therefore leaves the old
  pointer (and its file) or the new one: never a pointer to a partial file.  A file no pointer names
  (a run killed before its commit, or a view superseded by a newer one) is an orphan; vacuum may
  delete it once it is older than its grace period, and must keep every file named by a pointer
  version that still exists (a Spark batch records the file it read in its offsets).
- ``_compacted`` starts with ``_``: Delta readers and delta-rs vacuum treat it as hidden.

A loaded view is immutable (files are never rewritten), so views are cached per process by file.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from broker_core.errors import LogCorrupted
from broker_core.log.segment import SEGMENT_SCHEMA
from broker_core.log.snapshot import Snapshot
from broker_core.log.state_store import VersionedState
from broker_core.storage import FileIO
from broker_core.topic.topic_log import TopicLog

COMPACTED_DIR = "_compacted"
STATE_DIR = f"{COMPACTED_DIR}/state"

POSITION_FIELDS = (
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("entry_id", pa.int64(), nullable=False),
    pa.field("batch_index", pa.int32(), nullable=False),
)
VIEW_SCHEMA = pa.schema([*SEGMENT_SCHEMA, *POSITION_FIELDS])
"""Columns of a view file: the segment columns, then the row's offset, entry id and batch index."""

_VIEW_CACHE_ENTRIES = 8
_STORES: dict[tuple[str, str], ViewStore] = {}
_VIEWS: OrderedDict[tuple[str, str, str, int], CompactedView] = OrderedDict()
_REGISTRY_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class ViewPointer:
    """One version of a topic's compacted-view pointer."""

    version: int
    horizon: int  # offsets below it are served from ``file``
    file: str  # relative to the topic directory
    rows: int
    ledger_id: int
    previous_horizon: int = 0

    @classmethod
    def from_json(cls, version: int, doc: dict[str, Any], *, where: str = "a compacted-view pointer") -> ViewPointer:
        """Decode a pointer; ``LogCorrupted`` naming ``where`` when it is malformed or its file is not a
        view file name (the pointer is joined under the topic: ``../`` must never get through)."""
        try:
            pointer = cls(version=version, horizon=int(doc["horizon"]), file=str(doc["file"]), rows=int(doc["rows"]),
                          ledger_id=int(doc.get("ledgerId", 0)), previous_horizon=int(doc.get("previousHorizon", 0)))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise LogCorrupted(f"{where} (version {version}) is malformed ({exc!r}); compact the topic again "
                               "or delete the pointer version", version=version) from exc
        numbers = {"horizon": pointer.horizon, "rows": pointer.rows, "ledgerId": pointer.ledger_id,
                   "previousHorizon": pointer.previous_horizon}
        bad = {name: value for name, value in numbers.items() if not 0 <= value < 1 << 63}
        if bad:
            raise LogCorrupted(f"{where} (version {version}) has {bad}, outside 0..2**63-1: it was edited by hand; "
                               "compact the topic again or delete the pointer version", version=version)
        if not _VIEW_FILE_RE.fullmatch(pointer.file):
            raise LogCorrupted(f"{where} (version {version}) names {pointer.file!r}, which is not a view file "
                               f"({COMPACTED_DIR}/<32 hex>.parquet): it was edited by hand", version=version)
        return pointer


@dataclass(frozen=True, slots=True)
class ViewSlice:
    """Rows of a view (``SEGMENT_SCHEMA``) with their positions; ``end`` is where reading goes on."""

    rows: pa.Table
    offsets: np.ndarray
    entry_ids: np.ndarray
    batch_indexes: np.ndarray
    end: int


class ViewStore:
    """The versioned pointer of one internal topic's compacted view (``<topic>/_compacted/state``)."""

    def __init__(self, io: FileIO, topic_path: str) -> None:
        self.io = io
        self.topic_path = topic_path
        self._state = VersionedState(io, f"{topic_path}/{STATE_DIR}", anchor=topic_path)

    def latest(self) -> ViewPointer | None:
        """The newest committed pointer, or None before the first compaction (a few stats per call)."""
        version, doc = self._state.latest()
        where = f"the compacted-view pointer of {self.topic_path!r}"
        return None if doc is None else ViewPointer.from_json(version, doc, where=where)

    def commit(
        self, *, horizon: int, file: str, rows: int, ledger_id: int, previous_horizon: int
    ) -> ViewPointer | None:
        """Point at a new view unless one with a horizon at least as high is committed already.

        Returns the new pointer, or None when it was superseded (the caller's file is then an orphan).
        Views computed from different bases are equally valid, so the only rule is that the horizon
        never moves backwards.
        """
        doc = {"horizon": horizon, "file": file, "rows": rows, "ledgerId": ledger_id,
               "previousHorizon": previous_horizon, "createdMs": int(time.time() * 1000)}
        ViewPointer.from_json(0, doc, where="the pointer about to be committed")  # never write a bad one

        def fn(current: dict[str, Any] | None) -> dict[str, Any] | None:
            if current is None or int(current.get("ledgerId", 0)) != ledger_id:
                return doc  # the first view, or the first since the topic was created again
            return None if int(current["horizon"]) >= horizon else doc

        version, committed = self._state.update(fn)
        if committed is None or committed.get("file") != file:
            return None
        return ViewPointer.from_json(version, committed)


def view_store(io: FileIO, topic_path: str) -> ViewStore:
    """The process's shared pointer handle of a topic (so pollers share one cached version)."""
    key = (io.root_uri, topic_path)
    with _REGISTRY_LOCK:
        store = _STORES.get(key)
        if store is None:
            store = _STORES[key] = ViewStore(io, topic_path)
        return store


_VIEW_FILE_RE = re.compile(COMPACTED_DIR + r"/[0-9a-f]{32}\.parquet")


def new_view_file() -> str:
    """A fresh view file name relative to the topic directory."""
    return f"{COMPACTED_DIR}/{uuid.uuid4().hex}.parquet"


def encode_view(table: pa.Table) -> pa.Buffer:
    """Parquet bytes of a ``VIEW_SCHEMA`` table (LZ4: views are read whole and often, decode is cheap)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="lz4", row_group_size=1 << 20,
                   use_dictionary=["key", "producer_name", "properties", "chunk_uuid"],
                   write_statistics=["offset"], store_schema=False)
    return sink.getvalue()


def decode_view(source: pa.NativeFile) -> pa.Table:
    """A view file back with exactly ``VIEW_SCHEMA`` types."""
    table = pq.read_table(source, use_threads=True)
    return table if table.schema == VIEW_SCHEMA else table.cast(VIEW_SCHEMA)


class CompactedView:
    """A loaded view file: its rows in offset order and their positions (immutable)."""

    def __init__(self, horizon: int, file: str, table: pa.Table) -> None:
        self.horizon = horizon
        self.file = file
        self.rows = table.select(SEGMENT_SCHEMA.names)
        self.offsets = table.column("offset").to_numpy()
        self.entry_ids = table.column("entry_id").to_numpy()
        self.batch_indexes = table.column("batch_index").to_numpy()

    def __len__(self) -> int:
        return len(self.offsets)

    def _slice(self, lo: int, hi: int, end: int) -> ViewSlice:
        return ViewSlice(rows=self.rows.slice(lo, hi - lo), offsets=self.offsets[lo:hi],
                         entry_ids=self.entry_ids[lo:hi], batch_indexes=self.batch_indexes[lo:hi], end=end)

    def read(self, position: int, max_rows: int) -> ViewSlice:
        """Up to ``max_rows`` rows from ``position`` on; ``end`` is the horizon once they run out."""
        lo = int(np.searchsorted(self.offsets, position, side="left"))
        hi = min(lo + max_rows, len(self.offsets))
        end = int(self.offsets[hi - 1]) + 1 if hi < len(self.offsets) and hi > lo else self.horizon
        return self._slice(lo, hi, end)

    def between(self, start: int, end: int) -> ViewSlice:
        """Every row with an offset in ``[start, end)`` (``end`` clipped to the horizon)."""
        end = min(end, self.horizon)
        lo, hi = np.searchsorted(self.offsets, [start, end], side="left")
        return self._slice(int(lo), int(hi), end)

    def has_rows_from(self, position: int) -> bool:
        return bool(len(self.offsets)) and int(self.offsets[-1]) >= position

    def contains(self, offsets: np.ndarray) -> np.ndarray:
        """Per offset, whether the view holds it."""
        idx = np.searchsorted(self.offsets, offsets)
        ok = idx < len(self.offsets)
        out = np.zeros(len(offsets), dtype=bool)
        out[ok] = self.offsets[idx[ok]] == offsets[ok]
        return out

    def select(self, offsets: np.ndarray) -> ViewSlice:
        """The rows at ``offsets`` (ascending, all contained in the view)."""
        idx = np.searchsorted(self.offsets, offsets)
        take = pa.array(idx)
        end = int(offsets[-1]) + 1 if len(offsets) else 0
        return ViewSlice(rows=self.rows.take(take), offsets=self.offsets[idx], entry_ids=self.entry_ids[idx],
                         batch_indexes=self.batch_indexes[idx], end=end)


def load_view(io: FileIO, topic_path: str, *, file: str, horizon: int) -> CompactedView:
    """The view file ``file`` (relative to the topic) with its horizon; cached per process, since a
    view file never changes and always goes with the one horizon its pointer gave it.

    Raises:
        LogCorrupted: ``file`` is not a view file name (it comes from storage or from a Spark offset,
            so it is checked before it becomes a path).
    """
    if not _VIEW_FILE_RE.fullmatch(file):
        raise LogCorrupted(f"the compacted view of {topic_path!r} is said to be {file!r}, which is not a "
                           f"view file ({COMPACTED_DIR}/<32 hex>.parquet)", path=topic_path)
    key = (io.root_uri, topic_path, file, horizon)
    with _REGISTRY_LOCK:
        cached = _VIEWS.get(key)
        if cached is not None:
            _VIEWS.move_to_end(key)
            return cached
    view = CompactedView(horizon, file, decode_view(io.open_input(f"{topic_path}/{file}")))
    with _REGISTRY_LOCK:
        _VIEWS[key] = view
        while len(_VIEWS) > _VIEW_CACHE_ENTRIES:
            _VIEWS.popitem(last=False)
    return view


def unreferenced_view_files(io: FileIO, topic_path: str) -> list[str]:
    """View files (relative to the topic) that no remaining pointer version names: superseded views
    whose pointers cleanup removed, and files of runs killed before their commit.

    This is what a vacuum may delete, once a file is older than its grace period: a reader or a
    Spark batch may still be reading a view its pointer named a moment ago, and a view committed
    while this lists may show up here too.  The grace period is what protects young files.
    """
    named = set()
    state = f"{topic_path}/{STATE_DIR}"
    for name in io.list_dir(state):
        if name.endswith(".json") and not name.startswith("."):
            data = io.read_bytes(f"{state}/{name}")
            with contextlib.suppress(ValueError, TypeError, KeyError, RecursionError):
                named.add(str(json.loads(data or b"")["file"]))
    files = (f"{COMPACTED_DIR}/{n}" for n in io.list_dir(f"{topic_path}/{COMPACTED_DIR}"))
    return sorted(f for f in files if _VIEW_FILE_RE.fullmatch(f) and f not in named)


class CompactedTopic:
    """What a ``readCompacted`` reader of one internal topic needs: the newest view, and reads from it.

    Below the newest view's horizon a reader takes the view's rows; from the horizon on, the log.
    The pointer is polled on every call (one stat when nothing changed), so a reader that is still
    behind a new horizon moves onto the new view, as a Pulsar reader does after compaction.
    """

    def __init__(self, log: TopicLog) -> None:
        self.log = log
        self._store = view_store(log.io, log.path)

    def view(self, snapshot: Snapshot | None = None) -> CompactedView | None:
        """The newest view of this topic, or None (never compacted, or compacted before a re-creation)."""
        pointer = self._store.latest()
        if pointer is None:
            return None
        snap = snapshot or self.log.log.cached_snapshot()
        if pointer.ledger_id != snap.ledger_id:
            return None
        return load_view(self.log.io, self.log.path, file=pointer.file, horizon=pointer.horizon)

    def earliest(self, snapshot: Snapshot) -> int:
        """Where a ``readCompacted`` read from the earliest message starts: the view's first row when
        there is a view (it keeps the latest value of keys whose segments retention, TTL or vacuum
        removed since), else the log's first offset.  The client's readers and consumers and the Spark
        source all start here, so they read one compacted view the same way."""
        view = self.view(snapshot)
        if view is None:
            return snapshot.first_offset
        first = int(view.offsets[0]) if len(view) else view.horizon
        return min(first, snapshot.first_offset)

    def read(self, position: int, max_rows: int, snapshot: Snapshot | None = None) -> ViewSlice | None:
        """Rows of the view from ``position``, or None when ``position`` is at or past the horizon."""
        view = self.view(snapshot)
        if view is None or position >= view.horizon:
            return None
        return view.read(position, max_rows)

    def available(self, position: int, snapshot: Snapshot) -> bool:
        """Whether a reader at ``position`` has anything to read now (view rows or log messages)."""
        view = self.view(snapshot)
        if view is not None and position < view.horizon:
            if view.has_rows_from(position):
                return True
            position = view.horizon
        return max(position, snapshot.first_offset) < snapshot.next_offset


__all__ = [
    "COMPACTED_DIR",
    "POSITION_FIELDS",
    "STATE_DIR",
    "VIEW_SCHEMA",
    "CompactedTopic",
    "CompactedView",
    "ViewPointer",
    "ViewSlice",
    "ViewStore",
    "decode_view",
    "encode_view",
    "load_view",
    "new_view_file",
    "unreferenced_view_files",
    "view_store",
]
