"""Time as an injected dependency.

Delayed delivery, message TTL, producer leases and retry backoff all depend on "now".  Reading the
system clock directly would make those rules testable only by sleeping, so every component that
needs time takes a ``Clock`` instead: production code passes ``SYSTEM_CLOCK`` and tests pass a
``ManualClock`` that they move forward explicitly.

Two readings are offered because they answer different questions:

* ``now_ms()`` is wall-clock time in milliseconds since the Unix epoch.  It is what gets persisted
  (publish time, deliver-at time, lease expiry) because other processes must be able to compare it.
* ``monotonic_s()`` is seconds from an arbitrary origin that never goes backwards.  It is for
  measuring elapsed time inside one process (timeouts, backoff) where a wall-clock jump must not
  shorten or stretch a wait.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

from broker_core.errors import InvalidConfiguration


@runtime_checkable
class Clock(Protocol):
    """The seam through which the library reads time."""

    def now_ms(self) -> int:
        """Return wall-clock time in whole milliseconds since the Unix epoch."""
        ...

    def monotonic_s(self) -> float:
        """Return seconds from an arbitrary origin; never decreases within one process."""
        ...


class SystemClock:
    """The real clock: ``time.time_ns()`` for wall-clock time, ``time.monotonic()`` for elapsed time."""

    __slots__ = ()

    def now_ms(self) -> int:
        """Return wall-clock time in whole milliseconds since the Unix epoch."""
        # Integer division on nanoseconds avoids the rounding a float ``time.time() * 1000`` has.
        return time.time_ns() // 1_000_000

    def monotonic_s(self) -> float:
        """Return ``time.monotonic()``."""
        return time.monotonic()

    def __repr__(self) -> str:
        return "SystemClock()"


def _require_ms(value: object, *, what: str) -> int:
    # ``bool`` is an ``int`` subclass; ``advance(True)`` is a bug, not one millisecond.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidConfiguration(
            f"{what} must be an int number of milliseconds, got {value!r} ({type(value).__name__})",
            value=value,
        )
    return value


class ManualClock:
    """A clock that only moves when a test says so.

    Both readings derive from one millisecond counter: ``monotonic_s()`` is ``now_ms() / 1000``, so
    advancing the clock advances elapsed time by the same amount and the two never disagree.  The
    clock never moves backwards, which keeps ``monotonic_s()`` honest and mirrors the assumption the
    library makes about wall-clock time (a lease or TTL must not "un-expire").

    Args:
        start_ms: the initial ``now_ms()`` value (milliseconds since the Unix epoch, >= 0).

    Raises:
        InvalidConfiguration: ``start_ms`` is not a non-negative int.
    """

    __slots__ = ("_lock", "_now_ms")

    def __init__(self, start_ms: int = 0) -> None:
        start_ms = _require_ms(start_ms, what="ManualClock start_ms")
        if start_ms < 0:
            raise InvalidConfiguration(
                f"ManualClock start_ms must be >= 0 (milliseconds since the epoch), got {start_ms}",
                value=start_ms,
            )
        self._now_ms = start_ms
        # Tests may advance the clock from one thread while workers read it from others.
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        """Return the current manual time in milliseconds since the Unix epoch."""
        return self._now_ms

    def monotonic_s(self) -> float:
        """Return the current manual time in seconds (the same counter as ``now_ms``)."""
        return self._now_ms / 1000.0

    def advance(self, ms: int) -> int:
        """Move the clock forward by ``ms`` milliseconds.

        Args:
            ms: how far to move, >= 0.

        Returns:
            The new ``now_ms()``.

        Raises:
            InvalidConfiguration: ``ms`` is negative or not an int.
        """
        ms = _require_ms(ms, what="ManualClock.advance(ms)")
        if ms < 0:
            raise InvalidConfiguration(
                f"ManualClock.advance(ms) cannot move time backwards, got ms={ms}; pass ms >= 0",
                value=ms,
            )
        with self._lock:
            self._now_ms += ms
            return self._now_ms

    def set(self, ms: int) -> None:
        """Jump the clock to ``ms`` milliseconds since the Unix epoch.

        Args:
            ms: the new time; must not be earlier than the current time.

        Raises:
            InvalidConfiguration: ``ms`` is earlier than ``now_ms()`` or not an int.
        """
        ms = _require_ms(ms, what="ManualClock.set(ms)")
        with self._lock:
            if ms < self._now_ms:
                raise InvalidConfiguration(
                    f"ManualClock.set(ms) cannot move time backwards: now_ms={self._now_ms}, "
                    f"requested ms={ms}; pass a value >= {self._now_ms}",
                    value=ms,
                )
            self._now_ms = ms

    def __repr__(self) -> str:
        return f"ManualClock(now_ms={self._now_ms})"


SYSTEM_CLOCK: Clock = SystemClock()
"""The process-wide real clock; the default wherever a ``clock`` argument is omitted."""


__all__ = [
    "SYSTEM_CLOCK",
    "Clock",
    "ManualClock",
    "SystemClock",
]
