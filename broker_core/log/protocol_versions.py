"""The Delta protocol versions this library reads and writes, and the refusal of newer ones.

A topic's log is kept at protocol (1, 2) (``docs/PROTOCOL.md`` section 4).  A ``protocol`` action
with a higher ``minReaderVersion`` says the table holds something a reader of version 1 would
misread (columns, files or actions with a meaning it does not know), so this library refuses to read
it at all; a higher ``minWriterVersion`` says a writer must keep invariants it does not know, so the
log stays readable but every write to it (a commit, a checkpoint, the files a job deletes) is
refused before anything is written.  Delta readers and writers follow the same rule.
"""

from __future__ import annotations

from broker_core.errors import UnsupportedVersionError
from broker_core.log.snapshot import Snapshot

READER_VERSION = 1
"""The highest ``minReaderVersion`` this library reads."""
WRITER_VERSION = 2
"""The highest ``minWriterVersion`` this library writes."""


def _name(snapshot: Snapshot, table_path: str) -> str:
    return snapshot.metadata.name or table_path


def check_readable(snapshot: Snapshot, table_path: str) -> None:
    """Raise ``UnsupportedVersionError`` when the log needs a newer reader than this library."""
    found = snapshot.protocol.min_reader_version
    if found > READER_VERSION:
        raise UnsupportedVersionError(
            f"topic {_name(snapshot, table_path)} needs a reader of Delta protocol version {found} (log version "
            f"{snapshot.version}), but this library reads version {READER_VERSION} at most: upgrade spark-pubsub "
            "to read it; nothing was read",
            topic=_name(snapshot, table_path), version=snapshot.version, min_reader_version=found,
            supported=READER_VERSION,
        )


def check_writable(snapshot: Snapshot, table_path: str) -> None:
    """Raise ``UnsupportedVersionError`` when the log needs a newer writer than this library (reads
    stay allowed: ``check_readable``)."""
    check_readable(snapshot, table_path)
    found = snapshot.protocol.min_writer_version
    if found > WRITER_VERSION:
        raise UnsupportedVersionError(
            f"topic {_name(snapshot, table_path)} needs a writer of Delta protocol version {found} (log version "
            f"{snapshot.version}), but this library writes version {WRITER_VERSION} at most: it can read the "
            "topic but writes nothing to it (no append, job commit, checkpoint or deletion); upgrade "
            "spark-pubsub to write to it",
            topic=_name(snapshot, table_path), version=snapshot.version, min_writer_version=found,
            supported=WRITER_VERSION,
        )


def writable(snapshot: Snapshot) -> bool:
    return snapshot.protocol.min_reader_version <= READER_VERSION and \
        snapshot.protocol.min_writer_version <= WRITER_VERSION


__all__ = ["READER_VERSION", "WRITER_VERSION", "check_readable", "check_writable", "writable"]
