"""Readahead of tiny segments: decode the segments after a read on a second thread while the reader
works on the rows it has.

A backlog of tiny segments (one per producer flush) is read one Parquet file after another, and
decoding a three-row file costs ~130 us of which pyarrow spends most with the GIL released.  A reader
that asked for a long run of small segments is most likely to ask for the next run next (a consumer's
dispatch window, a reader catching up), so ``TopicLog`` hands the segments that follow a read to this
worker, which decodes them into the log's segment cache.  The reader's own thread then finds them
decoded, or, for the one being decoded right now, waits for it instead of decoding it twice.

The worker is one daemon thread per ``TopicLog``, started on demand and gone after a short idle time,
so an idle process holds no thread.  It only ever warms the cache: a failure (a damaged or missing
segment) is dropped here and met again, and reported, by the reader's own read.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import weakref
from collections import deque
from collections.abc import Callable

from broker_core.log.segment_ref import SegmentRef

_IDLE_EXIT_S = 0.5  # the worker thread ends after this long without work
_EXIT_WAIT_S = 2.0  # at interpreter exit, how long to wait for a decode in flight to finish

_ALL: weakref.WeakSet[Readahead] = weakref.WeakSet()


class Readahead:
    """Decodes wanted segments in the background through ``load`` (which caches them)."""

    def __init__(self, load: Callable[[SegmentRef], object], *, name: str) -> None:
        self._load = load
        self._name = name
        self._pending: deque[SegmentRef] = deque()
        self._in_flight: str | None = None
        self._cv = threading.Condition()
        self._running = False
        self._stopped = False
        _ALL.add(self)

    def want(self, segments: list[SegmentRef]) -> None:
        """Decode ``segments`` (in order) next; replaces what was wanted before (the newest read
        knows best what comes next)."""
        with self._cv:
            if self._stopped:
                return
            self._pending = deque(segments)
            if not self._running and segments:
                self._running = True
                threading.Thread(target=self._work, name=f"pubsub-readahead-{self._name}", daemon=True).start()
            self._cv.notify_all()

    def forget(self, path: str) -> None:
        """The reader decodes ``path`` itself; if it is being decoded right now, wait for that instead
        (the caller then finds it in the cache)."""
        if self._in_flight != path:  # the common case, and always for a consumer (no readahead): no lock.
            return  # (unlocked, ``path`` may go in flight just after, as it may just after the locked check)
        with self._cv:
            while self._in_flight == path:
                self._cv.wait()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until nothing is wanted or in flight; False if that took longer than ``timeout_s``."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._pending and self._in_flight is None, timeout_s)

    def stop(self, timeout_s: float) -> None:
        """Want nothing more, ever, and wait (up to ``timeout_s``) for a decode in flight: at interpreter
        exit a daemon thread must not be inside pyarrow while the runtime is torn down."""
        with self._cv:
            self._stopped = True
            self._pending.clear()
            self._cv.notify_all()
        self.wait_idle(timeout_s)

    def _work(self) -> None:
        while True:
            with self._cv:
                if not self._pending:
                    self._cv.wait(_IDLE_EXIT_S)
                if not self._pending:
                    self._running = False
                    return
                # no notify here: taking work makes nothing a waiter waits for true (``forget`` waits
                # for its path to stop being in flight, ``wait_idle`` for nothing in flight); the one
                # after the decode below is the one they need, and a notify per segment here cost
                # ~6% of this thread in a drain of tiny segments
                seg = self._pending.popleft()
                self._in_flight = seg.path
            try:
                with contextlib.suppress(Exception):  # the reader's own read reports any damage
                    self._load(seg)
            finally:
                with self._cv:
                    self._in_flight = None
                    self._cv.notify_all()


@atexit.register
def _stop_all() -> None:
    for readahead in list(_ALL):
        readahead.stop(_EXIT_WAIT_S)


__all__ = ["Readahead"]
