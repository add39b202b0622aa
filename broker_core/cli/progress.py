"""Progress of long jobs on a terminal: one line on stderr, redrawn in place, gone when the job ends.

The jobs report through ``broker_core.jobs.reporting_progress``; this module is the listener the
``pubsub`` command installs.  It draws only when stderr is a terminal and ``--json`` was not given,
so pipes, cron, CI logs and scripts reading JSON see nothing but the result.  A ticker thread
redraws the line every ``TICK_S`` seconds, so the elapsed time moves while one internal topic takes
long (a big merge, a vacuum of many files) and the user can tell the job is alive.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from broker_core.jobs.progress import reporting_progress

TICK_S = 0.25
"""How often the line is redrawn while a job runs (seconds)."""

_CLEAR = "\r\x1b[K"  # carriage return, then erase to the end of the line


class TerminalProgress:
    """A ``ProgressListener`` drawing ``[job] 2/8 <topic> <step> 3.1s`` on a terminal stream.

    Args:
        stream: a terminal (stderr); the caller decides that it is one.
        tick_s: redraw period; 0 disables the ticker (tests draw on events only).
    """

    def __init__(self, stream: TextIO, *, tick_s: float = TICK_S) -> None:
        self._stream = stream
        self._tick_s = tick_s
        self._lock = threading.Lock()
        self._line: tuple[str, int, int, str, str] | None = None  # job, index, total, topic, step
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def topic_started(self, job: str, index: int, total: int, topic: str) -> None:
        with self._lock:
            if self._line is None or self._line[0] != job:
                self._started = time.monotonic()
            self._line = (job, index, total, topic, "")
            self._draw()
        self._ensure_ticker()

    def step(self, job: str, detail: str) -> None:
        with self._lock:
            if self._line is not None:
                self._line = (*self._line[:4], detail)
                self._draw()

    def job_finished(self, job: str) -> None:
        with self._lock:
            if self._line is not None:
                self._stream.write(_CLEAR)
                self._stream.flush()
            self._line = None

    def close(self) -> None:
        """Stop the ticker and clear any line left (after the command, whatever happened)."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            if self._line is not None:
                self._stream.write(_CLEAR)
                self._stream.flush()
                self._line = None

    def _draw(self) -> None:
        assert self._line is not None
        job, index, total, topic, detail = self._line
        elapsed_s = time.monotonic() - self._started
        text = f"[{job}] {index + 1}/{total} {topic}" + (f" {detail}" if detail else "") + f" {elapsed_s:.1f}s"
        self._stream.write(_CLEAR + text)
        self._stream.flush()

    def _ensure_ticker(self) -> None:
        if self._tick_s <= 0 or self._ticker is not None:
            return
        self._ticker = threading.Thread(target=self._tick, name="pubsub-progress", daemon=True)
        self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(self._tick_s):
            with self._lock:
                if self._line is not None:
                    self._draw()


def is_terminal(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (OSError, ValueError):  # a closed or detached stream
        return False


@contextmanager
def terminal_progress(*, json_output: bool, stream: TextIO | None = None) -> Iterator[TerminalProgress | None]:
    """Show the progress of the jobs run in this block on ``stream`` (default stderr) when it is a
    terminal and the output is not JSON; otherwise report nowhere."""
    out = stream if stream is not None else sys.stderr
    if json_output or not is_terminal(out):
        yield None
        return
    listener = TerminalProgress(out)
    try:
        with reporting_progress(listener):
            yield listener
    finally:
        listener.close()


__all__ = ["TICK_S", "TerminalProgress", "is_terminal", "terminal_progress"]
