"""The maintenance leader lease: at most one ``maintain`` pass per storage root at a time.

``pubsub maintain`` may run on several hosts (replicas for availability) or overlap with itself (a
cron line whose previous run is still going).  Two passes at once would run the same topic's job
twice concurrently, so a pass first takes a lease: a versioned JSON document under
``_pubsub/maintenance/lease`` (``VersionedState``) naming its holder and an expiry.  Taking, renewing
and releasing it each create the *next* version with put-if-absent, deciding from the version they
read, so of two racers building on the same version exactly one wins; the loser re-reads, sees a live
lease held by someone else, and stands by.  A holder that dies (SIGKILL, a lost host) simply stops
renewing: once ``expiresMs`` has passed another runner takes the lease over the same way.

Expiry is compared with each runner's wall clock (``Clock.now_ms``), as producer and consumer leases
are; the holder renews before every job, so a lease must outlive the longest single job.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass

from broker_core.clock import SYSTEM_CLOCK, Clock
from broker_core.errors import InvalidConfiguration
from broker_core.log.state_store import Document, VersionedState
from broker_core.storage import FileIO

LEASE_DIR = "_pubsub/maintenance/lease"
DEFAULT_LEASE_MS = 120_000
"""How long a taken or renewed lease lasts: longer than one job on one topic is expected to take."""


def holder_id() -> str:
    """A holder id unique to this process and run: host, pid and a random part."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True, slots=True)
class LeaseView:
    """Who holds the lease (as last read) and until when."""

    holder: str | None
    expires_ms: int


class MaintenanceLease:
    """One runner's handle on the root's maintenance lease.

    Args:
        io: the storage root.
        holder: this runner's id (default: host/pid/random).
        lease_ms: how long a take or renewal lasts.
        clock: the time source compared with ``expiresMs``.
    """

    def __init__(self, io: FileIO, *, holder: str | None = None, lease_ms: int = DEFAULT_LEASE_MS,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        if isinstance(lease_ms, bool) or not isinstance(lease_ms, int) or lease_ms <= 0:
            raise InvalidConfiguration(f"lease_ms must be a positive int of milliseconds, got {lease_ms!r}",
                                       argument="lease_ms")
        self.holder = holder or holder_id()
        self.lease_ms = lease_ms
        self.clock = clock
        self._state = VersionedState(io, LEASE_DIR, keep_versions=20)
        self._expires_ms = 0  # our lease's expiry as last written by us (0: not held)

    def current(self) -> LeaseView:
        """The lease as stored now."""
        _, doc = self._state.latest()
        return _view(doc)

    def acquire(self) -> bool:
        """Take the lease (or keep it, renewed) unless another holder's lease is still live."""
        now = self.clock.now_ms()

        def take(doc: Document | None) -> Document | None:
            view = _view(doc)
            if view.holder not in (None, self.holder) and view.expires_ms > now:
                return None  # someone else leads
            return {"holder": self.holder, "expiresMs": now + self.lease_ms, "takenMs": now}

        _, doc = self._state.update(take)
        return self._held(doc, now)

    def renew(self) -> bool:
        """Extend the lease; False when it was lost (expired and taken over), so the pass must stop."""
        now = self.clock.now_ms()

        def extend(doc: Document | None) -> Document | None:
            view = _view(doc)
            if view.holder != self.holder or view.expires_ms <= now:
                return None  # lost: never resurrect an expired lease mid-pass, another may have started
            return {**(doc or {}), "expiresMs": now + self.lease_ms}

        _, doc = self._state.update(extend)
        return self._held(doc, now)

    def renew_if_due(self) -> bool:
        """``renew`` once less than half the lease is left (else True without a write): a pass over many
        topics checks before every job, and one small commit per job would cost more than the jobs."""
        if self._expires_ms - self.clock.now_ms() > self.lease_ms // 2:
            return True
        return self.renew()

    def _held(self, doc: Document | None, now: int) -> bool:
        view = _view(doc)
        held = view.holder == self.holder and view.expires_ms > now
        self._expires_ms = view.expires_ms if held else 0
        return held

    def release(self) -> None:
        """Give the lease up at the end of a pass, so the next runner need not wait for expiry."""

        def drop(doc: Document | None) -> Document | None:
            if _view(doc).holder != self.holder:
                return None
            return {"holder": None, "expiresMs": 0, "releasedBy": self.holder}

        self._expires_ms = 0
        self._state.update(drop)


def _view(doc: Document | None) -> LeaseView:
    if not doc:
        return LeaseView(None, 0)
    holder = doc.get("holder")
    return LeaseView(holder if isinstance(holder, str) else None, int(doc.get("expiresMs") or 0))


__all__ = ["DEFAULT_LEASE_MS", "LEASE_DIR", "LeaseView", "MaintenanceLease", "holder_id"]
