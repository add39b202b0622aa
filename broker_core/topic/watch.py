"""How a waiting consumer or reader learns of another process's commit: notification or polling.

Within one process a commit wakes waiters at once (``waiters.Waiters``).  Across processes there are
two ways, behind one seam, the ``ChangeNotifier`` protocol:

- ``InotifyNotifier`` (Linux, local roots): the kernel reports each file created in a watched
  directory (a topic's ``_delta_log``, a subscription's cursor directory), and the notifier calls the
  watcher's callback, which wakes its waiters.  Cross-process latency is then the time to notice a
  file, not a poll interval.  Plain ``ctypes`` over libc: no dependency, nothing to build.
- ``PollingNotifier`` (everything else: object stores, other platforms, or notifications turned
  off): it never calls back; waiters find commits by polling.

Notifications are a latency optimisation, never a correctness requirement: waiters keep polling
either way, on a ``PollSchedule`` that backs off while nothing changes, from the client's poll
interval up to ``newEntriesCheckMaxDelayMillis``.  An idle subscription on an object store so costs
a few requests a second at most, and a first message after a long idle arrives within the cap
(``docs/DECISIONS.md``, ``docs/CLIENT.md``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import re
import select
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Protocol

from broker_core.storage.fork import on_fork_in_child

_LOG = logging.getLogger(__name__)

Unwatch = Callable[[], None]
"""Returned by ``ChangeNotifier.watch``: stops that watch (idempotent)."""

# version files of logs and versioned state: temp files and checkpoints are not commits
_VERSION_NAME = re.compile(rb"^\d{20}\.json$")


class ChangeNotifier(Protocol):
    """Calls back when a new version file appears in a watched directory of a storage root."""

    @property
    def pushes(self) -> bool:
        """True when watches really call back (so waiting on them saves latency), False for polling."""
        ...

    def watch(self, directory: str, callback: Callable[[int], None]) -> Unwatch:
        """Call ``callback(version)`` (on a notifier thread) after each new version file in ``directory``
        (after an overflow of the kernel's queue, once with -1: something may have been missed).

        Best effort: a directory that cannot be watched (missing, limits reached) is simply not
        watched, and its waiters find new versions by polling.
        """
        ...

    def close(self) -> None:
        """Stop every watch (process exit, tests)."""
        ...


class PollingNotifier:
    """The fallback: no callbacks; waiters poll (object stores, non-Linux, notifications off)."""

    pushes = False

    def watch(self, directory: str, callback: Callable[[int], None]) -> Unwatch:
        return _noop

    def close(self) -> None:
        return None


def _noop() -> None:
    return None


class PollSchedule:
    """When a waiter polls storage next: the base interval while things change, doubling while idle
    up to ``max_s``.

    ``idle()`` after a round that found nothing new, ``active()`` after one that found something;
    ``interval_s`` is how long to wait for a wake-up before polling again.  The backoff starts only
    ``grace_s`` (half the cap by default) after the last activity: messages that flow in commits a
    few hundred milliseconds apart (an object store's commit time) would otherwise find the poller
    backed off between every two of them, adding up to the interval it had reached to each.  On an
    object store that grace costs a few dozen GETs after the last commit of a burst.
    """

    __slots__ = ("_active_s", "base_s", "grace_s", "interval_s", "max_s")

    def __init__(self, base_s: float, max_s: float, *, grace_s: float | None = None) -> None:
        self.base_s = base_s
        self.max_s = max(base_s, max_s)
        self.grace_s = self.max_s / 2 if grace_s is None else grace_s
        self.interval_s = base_s
        self._active_s = -float("inf")

    def active(self) -> None:
        self.interval_s = self.base_s
        self._active_s = time.monotonic()

    def idle(self) -> None:
        if time.monotonic() - self._active_s >= self.grace_s:
            self.interval_s = min(self.interval_s * 2, self.max_s)


# --- inotify (Linux) -----------------------------------------------------------------------------------

_IN_CREATE = 0x00000100
_IN_MOVED_TO = 0x00000080
_IN_IGNORED = 0x00008000
_IN_Q_OVERFLOW = 0x00004000
_IN_ONLYDIR = 0x01000000
_IN_CLOEXEC = 0o2000000
_IN_NONBLOCK = 0o4000
_EVENT_HEADER = struct.Struct("iIII")


class InotifyNotifier:
    """One inotify instance for the process, one daemon thread reading it.

    Watches are reference-counted per directory: several logs or stores watching one directory share
    the kernel watch.  The kernel drops a watch whose directory is removed (``IN_IGNORED``): waiters
    of a deleted topic fall back to polling, which is what finds the deletion anyway.
    """

    pushes = True

    def __init__(self) -> None:
        libc = _libc()
        if libc is None:
            raise OSError("inotify is not available on this platform")
        self._libc = libc
        fd = libc.inotify_init1(_IN_CLOEXEC | _IN_NONBLOCK)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self._fd = fd
        self._wake_r, self._wake_w = os.pipe()
        self._lock = threading.Lock()
        self._by_wd: dict[int, dict[int, Callable[[int], None]]] = {}  # wd -> {token: callback}
        self._wd_of: dict[str, int] = {}
        self._next_token = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="pubsub-inotify", daemon=True)
        self._thread.start()

    def watch(self, directory: str, callback: Callable[[int], None]) -> Unwatch:
        path = os.path.abspath(directory)
        with self._lock:
            if self._closed:
                return _noop
            wd = self._libc.inotify_add_watch(self._fd, os.fsencode(path), _IN_CREATE | _IN_MOVED_TO | _IN_ONLYDIR)
            if wd < 0:
                err = ctypes.get_errno()
                if err not in (errno.ENOENT, errno.ENOTDIR):  # a missing directory is normal (polling finds it)
                    _LOG.debug("cannot watch %s (%s): polling instead", path, os.strerror(err))
                return _noop
            self._wd_of[path] = wd
            token = self._next_token
            self._next_token += 1
            self._by_wd.setdefault(wd, {})[token] = callback

        def unwatch() -> None:
            with self._lock:
                callbacks = self._by_wd.get(wd)
                if callbacks is None or callbacks.pop(token, None) is None or callbacks:
                    return
                del self._by_wd[wd]
                if self._wd_of.get(path) == wd:
                    del self._wd_of[path]
                if not self._closed:
                    self._libc.inotify_rm_watch(self._fd, wd)

        return unwatch

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._by_wd.clear()
            self._wd_of.clear()
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=5)
        for fd in (self._fd, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while not self._closed:
            try:
                ready = poller.poll()
            except InterruptedError:
                continue
            if self._closed or any(fd == self._wake_r for fd, _ in ready):
                return
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                continue
            except OSError:
                return
            self._dispatch(data)

    def _dispatch(self, data: bytes) -> None:
        due: dict[tuple[int, int], tuple[Callable[[int], None], int]] = {}  # newest version per watcher
        everyone = False
        pos = 0
        with self._lock:
            while pos + _EVENT_HEADER.size <= len(data):
                wd, mask, _cookie, length = _EVENT_HEADER.unpack_from(data, pos)
                name = data[pos + _EVENT_HEADER.size : pos + _EVENT_HEADER.size + length].rstrip(b"\0")
                pos += _EVENT_HEADER.size + length
                if mask & _IN_Q_OVERFLOW:  # events were lost: wake everyone, they poll and catch up
                    everyone = True
                elif mask & _IN_IGNORED:
                    self._by_wd.pop(wd, None)
                    for path in [p for p, w in self._wd_of.items() if w == wd]:
                        del self._wd_of[path]
                elif _VERSION_NAME.match(name):
                    version = int(name[:20])
                    for token, callback in self._by_wd.get(wd, {}).items():
                        if (wd, token) not in due or due[wd, token][1] < version:
                            due[wd, token] = (callback, version)
            if everyone:
                due = {(w, token): (cb, -1) for w, cbs in self._by_wd.items() for token, cb in cbs.items()}
        for callback, version in due.values():
            try:
                callback(version)
            except Exception:  # a waiter's bug must not stop notifications for the others
                _LOG.exception("inotify callback failed")


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):
        return None
    return libc


_SHARED: ChangeNotifier | None = None
_SHARED_LOCK = threading.Lock()


def _forget_after_fork() -> None:
    """A forked child (Spark's Python workers are forked) inherits the inotify descriptor but not the
    thread reading it: it starts its own notifier on first use."""
    global _SHARED, _SHARED_LOCK
    _SHARED, _SHARED_LOCK = None, threading.Lock()


on_fork_in_child(_forget_after_fork)


def local_notifier(*, enabled: bool) -> ChangeNotifier:
    """The process's notifier for local roots: inotify where it works, else polling."""
    global _SHARED
    if not enabled:
        return PollingNotifier()
    with _SHARED_LOCK:
        if _SHARED is None:
            try:
                _SHARED = InotifyNotifier()
            except OSError as exc:
                _LOG.debug("file-system notifications unavailable (%s): polling", exc)
                _SHARED = PollingNotifier()
        return _SHARED


__all__ = [
    "ChangeNotifier",
    "InotifyNotifier",
    "PollSchedule",
    "PollingNotifier",
    "Unwatch",
    "local_notifier",
]
