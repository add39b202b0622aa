"""Opening files and directories below a local root without following symbolic links.

Whoever can write into a root folder could plant a link there (``_pubsub/trash`` pointing at a home
directory, a segment pointing at a private key); following it would make the library read, write or
delete outside the root with the rights of the process.  So every ``LocalFileIO`` operation walks
from the root one component at a time with ``O_NOFOLLOW`` and acts relative to the directory it
opened last (``dir_fd``): a link anywhere below the root raises ``SymlinkRefused``, and a link
swapped in during the walk is caught by the kernel, not by a check made earlier.  The root folder
itself is opened normally: the path the user gave may lead through links (``/tmp`` on some systems,
a mount point), and it is the user's choice (``docs/PROTOCOL.md``, "Symbolic links").
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable

from broker_core.errors import SymlinkRefused

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# POSIX flags (absent on Windows, which also lacks ``dir_fd``: this walk is POSIX-only, D120)
DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | _CLOEXEC
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | _CLOEXEC
"""Add to the flags of every file ``os.open`` below the root."""


def open_checked(root: str, real_root: str, relative: str, flags: int) -> int | None:
    """``root/relative`` opened by its whole path with ``flags`` (``O_NOFOLLOW`` among them), if the
    kernel says the file it opened lies at ``real_root/relative`` (``/proc/self/fd``): then no
    directory on the way was a link.  None otherwise (missing, a link, a root moved since): the
    caller walks name by name, which tells which.  One ``open`` and one ``readlink``, against an
    ``open`` per level for the walk."""
    try:
        fd = os.open(f"{root.rstrip('/')}/{relative}", flags)
    except OSError:
        return None
    with contextlib.suppress(OSError):  # no /proc: the caller walks instead
        if os.readlink(f"/proc/self/fd/{fd}") == f"{real_root.rstrip('/')}/{relative}":
            return fd
    os.close(fd)
    return None


def refused(root: str, path: str) -> SymlinkRefused:
    return SymlinkRefused(
        f"refusing {path!r} under the storage root {root!r}: it is, or lies below, a symbolic link, and "
        "links are not followed inside a local root; replace the link by the file or directory itself",
        path=path,
    )


def is_link(exc: OSError, name: str, dir_fd: int) -> bool:
    """Whether ``exc`` (from opening ``name`` in ``dir_fd`` with ``O_NOFOLLOW``) means a link: ``ELOOP``,
    or ``ENOTDIR`` from ``O_DIRECTORY`` on a link to a file (told apart from a file by ``lstat``)."""
    if exc.errno == errno.ELOOP:
        return True
    if exc.errno != errno.ENOTDIR:
        return False
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def open_dir(root: str, parts: list[str], *, path: str, create_from: int | None = None,
             fsync: Callable[[str], None] | None = None) -> int:
    """A descriptor of the directory ``root/parts...``, opened one component at a time.

    Components at index ``create_from`` and later are created when missing (one ``mkdir`` each; with
    ``fsync``, it is called with the parent's path so the new entry survives a power loss); earlier ones must exist
    (``FileNotFoundError``).  A link among them raises ``SymlinkRefused`` naming ``path``.
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    try:
        for index, part in enumerate(parts):
            try:
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if create_from is None or index < create_from:
                    raise
                with contextlib.suppress(FileExistsError):  # a concurrent writer made it: fine
                    os.mkdir(part, dir_fd=fd)
                    if fsync is not None:
                        fsync(os.path.join(root, *parts[:index]))
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if is_link(exc, part, fd):
                    raise refused(root, path) from None
                raise
            os.close(fd)
            fd = child
    except OSError as exc:
        os.close(fd)
        if exc.errno == errno.ELOOP:  # the second open above, after a link replaced the new directory
            raise refused(root, path) from None
        raise
    except BaseException:
        os.close(fd)
        raise
    return fd


class OpenDir:
    """A directory descriptor, closed on leaving a ``with`` block (opened eagerly, so that opening
    fails where the call is made, not at ``with``)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> int:
        return self.fd

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def dir_fd_of(root: str, parts: list[str], *, path: str, create_from: int | None = None,
              fsync: Callable[[str], None] | None = None) -> OpenDir:
    """``open_dir`` for a ``with`` block that closes the descriptor."""
    return OpenDir(open_dir(root, parts, path=path, create_from=create_from, fsync=fsync))


def remove_entry(dir_fd: int, name: str) -> None:
    """Remove ``name`` in ``dir_fd`` and all below it without following any link: a link (or a file)
    is unlinked, a directory is removed by ``shutil.rmtree``'s descriptor-based walk, which never
    leaves it (``shutil.rmtree.avoids_symlink_attacks``).  Best effort, as trash clearing is."""
    import shutil

    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode) and shutil.rmtree.avoids_symlink_attacks:
        shutil.rmtree(name, ignore_errors=True, dir_fd=dir_fd)
    elif not stat.S_ISDIR(mode):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)


__all__ = ["DIR_FLAGS", "NOFOLLOW", "OpenDir", "dir_fd_of", "is_link", "open_checked", "open_dir", "refused",
           "remove_entry"]
