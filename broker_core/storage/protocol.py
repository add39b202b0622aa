"""The one file-IO seam between the broker and storage: the ``FileIO`` protocol.

Everything the library persists goes through a ``FileIO``: the transaction log, segment files,
cursor and registry state.  Two sides implement it: ``LocalFileIO`` (a folder, ``local.py``) and
``ObjectStoreFileIO`` (S3 and friends through obstore, ``object_store.py``).  ``urls.py`` picks one
from a service URL and its ``storage_options``.

Paths are POSIX-style keys relative to the storage root, built from names that
``broker_core.naming`` validated; ``check_key`` is the second line: a key that would resolve
outside the root is refused by every backend.

Durability rules (see ``docs/PROTOCOL.md``):
- ``put_if_absent`` is the commit primitive: the file appears complete or not at all, and an
  existing file is never replaced (a hard link locally, a conditional put on object stores).
- ``write_new`` writes a file under a fresh unique name that nothing references yet (a segment);
  it is durable before the call returns, so a commit that references it never points at garbage.
- ``replace`` atomically overwrites a *hint* (``_last_checkpoint``); readers must tolerate a stale
  or missing hint.
- ``delete_tree`` removes a directory so that other processes see it whole or gone, and writes
  anchored inside it fail with ``DirectoryGone`` afterwards instead of re-creating part of it.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from broker_core.errors import PathOutsideRoot

TRASH_DIR = "_pubsub/trash"


@dataclass(frozen=True, slots=True)
class FileStatus:
    """What ``stat`` tells about a file (``mtime_ms``: the store's Last-Modified on object stores)."""

    path: str
    size_bytes: int
    mtime_ms: int


def check_key(path: str, root: str) -> str:
    """Return ``path`` normalised if it stays under the root; refuse anything else.

    Names are validated where they are built, so this only fires on a bug or on a tampered log
    (a segment path such as ``../../x`` inside an add action): refuse it rather than read or
    write outside the root.
    """
    if not isinstance(path, str) or path.startswith("/") or "\\" in path or "\x00" in path:
        raise PathOutsideRoot(
            f"refusing path {path!r}: storage paths are relative POSIX keys under the storage root {root!r}",
            path=path,
        )
    normal = posixpath.normpath(path)
    if normal == ".." or normal.startswith("../"):
        raise PathOutsideRoot(f"refusing path {path!r}: it resolves outside the storage root {root!r}; the path came "
                              "from damaged metadata (run `pubsub topics check`)", path=path)
    return "" if normal == "." else normal


class FileIO(Protocol):
    """Storage operations the broker needs; paths are relative to the root."""

    @property
    def root_uri(self) -> str:
        """A URI naming the storage root (``file:///abs/path``, ``s3://bucket/prefix``); never a secret."""
        ...

    @property
    def is_local(self) -> bool:
        """True for a folder the process can open with ``open()`` (``abs_path`` is a file path)."""
        ...

    def root_status(self) -> str:
        """``"directory"`` if the root exists, ``"missing"``, or ``"not a directory"`` (``root_check``)."""
        ...

    def make_root(self) -> None:
        """Create the root (only when the user asked for it)."""
        ...

    def read_bytes(self, path: str) -> bytes | None:
        """Return the file's bytes, or ``None`` if it does not exist."""
        ...

    def exists(self, path: str) -> bool: ...

    def stat(self, path: str) -> FileStatus | None: ...

    def put_if_absent(self, path: str, data: bytes, *, anchor: str | None = None) -> bool:
        """Create ``path`` with ``data`` atomically; return False if it exists already.

        With ``anchor`` (a directory above ``path``), only directories below the anchor may be
        created: a missing (deleted) anchor raises ``DirectoryGone`` (so do all three writes).
        """
        ...

    def write_new(self, path: str, data: bytes | memoryview | pa.Buffer, *, anchor: str | None = None,
                  checked_by_commit: bool = False) -> None:
        """Write a fresh file nobody references yet (durable before returning).

        ``checked_by_commit`` (with ``anchor``): the caller will either commit a file naming this
        one with an anchored ``put_if_absent``, whose check of the anchor then covers this file too
        (it was written before), or delete it.  An object store skips its own post-write check
        (one HEAD per segment); locally nothing changes.
        """
        ...

    def replace(self, path: str, data: bytes, *, anchor: str | None = None) -> None:
        """Atomically overwrite a hint file."""
        ...

    def list_dir(self, path: str) -> list[str]:
        """Names (not paths) directly inside ``path``; empty if it does not exist."""
        ...

    def delete(self, path: str) -> bool:
        """Delete a file; return False if it was already gone."""
        ...

    def delete_tree(self, path: str) -> None:
        """Remove the directory ``path`` and everything below it (idempotent; whole or gone)."""
        ...

    def open_input(self, path: str) -> pa.NativeFile:
        """Open a file for random-access reading (Parquet)."""
        ...

    def abs_path(self, path: str) -> str:
        """The path as the underlying store names it (a file path, or a URL on object stores)."""
        ...


__all__ = ["TRASH_DIR", "FileIO", "FileStatus", "check_key"]
