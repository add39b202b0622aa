"""Compare checkpoints with the JSON commits they summarise, where those commits still exist.

Opening a topic trusts a checkpoint after the cheap checks of ``checkpoint_summary`` (replaying the
commits would defeat its purpose).  ``pubsub topics check`` and vacuum, which deletes every file the
state does not name, replay the commits instead and compare: ``check`` reports a disagreement (and
``--repair`` rebuilds the checkpoint from the commits), vacuum deletes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Collection

import pyarrow.parquet as pq

from broker_core.errors import LogCorrupted
from broker_core.log.actions import decode_actions
from broker_core.log.checkpoint import LOG_DIR, checkpoint_path, read_checkpoint
from broker_core.log.checkpoint_summary import SUMMARY_KEY, disagreement
from broker_core.log.gaps import commit_path
from broker_core.log.snapshot import Snapshot
from broker_core.storage import FileIO

_CHECKPOINT_RE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")


def checkpoint_versions(io: FileIO, table_path: str) -> list[int]:
    """Every checkpoint version in the log directory, ascending."""
    return sorted(int(m.group(1)) for n in io.list_dir(f"{table_path}/{LOG_DIR}") if (m := _CHECKPOINT_RE.match(n)))


def replayed_state(io: FileIO, table_path: str, version: int, *, below: int | None = None,
                   skip: Collection[int] = ()) -> Snapshot | None:
    """The state at ``version`` replayed from the JSON commits, starting at the newest readable
    checkpoint older than ``below`` (default: ``version``) and not in ``skip`` (checkpoints known to
    be bad), else at version 0; None when no such start exists or a commit on the way is missing (the
    state cannot be confirmed)."""
    limit = version if below is None else below
    base: Snapshot | None = None
    for v in reversed([v for v in checkpoint_versions(io, table_path) if v < limit and v not in skip]):
        try:
            base = read_checkpoint(io, table_path, v)
            break
        except LogCorrupted:
            continue
    if base is None:
        first = io.read_bytes(commit_path(table_path, 0))
        if first is None:
            return None
        base = Snapshot.from_actions(0, decode_actions(first, version=0))
    if base.version > version:
        return None
    while base.version < version:
        data = io.read_bytes(commit_path(table_path, base.version + 1))
        if data is None:
            return None
        base = base.apply(base.version + 1, decode_actions(data, version=base.version + 1))
    return base


def has_summary(io: FileIO, table_path: str, version: int) -> bool:
    """Was the checkpoint written with a summary (``checkpoint_summary``)?  One footer read."""
    meta = pq.ParquetFile(io.open_input(checkpoint_path(table_path, version))).schema_arrow.metadata or {}
    return SUMMARY_KEY in meta


def verify_checkpoint(io: FileIO, table_path: str, checkpoint: Snapshot) -> str | None:
    """How a checkpoint's state disagrees with the commits replayed from an older checkpoint or
    version 0, or None when they agree or no such commits remain."""
    replayed = replayed_state(io, table_path, checkpoint.version)
    return None if replayed is None else disagreement(replayed, checkpoint)


def verify_state(io: FileIO, table_path: str, state: Snapshot) -> None:
    """Refuse (``LogCorrupted``) a state a job is about to delete files by, when the newest checkpoint
    at or below it disagrees with the JSON commits, or can be confirmed neither by them nor by a
    summary written with it.

    The replay starts at the next older checkpoint, else at version 0 (so it replays about one
    checkpoint interval of commits), and is compared with ``state``: both are the same version.
    """
    newest = [v for v in checkpoint_versions(io, table_path) if v <= state.version]
    if not newest:
        return  # opened from version 0: nothing but the commits built it
    version = newest[-1]
    replayed = replayed_state(io, table_path, state.version, below=version)
    where = checkpoint_path(table_path, version)
    if replayed is None:
        if has_summary(io, table_path, version):
            return  # its summary was checked when it was read
        raise LogCorrupted(
            f"{where} was written without a summary (by an earlier version) and the commits before it are gone, "
            "so nothing can confirm it; nothing is deleted on its word. Write a new checkpoint (`pubsub "
            "checkpoint TOPIC`) once `pubsub topics check` says ok", version=version, path=table_path,
        )
    wrong = disagreement(replayed, state)
    if wrong is not None:
        raise LogCorrupted(
            f"the state of {table_path!r} at version {state.version}, built from {where}, disagrees with the JSON "
            f"commits ({wrong}): the checkpoint lies, so nothing is deleted. Run `pubsub topics check --repair` "
            "to rebuild it from the commits", version=version, path=table_path,
        )


__all__ = ["checkpoint_versions", "has_summary", "replayed_state", "verify_checkpoint", "verify_state"]
