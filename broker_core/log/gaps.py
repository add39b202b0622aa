"""Gaps in a log: a missing commit below the newest one is corruption, never the log's end.

Versions are contiguous from 0 (``docs/PROTOCOL.md`` section 4), so when ``<v+1>.json`` is missing
while a later commit exists, a commit was deleted or lost.  Reading on as if ``v`` were the tip would
hide every later message, and a writer would commit into the hole (its version would then mean two
different things to two readers).  So readers raise ``LogCorrupted`` naming the missing version,
writers refuse to fill it, and jobs that delete files refuse to act on a plan made below it.

Two races must not look like a gap: a writer creating ``v+1`` and ``v+2`` between two probes (so
``v+1`` is probed again *after* the later commit was seen: it was created before that commit), and
log cleanup deleting old versions oldest-first (so ``v`` is checked to still exist: if cleanup took
``v+1``, it took ``v`` before it; the caller then reloads from the newer checkpoint).
"""

from __future__ import annotations

import re

from broker_core.errors import LogCorrupted
from broker_core.log.checkpoint import LOG_DIR, checkpoint_path
from broker_core.storage import FileIO

COMMIT_RE = re.compile(r"^(\d{20})\.json$")

LOCAL_VERIFY_PERIOD_S = 1.0
REMOTE_VERIFY_PERIOD_S = 10.0


def verify_period_s(io: FileIO) -> float:
    """How often an idle poller re-checks its cached tip: that the version it is at still exists (log
    cleanup may have deleted it; the poller then reloads) and that no gap hides newer commits.

    Polling itself is one read of the next version; these checks are extra requests that find
    something only after a cleanup (which deletes versions days old) or damage.  A ``stat`` of a
    folder costs microseconds, so local roots check every second; on an object store each is a
    billed HEAD, so an idle consumer checks every ``REMOTE_VERIFY_PERIOD_S`` and its idle poll stays
    one GET (``docs/DECISIONS.md``, the cost model in ``docs/PROTOCOL.md``).
    """
    return LOCAL_VERIFY_PERIOD_S if io.is_local else REMOTE_VERIFY_PERIOD_S


def commit_path(table_path: str, version: int) -> str:
    return f"{table_path}/{LOG_DIR}/{version:020d}.json"


def commit_versions(io: FileIO, table_path: str) -> list[int]:
    """Every commit version present in the log directory, ascending (one listing)."""
    names = io.list_dir(f"{table_path}/{LOG_DIR}")
    return sorted(int(m.group(1)) for n in names if (m := COMMIT_RE.match(n)))


def first_commit_above(names: list[str], version: int) -> int | None:
    """The lowest commit version above ``version`` among a log directory's ``names``, or None."""
    # fixed-width names compare like their versions: no regex or int() per name (long logs)
    target = f"{version:020d}.json"
    later = min((n for n in names if len(n) == 25 and n > target and n.endswith(".json") and n[:20].isdigit()),
                default=None)
    return None if later is None else int(later[:20])


def later_commit(io: FileIO, table_path: str, version: int, *, listed: bool) -> int | None:
    """The lowest commit above ``version + 1``, or None.  ``listed``: list the directory (finds a
    gap of any width, for openers); otherwise one ``stat`` of ``version + 2`` (for polling)."""
    if listed:
        return first_commit_above(io.list_dir(f"{table_path}/{LOG_DIR}"), version + 1)
    return version + 2 if io.exists(commit_path(table_path, version + 2)) else None


def gap_error(table_path: str, missing: int, later: int) -> LogCorrupted:
    return LogCorrupted(
        f"the log of {table_path!r} is missing version {missing} although version {later} exists: a commit "
        f"was deleted or lost, so nothing after version {missing - 1} can be trusted and nothing is written "
        "into the gap. Restore the file from a backup, or run `pubsub topics check` to see the damage",
        version=missing, path=table_path,
    )


def check_no_gap(io: FileIO, table_path: str, version: int, *, listed: bool) -> None:
    """Raise ``LogCorrupted`` when the commit after ``version`` is missing though a later one exists.

    Returns quietly when there is no later commit, when the next commit appeared meanwhile (the next
    poll replays it), or when ``version`` itself is gone (log cleanup: the caller reloads).
    """
    later = later_commit(io, table_path, version, listed=listed)
    if later is None or io.exists(commit_path(table_path, version + 1)):
        return
    if not (io.exists(commit_path(table_path, version)) or io.exists(checkpoint_path(table_path, version))):
        return
    raise gap_error(table_path, version + 1, later)


__all__ = [
    "COMMIT_RE", "LOCAL_VERIFY_PERIOD_S", "REMOTE_VERIFY_PERIOD_S", "check_no_gap", "commit_path", "commit_versions",
    "first_commit_above", "gap_error", "later_commit", "verify_period_s",
]
