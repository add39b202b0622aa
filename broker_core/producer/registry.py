"""Producer access modes across processes: registrations with leases, fencing by epoch.

Each internal topic keeps a versioned registry ``<topic>/_producers/<v>.json`` of live producers
(name, access mode, lease expiry).  A registration is refused or granted by one put-if-absent
commit, so two processes can never both believe they hold a topic exclusively.

Leases only decide who may *register*.  What stops a zombie (a producer whose lease expired while it
was paused) from writing is the topic's producer epoch in the log: every exclusive acquisition bumps
it, every data commit of a producer is validated against the epoch it registered under, and a
mismatch fails with ``ProducerFenced`` (``docs/PROTOCOL.md``).

The registry lives inside the topic's directory and never re-creates it: once the topic is deleted,
registering or renewing fails with ``TopicDeleted`` and writes nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from broker_core.errors import DirectoryGone, ProducerBusy, ProducerFenced, TopicDeleted
from broker_core.log.state_store import VersionedState
from broker_core.storage import FileIO


class ProducerAccessMode(enum.IntEnum):
    """The official client's producer access modes."""

    Shared = 0
    Exclusive = 1
    WaitForExclusive = 2
    ExclusiveWithFencing = 3


def _live(doc: dict[str, Any] | None, now_ms: int) -> dict[str, dict[str, Any]]:
    producers = (doc or {}).get("producers", {})
    return {name: p for name, p in producers.items() if p["leaseExpiresMs"] > now_ms}


class ProducerRegistry:
    """The registry of one internal topic."""

    def __init__(self, io: FileIO, topic_path: str) -> None:
        self.state = VersionedState(io, f"{topic_path}/_producers", anchor=topic_path)
        self.topic_path = topic_path

    def _deleted(self) -> TopicDeleted:
        return TopicDeleted(f"the topic at {self.topic_path!r} was deleted", topic=self.topic_path)

    def _update(self, fn: Callable[[dict[str, Any] | None], dict[str, Any] | None]) -> None:
        try:
            self.state.update(fn)
        except DirectoryGone as exc:
            raise self._deleted() from exc

    def register(self, name: str, mode: ProducerAccessMode, *, now_ms: int, lease_ms: int) -> int:
        """Register ``name`` under ``mode`` and return the producer epoch it holds.

        The epoch is assigned here, in the same commit as the registration, so two registrations can
        never end up with the order of their epochs different from the order of their registrations.
        It increases for every exclusive registration, and for any registration that follows an
        exclusive holder (live or expired), which fences a paused exclusive zombie; the producer then
        raises the log's epoch to it (``TopicLog.bump_producer_epoch``).

        Raises:
            ProducerBusy: the name is taken, or a Shared producer meets an exclusive holder.
            ProducerFenced: an exclusive producer meets connected producers (as Pulsar's broker
                answers); WaitForExclusive callers retry until it succeeds.
        """
        exclusive = mode != ProducerAccessMode.Shared
        assigned = {"epoch": 0}

        def fn(doc: dict[str, Any] | None) -> dict[str, Any]:
            everyone = (doc or {}).get("producers", {})
            epoch = int((doc or {}).get("epoch", 0))
            live = _live(doc, now_ms)
            others = {n: p for n, p in live.items() if n != name}
            if name in live:
                raise ProducerBusy(
                    f"a producer named {name!r} is already connected to {self.topic_path!r}; "
                    "producer names must be unique per topic",
                    topic=self.topic_path,
                )
            if mode == ProducerAccessMode.ExclusiveWithFencing:
                others = {}
            elif exclusive and others:  # Pulsar's broker fences the newcomer here (ProducerFenced)
                raise ProducerFenced(
                    f"cannot take {self.topic_path!r} exclusively: producers {sorted(others)} are connected; "
                    "close them, or use ProducerAccessMode.WaitForExclusive or ExclusiveWithFencing",
                    topic=self.topic_path,
                )
            elif any(p["mode"] != ProducerAccessMode.Shared.name for p in others.values()):
                holder = next(n for n, p in others.items() if p["mode"] != ProducerAccessMode.Shared.name)
                raise ProducerBusy(
                    f"{self.topic_path!r} is held by exclusive producer {holder!r}", topic=self.topic_path
                )
            after_exclusive = any(p["mode"] != ProducerAccessMode.Shared.name for p in everyone.values())
            if exclusive or after_exclusive:
                epoch += 1
            assigned["epoch"] = epoch
            others[name] = {"mode": mode.name, "leaseExpiresMs": now_ms + lease_ms, "epoch": epoch}
            return {"producers": others, "epoch": epoch}

        self._update(fn)
        return assigned["epoch"]

    def renew(self, name: str, *, now_ms: int, lease_ms: int) -> None:
        """Extend the lease; ``ProducerFenced`` if the registration was taken away, ``TopicDeleted`` if
        the whole registry is (a registered producer's topic always has one)."""

        def fn(doc: dict[str, Any] | None) -> dict[str, Any]:
            if doc is None:
                raise self._deleted()
            producers = dict(doc.get("producers", {}))
            if name not in producers:
                raise ProducerFenced(
                    f"producer {name!r} lost its registration on {self.topic_path!r} "
                    "(fenced by an exclusive producer, or its lease expired and another took over)",
                    topic=self.topic_path,
                )
            producers[name] = {**producers[name], "leaseExpiresMs": now_ms + lease_ms}
            return {**doc, "producers": producers}

        self._update(fn)

    def unregister(self, name: str) -> None:
        def fn(doc: dict[str, Any] | None) -> dict[str, Any] | None:
            producers = dict((doc or {}).get("producers", {}))
            if name not in producers:
                return None
            del producers[name]
            return {**(doc or {}), "producers": producers}

        self._update(fn)

    def live_producers(self, *, now_ms: int) -> dict[str, str]:
        """Live producer names and their access modes."""
        return {n: p["mode"] for n, p in _live(self.state.latest()[1], now_ms).items()}


__all__ = ["ProducerAccessMode", "ProducerRegistry"]
