"""Checkpoints owed by a writer: written inline, or in order on a background thread.

A writer whose commit lands on a multiple of ``checkpointInterval`` owes the log a checkpoint
(``docs/PROTOCOL.md`` section 4.6).  Writing it costs time that grows with the number of live
segments, so a long-lived writer (the broker's topic handles) hands it to a daemon thread and the
commit that crossed the interval returns at once.  Every interval still gets its checkpoint, in
order; a failed one is left to a later interval or to the next opener (``TransactionLog._heal``).
"""

from __future__ import annotations

import threading
from collections import deque

from broker_core.log.checkpoint import write_checkpoint
from broker_core.log.snapshot import Snapshot
from broker_core.storage import FileIO


class Checkpointer:
    """Writes the checkpoints of one table, inline or (``background=True``) on a daemon thread."""

    def __init__(self, io: FileIO, table_path: str, *, background: bool) -> None:
        self.io = io
        self.table_path = table_path
        self.background = background
        self._pending: deque[Snapshot] = deque()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def owe(self, snapshot: Snapshot) -> None:
        """Checkpoint ``snapshot`` now, or soon on the background thread."""
        if not self.background:
            write_checkpoint(self.io, self.table_path, snapshot)
            return
        with self._lock:
            self._pending.append(snapshot)  # every interval gets its checkpoint, in order
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._drain, daemon=True,
                                                name=f"pubsub-checkpoint-{self.table_path}")
                self._thread.start()

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._thread = None
                    return
                snapshot = self._pending.popleft()
            try:
                write_checkpoint(self.io, self.table_path, snapshot)
            except Exception:  # a later interval or a reopening process writes the next one
                continue

    def wait(self, timeout_s: float = 30.0) -> None:
        """Block until the background checkpoints are written (tests, clean shutdown)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)


__all__ = ["Checkpointer"]
