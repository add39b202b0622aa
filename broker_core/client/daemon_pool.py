"""A small pool of daemon threads for a producer's uploads and commits.

``concurrent.futures.ThreadPoolExecutor`` joins its (non-daemon) workers at interpreter exit, so a
request stuck in a worker, or a backlog-quota wait, would keep an unclosed client's process alive;
the client's contract is that library threads never do (``docs/CLIENT.md``).  Workers start on
demand, up to ``max_workers``, as many as there are tasks not yet finished, and leave after
``idle_s`` without work.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

_LOG = logging.getLogger(__name__)


class DaemonPool:
    """Runs callables on up to ``max_workers`` daemon threads (a task's exceptions are its own business:
    a task that raises only loses its own result; the worker goes on)."""

    def __init__(self, name: str, *, max_workers: int, idle_s: float = 30.0) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        self._name = name
        self._max = max_workers
        self._idle_s = idle_s
        self._tasks: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._workers = 0
        self._unfinished = 0
        self._closed = False

    def submit(self, task: Callable[[], None]) -> None:
        """Queue ``task``; start a worker if every live one is taken."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"pool {self._name} is shut down")
            self._tasks.put(task)
            self._unfinished += 1
            if self._workers < min(self._max, self._unfinished):
                self._workers += 1
                threading.Thread(target=self._work, name=f"{self._name}-{self._workers}", daemon=True).start()

    def shutdown(self) -> None:
        """Let the workers finish the queued tasks and leave (returns at once)."""
        with self._lock:
            self._closed = True
            for _ in range(self._workers):
                self._tasks.put(None)

    def _work(self) -> None:
        while True:
            try:
                task = self._tasks.get(timeout=self._idle_s)
            except queue.Empty:
                with self._lock:  # a task queued while we timed out is ours: submit saw us alive
                    if self._tasks.empty():
                        self._workers -= 1
                        return
                continue
            if task is None:
                return
            try:
                task()
            except BaseException:  # tasks report their own failures; this is a bug, but never kill the worker
                _LOG.exception("a task of %s failed", self._name)
            finally:
                with self._lock:
                    self._unfinished -= 1


__all__ = ["DaemonPool"]
