"""What deleting jobs check before they delete: crash leftovers they may remove, and a log they may
not act on (``jobs.log_maintenance``; ``docs/PROTOCOL.md`` sections 1 and 4)."""

from __future__ import annotations

import re

from broker_core.log.checkpoint import LOG_DIR
from broker_core.log.gaps import commit_versions, gap_error
from broker_core.storage import FileIO
from broker_core.subscription.cursor_store import CURSORS_DIR

_TEMP_FILE = re.compile(r"^\..+\.[0-9a-f]{32}\.tmp$")
_TEMP_DIRS = (LOG_DIR, "_producers", "_compacted", "_compacted/state")


def crash_temp_files(io: FileIO, path: str, *, older_than_ms: int) -> list[str]:
    """Temp files of ``put_if_absent``/``replace`` calls killed before their link or rename
    (``.<name>.<32 hex>.tmp``, ``docs/PROTOCOL.md`` section 1) in the topic's state directories,
    whose mtime is at or before ``older_than_ms``: no reader ever looks at them, and a live write's
    temp file is younger than any allowed minimum age."""
    dirs = [path, *(f"{path}/{d}" for d in _TEMP_DIRS)]
    dirs += [f"{path}/{CURSORS_DIR}/{sub}" for sub in io.list_dir(f"{path}/{CURSORS_DIR}") if not sub.startswith(".")]
    out = []
    for directory in dirs:
        for name in io.list_dir(directory):
            if _TEMP_FILE.match(name):
                stat = io.stat(f"{directory}/{name}")
                if stat is not None and stat.mtime_ms <= older_than_ms:
                    out.append(f"{directory}/{name}")
    return out


def require_no_gap(io: FileIO, path: str, version: int) -> list[int]:
    """The commit versions above ``version``; ``LogCorrupted`` when one is missing below the newest.

    A plan made from a log cut short by a gap takes every file the commits after the gap reference
    for an orphan, so no deleting job may act on it.  One listing, paid once per run that deletes.
    """
    above = [v for v in commit_versions(io, path) if v > version]
    for expected, found in enumerate(above, start=version + 1):
        if found != expected:
            raise gap_error(path, expected, found)
    return above


__all__ = ["crash_temp_files", "require_no_gap"]
