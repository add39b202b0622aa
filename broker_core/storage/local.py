"""``LocalFileIO``: the ``FileIO`` seam over a local (or mounted shared) folder.

Durability rules (the protocol's, in ``protocol.py``, and their local meaning):
- ``put_if_absent``: temp file, fsync, hard link to the final name (which fails if the name
  exists), unlink the temp file.  ``os.rename`` would silently overwrite.
- ``write_new`` writes a file under a fresh unique name that nothing references yet (a segment);
  it is fsynced before the call returns, so a commit that references it never points at garbage.
- ``replace`` atomically overwrites a *hint* (``_last_checkpoint``); readers must tolerate a stale
  or missing hint.

Writes create missing parent directories, except above an ``anchor``: a write inside a topic passes
the topic's directory as its anchor, and the anchor itself is never created.  A producer still
writing while its topic is deleted then fails with ``DirectoryGone`` instead of re-creating half of
the deleted topic (``delete_tree`` removes the directory with one rename).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import uuid

import pyarrow as pa
from pyarrow import fs as pafs

from broker_core.errors import (
    AuthorizationError,
    BrokerPersistenceError,
    CommitNotDurable,
    ConnectError,
    DirectoryGone,
    PathOutsideRoot,
    ReadError,
)
from broker_core.storage.protocol import TRASH_DIR, FileStatus

# names separated by single slashes, none starting with a dot: ``normpath`` would leave it unchanged
_PLAIN_RELATIVE = re.compile(r"[^/.\\][^/\\]*(?:/[^/.\\][^/\\]*)*")


def contained_path(root: str, path: str) -> str:
    """``root/path`` as an absolute normalised path, refusing any ``path`` that resolves outside ``root``.

    Every ``LocalFileIO`` operation goes through this, a second line of defence behind the decoders
    that accept only the path forms the protocol allows: a ``..`` part, an absolute path or a drive
    letter that leaves the root raises ``PathOutsideRoot`` before anything is read or written.
    The check is lexical (no system call); ``delete`` additionally resolves symbolic links.
    (Object-store keys get the same check from ``protocol.check_key``.)
    """
    if _PLAIN_RELATIVE.fullmatch(path) and os.sep == "/":  # a segment's or a commit's path, as usual:
        return f"{root.rstrip('/')}/{path}"  # already normal (``normpath`` cost ~2 us a segment read)
    full = os.path.normpath(os.path.join(root, path))
    if full != root and not full.startswith(root.rstrip(os.sep) + os.sep):
        raise PathOutsideRoot(
            f"refusing to touch {path!r}: it resolves to {full!r}, outside the storage root {root!r}; "
            "the path came from damaged metadata (run `pubsub topics check`)",
            path=path,
        )
    return full


class LocalFileIO:
    """``FileIO`` over a local (or mounted shared) folder.

    Args:
        root: absolute or relative folder (``root_check.open_root`` checks it exists or creates it).
        fsync: fsync files and directories on writes (turn off only for throwaway data).
    """

    def __init__(self, root: str, *, fsync: bool = True) -> None:
        self._root = os.path.abspath(root)
        self._fsync = fsync
        self._fs = pafs.LocalFileSystem()
        # the root is neither created nor required here: ``root_check.open_root`` decides (a missing
        # root is an error unless the caller asked to create it)
        if os.path.isdir(self._root) and not os.access(self._root, os.R_OK | os.X_OK):
            raise AuthorizationError(
                f"the storage root {self._root!r} is not readable; fix its permissions or pick another root",
                root=self._root,
            )

    @property
    def writable(self) -> bool:
        """False for a read-only root (a read-only mount, a snapshot): it opens for reading (peek,
        stats, readers) and a write then fails with BrokerPersistenceError naming the file
        (docs/DECISIONS.md).  Asked each time, since ``make_root`` may create the root later."""
        return os.access(self._root, os.W_OK | os.X_OK)

    def root_status(self) -> str:
        """``"directory"``, ``"missing"`` or ``"not a directory"`` (what ``open_root`` checks)."""
        if os.path.isdir(self._root):
            return "directory"
        return "not a directory" if os.path.exists(self._root) else "missing"

    def make_root(self) -> None:
        """Create the root folder (and its parents); only on the caller's explicit request."""
        try:
            os.makedirs(self._root, exist_ok=True)
        except OSError as exc:
            error = AuthorizationError if isinstance(exc, PermissionError) else ConnectError
            raise error(
                f"cannot create the storage root {self._root!r}: {exc.strerror}; check the path and its permissions",
                root=self._root,
            ) from exc

    @property
    def root(self) -> str:
        return self._root

    @property
    def root_uri(self) -> str:
        return "file://" + self._root

    @property
    def is_local(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"LocalFileIO({self.root_uri!r})"

    def abs_path(self, path: str) -> str:
        return contained_path(self._root, path)

    def read_bytes(self, path: str) -> bytes | None:
        try:
            with open(self.abs_path(path), "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._error("read", path, exc) from exc

    def exists(self, path: str) -> bool:
        return os.path.exists(self.abs_path(path))

    def stat(self, path: str) -> FileStatus | None:
        try:
            st = os.stat(self.abs_path(path))
        except FileNotFoundError:
            return None
        return FileStatus(path=path, size_bytes=st.st_size, mtime_ms=st.st_mtime_ns // 1_000_000)

    def put_if_absent(self, path: str, data: bytes, *, anchor: str | None = None) -> bool:
        final = self.abs_path(path)
        directory = self._parent(path, final, anchor)
        tmp = os.path.join(directory, f".{os.path.basename(final)}.{uuid.uuid4().hex}.tmp")
        try:
            self._write_file(tmp, data)
            try:
                os.link(tmp, final)
            except FileExistsError:
                return False
            if self._fsync:
                try:
                    self._fsync_dir(directory)
                except FileNotFoundError:
                    raise  # renamed away since the link: the topic was deleted (below), as before D100
                except OSError as exc:  # linked, so readers may see it: its segments must stay
                    raise CommitNotDurable(
                        f"{path!r} under {self._root} is visible but its directory fsync failed ({exc}); "
                        "the commit's outcome is unknown: check the storage, then resend (duplicates "
                        "are dropped by sequence id)",
                        path=path,
                    ) from exc
            return True
        except FileNotFoundError as exc:  # the directory was removed (renamed away) meanwhile
            raise self._gone(path, anchor) from exc
        except OSError as exc:
            raise self._error("commit", path, exc) from exc
        finally:
            # never masks the typed error above: on a read-only mount ``unlink`` of a temp file that
            # was never created fails with EROFS, not ENOENT; a temp file left behind is a leftover
            # (``jobs.leftovers``), never read
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def write_new(self, path: str, data: bytes | memoryview | pa.Buffer, *, anchor: str | None = None,
                  checked_by_commit: bool = False) -> None:
        """``checked_by_commit`` changes nothing here: a missing anchor fails the write itself."""
        final = self.abs_path(path)
        directory = self._parent(path, final, anchor)
        try:
            fd = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError as exc:
            raise BrokerPersistenceError(
                f"refusing to overwrite existing file {path!r}; segment names must be unique", path=path
            ) from exc
        except FileNotFoundError as exc:
            raise self._gone(path, anchor) from exc
        except OSError as exc:  # a read-only root, a full disk, permissions
            raise self._error("write", path, exc) from exc
        try:
            self._write_all(fd, data)
        except OSError as exc:  # a full disk mid-way: the part written would stay, unnamed, until a
            os.close(fd)  # leftovers job, taking the space a retry needs; nothing references it yet
            with contextlib.suppress(OSError):
                os.unlink(final)
            raise self._error("write", path, exc) from exc
        os.close(fd)
        if self._fsync:  # the directory entry must survive a power loss as well as the bytes
            try:
                self._fsync_dir(directory)
            except FileNotFoundError as exc:  # written, but into a directory renamed away since
                raise self._gone(path, anchor) from exc
            except OSError as exc:
                raise self._error("write", path, exc) from exc

    def replace(self, path: str, data: bytes, *, anchor: str | None = None) -> None:
        final = self.abs_path(path)
        directory = self._parent(path, final, anchor)
        tmp = os.path.join(directory, f".{os.path.basename(final)}.{uuid.uuid4().hex}.tmp")
        try:
            self._write_file(tmp, data)
            os.replace(tmp, final)
            if self._fsync:  # the rename itself must survive a power loss
                self._fsync_dir(directory)
        except OSError as exc:
            with contextlib.suppress(OSError):  # EROFS on a read-only mount: must not mask ``exc``
                os.unlink(tmp)
            if isinstance(exc, FileNotFoundError):
                raise self._gone(path, anchor) from exc
            raise self._error("replace", path, exc) from exc

    def list_dir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(self.abs_path(path)))
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            return []

    def delete(self, path: str) -> bool:
        full = self.abs_path(path)
        # a symbolic link inside the root may point outside it: deletion resolves it before unlinking
        real_parent = os.path.realpath(os.path.dirname(full))
        real_root = os.path.realpath(self._root)
        if real_parent != real_root and not real_parent.startswith(real_root.rstrip(os.sep) + os.sep):
            raise PathOutsideRoot(
                f"refusing to delete {path!r}: its directory resolves to {real_parent!r}, outside the "
                f"storage root {real_root!r}", path=path,
            )
        try:
            os.unlink(full)
            return True
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise self._error("delete", path, exc) from exc

    def delete_tree(self, path: str) -> None:
        """One atomic rename into ``TRASH_DIR``, then removal from there: other processes see the
        directory whole or gone, and a killed deletion leaves only trash (the next one clears it)."""
        trash = self.abs_path(TRASH_DIR)
        try:
            for leftover in os.listdir(trash) if os.path.isdir(trash) else []:
                shutil.rmtree(os.path.join(trash, leftover), ignore_errors=True)
            if not os.path.lexists(self.abs_path(path)):
                return
            os.makedirs(trash, exist_ok=True)
            target = os.path.join(trash, uuid.uuid4().hex)
            os.rename(self.abs_path(path), target)
        except FileNotFoundError:
            return  # another deletion got there first
        except OSError as exc:
            raise BrokerPersistenceError(f"cannot delete {path!r}: {exc.strerror or exc}", path=path) from exc
        shutil.rmtree(target, ignore_errors=True)

    def open_input(self, path: str) -> pa.NativeFile:
        try:
            return pa.memory_map(self.abs_path(path), "r")
        except FileNotFoundError as exc:
            raise BrokerPersistenceError(
                f"segment file {path!r} is missing under {self._root!r}; it was deleted outside the library",
                path=path,
            ) from exc

    # -- helpers -----------------------------------------------------------------------------------

    def _parent(self, path: str, final: str, anchor: str | None) -> str:
        """The directory of ``final``, created if missing: entirely without an anchor, else only below
        the anchor, one plain ``mkdir`` per level.  ``mkdir`` fails when its parent is gone, so a
        concurrent removal of the anchor is never undone here (``os.makedirs`` would re-create it).
        With fsync on, each directory created is fsynced into its parent, so that a file committed
        into a new directory cannot lose the path to it on a power loss."""
        directory = os.path.dirname(final)
        if os.path.isdir(directory):
            return directory
        created: list[str] = []
        if anchor is None:
            current = directory
            while not os.path.isdir(current):
                created.append(current)
                parent = os.path.dirname(current)
                if parent == current:
                    break
                current = parent
            created.reverse()
            try:
                os.makedirs(directory, exist_ok=True)
            except OSError as exc:
                raise self._error("create a directory for", path, exc) from exc
        else:
            base = self.abs_path(anchor)
            relative = os.path.relpath(directory, base)
            if relative == os.curdir:
                raise self._gone(path, anchor)
            if relative.split(os.sep)[0] == os.pardir:
                raise ValueError(f"{path!r} is not below its anchor {anchor!r}")
            current = base
            for part in relative.split(os.sep):
                current = os.path.join(current, part)
                try:
                    os.mkdir(current)
                except FileExistsError:
                    continue
                except FileNotFoundError as exc:
                    raise self._gone(path, anchor) from exc
                except OSError as exc:
                    raise self._error("create a directory for", path, exc) from exc
                created.append(current)
        if self._fsync:
            for new_dir in created:
                try:
                    self._fsync_dir(os.path.dirname(new_dir))
                except FileNotFoundError as exc:  # removed meanwhile: its topic was deleted
                    raise self._gone(path, anchor) from exc
        return directory

    def _gone(self, path: str, anchor: str | None) -> DirectoryGone:
        where = anchor if anchor is not None else os.path.dirname(path)
        return DirectoryGone(
            f"cannot write {path!r}: the directory {where!r} under {self._root!r} was removed (its topic "
            "was deleted); nothing was re-created",
            path=path,
        )

    def _write_file(self, target: str, data: bytes) -> None:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            self._write_all(fd, data)
        finally:
            os.close(fd)

    def _write_all(self, fd: int, data: bytes | memoryview | pa.Buffer) -> None:
        view = memoryview(data).cast("B")
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if self._fsync:
            os.fsync(fd)

    @staticmethod
    def _fsync_dir(directory: str) -> None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        except OSError as exc:  # some filesystems refuse fsync on directories
            if exc.errno not in (errno.EINVAL, errno.EBADF):
                raise
        finally:
            os.close(fd)

    def _error(self, what: str, path: str, exc: OSError) -> BrokerPersistenceError:
        """The error of a failed storage call: ``AuthorizationError`` when permissions or a read-only
        mount refused it, ``ReadError`` for other failed reads, else ``BrokerPersistenceError``."""
        if exc.errno == errno.EROFS:
            return AuthorizationError(
                f"storage {what} failed for {path!r}: the storage root {self._root!r} is read-only "
                f"({exc.strerror or exc}); open it for reading only, or remount it read-write",
                path=path, root=self._root,
            )
        if isinstance(exc, PermissionError):
            return AuthorizationError(
                f"storage {what} failed for {path!r} under {self._root!r}: permission denied "
                f"({exc.strerror or exc}); the root is read-only for this user: fix its permissions",
                path=path, root=self._root,
            )
        error = ReadError if what == "read" else BrokerPersistenceError
        return error(
            f"storage {what} failed for {path!r} under {self._root!r}: {exc.strerror or exc}",
            path=path,
        )


__all__ = ["LocalFileIO", "contained_path"]
