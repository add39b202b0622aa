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
import mmap
import os
import re
import stat as stat_module
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
from broker_core.storage import nofollow
from broker_core.storage.protocol import TRASH_DIR, FileStatus

# names separated by single slashes, none starting with a dot: ``normpath`` would leave it unchanged
_PLAIN_RELATIVE = re.compile(r"[^/.\\][^/\\]*(?:/[^/.\\][^/\\]*)*")


def contained_path(root: str, path: str) -> str:
    """``root/path`` as an absolute normalised path, refusing any ``path`` that resolves outside ``root``.

    Every ``LocalFileIO`` operation goes through this, a second line of defence behind the decoders
    that accept only the path forms the protocol allows: a ``..`` part, an absolute path or a drive
    letter that leaves the root raises ``PathOutsideRoot`` before anything is read or written.
    The check is lexical (no system call); the operations then walk the path without following
    links (``nofollow``), so a link inside the root cannot lead outside it either.
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
        # the root's path with the links above it resolved once (they are the user's choice), for
        # ``_open_file``'s check through ``/proc/self/fd``; None where there is no such directory
        self._real_root = os.path.realpath(self._root) if os.path.isdir("/proc/self/fd") else None
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

    def _split(self, path: str) -> tuple[list[str], str]:
        """``path`` (checked by ``contained_path``) as its directory's components and its name."""
        relative = os.path.relpath(contained_path(self._root, path), self._root)
        parts = [] if relative == os.curdir else relative.split(os.sep)
        if not parts:
            raise PathOutsideRoot(f"refusing {path!r}: it names the storage root {self._root!r} itself", path=path)
        return parts[:-1], parts[-1]

    def _dir(self, path: str, parts: list[str]) -> nofollow.OpenDir:
        fast = self._fast_dir(parts)
        return nofollow.OpenDir(fast) if fast is not None else nofollow.dir_fd_of(self._root, parts, path=path)

    def _fast_dir(self, parts: list[str]) -> int | None:
        if self._real_root is None or not parts:
            return None
        return nofollow.open_checked(self._root, self._real_root, "/".join(parts), nofollow.DIR_FLAGS)

    def _open_file(self, path: str) -> int:
        """A read-only descriptor of ``path``, no link followed (``FileNotFoundError`` if missing).

        The hot path (every segment and commit read) opens the whole path with ``O_NOFOLLOW`` and
        asks the kernel where the file it opened lies (``/proc/self/fd``): if that is the lexical
        path below the root's resolved path, no directory on the way was a link.  Otherwise (a link,
        a root moved since, no ``/proc``) the component walk decides; it costs an ``open`` per level.
        """
        full = contained_path(self._root, path)
        if self._real_root is not None:
            fd = nofollow.open_checked(self._root, self._real_root, full[len(self._root):].lstrip("/"),
                                       os.O_RDONLY | nofollow.NOFOLLOW)
            if fd is not None:
                return fd
        parts, name = self._split(path)
        with self._dir(path, parts) as dir_fd:
            try:
                return os.open(name, os.O_RDONLY | nofollow.NOFOLLOW, dir_fd=dir_fd)
            except OSError as exc:
                if nofollow.is_link(exc, name, dir_fd):
                    raise nofollow.refused(self._root, path) from None
                raise

    def read_bytes(self, path: str) -> bytes | None:
        try:
            fd = self._open_file(path)
        except (FileNotFoundError, NotADirectoryError):  # a plain file where a folder would be: no such file
            return None
        except OSError as exc:
            raise self._error("read", path, exc) from exc
        try:  # one ``fstat`` and one read of the size it tells (a 1 MiB read buffer costs more)
            size = os.fstat(fd).st_size
            data = os.read(fd, size + 1)
            if len(data) <= size:
                return data
            chunks = [data]  # the file grew since the ``fstat``: read on
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise self._error("read", path, exc) from exc
        finally:
            os.close(fd)

    def _lstat(self, path: str) -> os.stat_result | None:
        parts, name = self._split(path)
        try:
            with self._dir(path, parts) as dir_fd:
                return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists (a link counts: it is there, and reading it is refused)."""
        return self._lstat(path) is not None

    def stat(self, path: str) -> FileStatus | None:
        st = self._lstat(path)
        if st is None:
            return None
        if stat_module.S_ISLNK(st.st_mode):
            raise nofollow.refused(self._root, path)
        return FileStatus(path=path, size_bytes=st.st_size, mtime_ms=st.st_mtime_ns // 1_000_000)

    def put_if_absent(self, path: str, data: bytes, *, anchor: str | None = None) -> bool:
        directory, name = os.path.split(self.abs_path(path))
        tmp = f".{name}.{uuid.uuid4().hex}.tmp"
        with self._parent(path, anchor) as dir_fd:
            try:
                self._write_file(dir_fd, tmp, data)
                try:
                    os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
                except FileExistsError:
                    return False
                if self._fsync:
                    try:
                        self._fsync_dir(directory)
                    except FileNotFoundError:  # renamed away since the walk: the topic was deleted (below)
                        self._unlink_quietly(dir_fd, name)  # from the trash: it was never visible
                        raise
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
                    os.unlink(tmp, dir_fd=dir_fd)

    def write_new(self, path: str, data: bytes | memoryview | pa.Buffer, *, anchor: str | None = None,
                  checked_by_commit: bool = False) -> None:
        """``checked_by_commit`` changes nothing here: a missing anchor fails the write itself."""
        directory, name = os.path.split(self.abs_path(path))
        with self._parent(path, anchor) as dir_fd:
            try:  # O_EXCL: an existing name, a link too, is never written through
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | nofollow.NOFOLLOW, 0o644, dir_fd=dir_fd)
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
                self._unlink_quietly(dir_fd, name)
                raise self._error("write", path, exc) from exc
            os.close(fd)
            if self._fsync:  # the directory entry must survive a power loss as well as the bytes
                try:
                    self._fsync_dir(directory)
                except FileNotFoundError as exc:  # written, but into a directory renamed away since
                    self._unlink_quietly(dir_fd, name)
                    raise self._gone(path, anchor) from exc
                except OSError as exc:
                    raise self._error("write", path, exc) from exc

    def replace(self, path: str, data: bytes, *, anchor: str | None = None) -> None:
        directory, name = os.path.split(self.abs_path(path))
        tmp = f".{name}.{uuid.uuid4().hex}.tmp"
        with self._parent(path, anchor) as dir_fd:
            try:  # a rename replaces a link at ``name`` by the file; it never writes through it
                self._write_file(dir_fd, tmp, data)
                os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                if self._fsync:  # the rename itself must survive a power loss
                    self._fsync_dir(directory)
            except OSError as exc:
                with contextlib.suppress(OSError):  # EROFS on a read-only mount: must not mask ``exc``
                    os.unlink(tmp, dir_fd=dir_fd)
                if isinstance(exc, FileNotFoundError):
                    self._unlink_quietly(dir_fd, name)  # renamed away (a deletion): nothing stays behind
                    raise self._gone(path, anchor) from exc
                raise self._error("replace", path, exc) from exc

    def list_dir(self, path: str) -> list[str]:
        relative = os.path.relpath(contained_path(self._root, path), self._root)
        parts = [] if relative == os.curdir else relative.split(os.sep)
        try:
            with self._dir(path, parts) as dir_fd:
                return sorted(os.listdir(dir_fd))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def delete(self, path: str) -> bool:
        """Unlink ``path``; a link is removed itself, never what it points at, and a link among its
        directories is refused (``SymlinkRefused``)."""
        parts, name = self._split(path)
        try:
            with self._dir(path, parts) as dir_fd:
                os.unlink(name, dir_fd=dir_fd)
            return True
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise self._error("delete", path, exc) from exc

    def delete_tree(self, path: str) -> None:
        """One atomic rename into ``TRASH_DIR``, then removal from there: other processes see the
        directory whole or gone, and a killed deletion leaves only trash (the next one clears it).
        Nothing is followed: a link at ``path`` is moved to the trash and unlinked, a link at the
        trash or above either refuses the deletion (``SymlinkRefused``)."""
        parts, name = self._split(path)
        trash_parts = TRASH_DIR.split("/")
        try:
            # a linked trash (or ``_pubsub``) raises ``SymlinkRefused``: nothing is removed; no trash yet: fine
            with contextlib.suppress(FileNotFoundError), self._dir(TRASH_DIR, trash_parts) as trash:
                for leftover in os.listdir(trash):
                    nofollow.remove_entry(trash, leftover)
            if self._lstat(path) is None:
                return
            with nofollow.dir_fd_of(self._root, trash_parts, path=TRASH_DIR, create_from=0) as trash, \
                    self._dir(path, parts) as parent:
                target = uuid.uuid4().hex
                os.rename(name, target, src_dir_fd=parent, dst_dir_fd=trash)
                nofollow.remove_entry(trash, target)
        except FileNotFoundError:
            return  # another deletion got there first
        except OSError as exc:
            raise BrokerPersistenceError(f"cannot delete {path!r}: {exc.strerror or exc}", path=path) from exc

    def open_input(self, path: str) -> pa.NativeFile:
        """The file memory-mapped from a descriptor opened without following links."""
        try:
            fd = self._open_file(path)
        except FileNotFoundError as exc:
            raise BrokerPersistenceError(
                f"segment file {path!r} is missing under {self._root!r}; it was deleted outside the library",
                path=path,
            ) from exc
        try:
            if os.fstat(fd).st_size == 0:
                return pa.BufferReader(b"")
            return pa.BufferReader(pa.py_buffer(mmap.mmap(fd, 0, access=mmap.ACCESS_READ)))
        finally:
            os.close(fd)

    # -- helpers -----------------------------------------------------------------------------------

    def _parent(self, path: str, anchor: str | None) -> nofollow.OpenDir:
        """A descriptor of the directory of ``path``, created if missing: entirely without an anchor,
        else only below the anchor, one plain ``mkdir`` per level.  ``mkdir`` fails when its parent is
        gone, so a concurrent removal of the anchor is never undone here (``os.makedirs`` would
        re-create it).  With fsync on, each directory created is fsynced into its parent, so that a
        file committed into a new directory cannot lose the path to it on a power loss.  No link is
        followed on the way (``SymlinkRefused``)."""
        parts, _ = self._split(path)
        create_from = 0
        if anchor is not None:
            base = os.path.relpath(self.abs_path(anchor), self._root)
            base_parts = [] if base == os.curdir else base.split(os.sep)
            if parts != base_parts and (parts[:len(base_parts)] != base_parts or len(parts) <= len(base_parts)):
                raise ValueError(f"{path!r} is not below its anchor {anchor!r}")
            create_from = len(base_parts)
        elif not os.path.isdir(self._root):  # as ``os.makedirs`` did before writes walked from the root
            try:
                os.makedirs(self._root, exist_ok=True)
            except OSError as exc:
                raise self._error("create a directory for", path, exc) from exc
        fast = self._fast_dir(parts)  # the directory exists already, as on every write but a topic's first
        if fast is not None:
            return nofollow.OpenDir(fast)
        try:
            return nofollow.dir_fd_of(self._root, parts, path=path, create_from=create_from,
                                      fsync=self._fsync_dir if self._fsync else None)
        except FileNotFoundError as exc:
            raise self._gone(path, anchor) from exc
        except OSError as exc:
            raise self._error("create a directory for", path, exc) from exc

    def _gone(self, path: str, anchor: str | None) -> DirectoryGone:
        where = anchor if anchor is not None else os.path.dirname(path)
        return DirectoryGone(
            f"cannot write {path!r}: the directory {where!r} under {self._root!r} was removed (its topic "
            "was deleted); nothing was re-created",
            path=path,
        )

    def _write_file(self, dir_fd: int, name: str, data: bytes) -> None:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | nofollow.NOFOLLOW, 0o644, dir_fd=dir_fd)
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
    def _unlink_quietly(dir_fd: int, name: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)

    @staticmethod
    def _fsync_dir(directory: str) -> None:
        """fsync a directory by its path (a directory renamed away raises ``FileNotFoundError``)."""
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
