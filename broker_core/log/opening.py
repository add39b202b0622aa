"""Where a handle starts reading a log: the hinted checkpoint, else the newest readable one, else
version 0.

Opening reads ``_last_checkpoint`` and the checkpoint it names, so replay after it is bounded by the
checkpoint interval however long the log is (``docs/PROTOCOL.md`` section 4.7).  A missing, stale or
damaged hint costs one listing of the log directory; a damaged checkpoint is only a shortcut lost,
since the JSON commits hold the same state (Delta readers fall back too).  The caller replays the
commits after the state returned here.
"""

from __future__ import annotations

import logging
import re

from broker_core.errors import LogCorrupted, TopicNotFound
from broker_core.log.actions import decode_actions
from broker_core.log.checkpoint import LOG_DIR, checkpoint_path, read_checkpoint, read_last_checkpoint
from broker_core.log.gaps import COMMIT_RE, commit_path
from broker_core.log.snapshot import Snapshot
from broker_core.storage import FileIO

_LOG = logging.getLogger(__name__)
_CHECKPOINT_RE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")


def starting_state(io: FileIO, table_path: str, *, listed: list[str] | None = None) -> Snapshot:
    """The state to replay the log from (see the module docstring).

    ``listed``: when opening lists the log directory, the names it found are appended to this list
    (the caller's gap check can then use them instead of listing again, ``TransactionLog._load``).

    Raises:
        TopicNotFound: there is no log at ``table_path``.
        LogCorrupted: commits exist but neither version 0 nor a readable checkpoint does.
    """
    start = read_last_checkpoint(io, table_path)
    damaged: list[LogCorrupted] = []
    snapshot = _try_checkpoint(io, table_path, start, damaged) if start is not None else None
    if snapshot is None:
        snapshot = _without_hint(io, table_path, damaged, tried=start if damaged else None, listed=listed)
    return snapshot


def _try_checkpoint(io: FileIO, table_path: str, version: int, damaged: list[LogCorrupted]) -> Snapshot | None:
    """A checkpoint's state, or None when it is missing or unreadable (noted in ``damaged``)."""
    try:
        return read_checkpoint(io, table_path, version)
    except LogCorrupted as exc:
        _LOG.warning("ignoring the damaged checkpoint %s of %s and replaying the JSON commits instead (run "
                     "`pubsub topics check --repair` to rebuild it): %s",
                     checkpoint_path(table_path, version), table_path, exc)
        damaged.append(exc)
        return None


def _without_hint(io: FileIO, table_path: str, damaged: list[LogCorrupted], *, tried: int | None,
                  listed: list[str] | None) -> Snapshot:
    # Rare path (no, stale or damaged hint): list the log once to find the newest readable checkpoint.
    names = io.list_dir(f"{table_path}/{LOG_DIR}")
    if listed is not None:
        listed.extend(names)
    checkpoints = sorted((int(m.group(1)) for n in names if (m := _CHECKPOINT_RE.match(n))), reverse=True)
    for version in checkpoints:
        snap = None if version == tried else _try_checkpoint(io, table_path, version, damaged)
        if snap is not None:
            return snap
    data = io.read_bytes(commit_path(table_path, 0))
    if data is None:
        lenient = _unverified_fallback(io, table_path, damaged)
        if lenient is not None:
            return lenient
        if damaged:  # the commits before the damaged checkpoint were cleaned up: nothing to replay
            raise damaged[0]
        if any(COMMIT_RE.match(n) for n in names):
            raise LogCorrupted(f"the log of {table_path!r} has commits but neither version 0 nor a checkpoint",
                               version=0)
        raise TopicNotFound(f"no topic log at {table_path!r}", path=table_path)
    return Snapshot.from_actions(0, decode_actions(data, version=0))


def _unverified_fallback(io: FileIO, table_path: str, damaged: list[LogCorrupted]) -> Snapshot | None:
    """With nothing else left to start from, the newest checkpoint refused only for an undocumented
    hole (one written without a summary, by an earlier version): used as earlier versions did, with
    a warning; ``pubsub topics check`` and vacuum compare it with whatever commits remain."""
    for exc in damaged:
        version = exc.context.get("version")
        if exc.context.get("unverified") and isinstance(version, int):
            _LOG.warning("using the checkpoint %s of %s although it leaves offsets to no segment: nothing "
                         "else holds the state (run `pubsub topics check`)", checkpoint_path(table_path, version),
                         table_path)
            return read_checkpoint(io, table_path, version, trust_holes=True)
    return None


__all__ = ["starting_state"]
