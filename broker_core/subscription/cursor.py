"""A durable subscription's cursor on one internal topic: acks, claims, redeliveries, consumers.

The cursor is a small JSON document committed as versioned state beside the topic
(``<topic>/_cursors/<subscription>/<v>.json``, see ``state_store``).  Every change is a pure
function of the previous document applied under put-if-absent, so consumers in different processes
coordinate only through these commits.

Positions are the topic's dense offsets:
- ``markDelete``: every offset below it is acknowledged (the mark-delete position + 1);
- ``acked``: individually acknowledged ranges above it (a batch's messages have offsets of their
  own, so batch-index acknowledgment is simply acking those offsets);
- ``claims``: the offsets dispatched to each consumer and not acked yet (Shared, Key_Shared, and the
  active consumer of a Failover subscription, so that a switch knows what it hands over);
- ``redelivery``: how often an unacked offset was handed out again.

``markDelete`` never moves backwards except through an explicit ``seek``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from broker_core.errors import ConsumerBusy, NotAllowedError
from broker_core.subscription import lease_holder
from broker_core.subscription.key_shared import (
    DEFAULT_RANGE_SIZE,
    auto_split_join,
    auto_split_leave,
    end_keys_from_regions,
)
from broker_core.subscription.ranges import RangeSet


class ConsumerType(enum.IntEnum):
    """The official client's subscription types (and their numbering)."""

    Exclusive = 0
    Shared = 1
    Failover = 2
    KeyShared = 3


@dataclass(slots=True)
class ConsumerEntry:
    """A registered consumer: who, with what priority and key ranges, alive until when."""

    name: str
    join_order: int
    lease_expires_ms: int
    priority_level: int = 0
    sticky_ranges: list[list[int]] = field(default_factory=list)
    holder: dict[str, str] = field(default_factory=dict)  # the process holding the lease (``lease_holder``)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "joinOrder": self.join_order,
            "leaseExpiresMs": self.lease_expires_ms,
            "priorityLevel": self.priority_level,
            "stickyRanges": self.sticky_ranges,
        }
        if self.holder:
            doc["holder"] = self.holder
        return doc

    @classmethod
    def from_json(cls, name: str, doc: dict[str, Any]) -> ConsumerEntry:
        holder = doc.get("holder")
        return cls(
            name=name,
            join_order=int(doc["joinOrder"]),
            lease_expires_ms=int(doc["leaseExpiresMs"]),
            priority_level=int(doc.get("priorityLevel", 0)),
            sticky_ranges=[list(r) for r in doc.get("stickyRanges", [])],
            # optional and informative: a malformed one is dropped, never fatal to the cursor
            holder={str(k): str(v) for k, v in holder.items()} if isinstance(holder, dict) else {},
        )

    def lease_text(self, now_ms: int) -> str:
        """What a ``ConsumerBusy`` says about this lease: whose, held where, until when."""
        return (f"consumer {self.name!r} holds a lease on it (taken by {lease_holder.describe(self.holder)}) "
                f"that expires at {lease_holder.expiry_text(self.lease_expires_ms, now_ms)}")


@dataclass(slots=True)
class Cursor:
    """The decoded cursor document (mutable while a commit function builds the next version)."""

    subscription: str
    sub_type: ConsumerType
    mark_delete: int
    acked: RangeSet = field(default_factory=RangeSet)
    claims: dict[str, RangeSet] = field(default_factory=dict)
    redelivery: dict[int, int] = field(default_factory=dict)
    consumers: dict[str, ConsumerEntry] = field(default_factory=dict)
    next_join_order: int = 0
    key_shared: dict[str, Any] = field(default_factory=dict)
    deleted: bool = False

    # -- (de)serialisation ------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "subscription": self.subscription,
            "type": self.sub_type.name,
            "markDelete": self.mark_delete,
            "acked": self.acked.to_json(),
            "claims": {name: rs.to_json() for name, rs in self.claims.items() if rs},
            "redelivery": {str(k): v for k, v in sorted(self.redelivery.items())},
            "consumers": {name: c.to_json() for name, c in self.consumers.items()},
            "nextJoinOrder": self.next_join_order,
            "keyShared": self.key_shared,
            "deleted": self.deleted,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Cursor:
        """Raises ``ValueError`` (or ``KeyError``/``TypeError``) on a malformed document, including a
        position outside int64 (positions go through int64 arrays: it would overflow at first use)."""
        if not -1 <= int(doc["markDelete"]) < 1 << 63:
            raise ValueError(f"markDelete {doc['markDelete']} is outside 0..2**63-1")
        return cls(
            subscription=doc["subscription"],
            sub_type=ConsumerType[doc["type"]],
            mark_delete=int(doc["markDelete"]),
            acked=RangeSet(doc.get("acked", [])),
            claims={name: RangeSet(r) for name, r in doc.get("claims", {}).items()},
            redelivery={int(k): int(v) for k, v in doc.get("redelivery", {}).items()},
            consumers={n: ConsumerEntry.from_json(n, c) for n, c in doc.get("consumers", {}).items()},
            next_join_order=int(doc.get("nextJoinOrder", 0)),
            key_shared=dict(doc.get("keyShared", {})),
            deleted=bool(doc.get("deleted", False)),
        )

    # -- consumers --------------------------------------------------------------------------------

    def live_consumers(self, now_ms: int) -> dict[str, ConsumerEntry]:
        return {n: c for n, c in self.consumers.items() if c.lease_expires_ms > now_ms}

    def expire_consumers(self, now_ms: int) -> list[str]:
        """Drop consumers whose lease ran out; their claimed messages become redeliverable."""
        dead = [n for n, c in self.consumers.items() if c.lease_expires_ms <= now_ms]
        for name in dead:
            self.remove_consumer(name)
        return dead

    def add_consumer(
        self,
        name: str,
        sub_type: ConsumerType,
        *,
        now_ms: int,
        lease_ms: int,
        priority_level: int = 0,
        sticky_ranges: list[list[int]] | None = None,
        key_shared: dict[str, Any] | None = None,
        takeover: bool = False,
        holder: dict[str, str] | None = None,
    ) -> ConsumerEntry:
        """Register a consumer, enforcing the subscription type's rules.

        Raises:
            ConsumerBusy: Exclusive with another live consumer, a type mismatch with live consumers,
                a duplicate consumer name, or a Key_Shared policy that differs from the live ones'.
        """
        self.expire_consumers(now_ms)
        if takeover and name in self.consumers:
            # the same consumer restarting (a Spark query from its checkpoint): keep its claims
            entry = self.consumers[name]
            entry.lease_expires_ms = now_ms + lease_ms
            entry.priority_level = priority_level
            return entry
        if name in self.consumers:
            raise self._busy(f"a consumer named {name!r} is already connected to subscription "
                             f"{self.subscription!r} (consumer names must be unique per subscription)",
                             self.consumers[name], now_ms)
        if self.consumers and sub_type != self.sub_type:
            raise self._busy(f"subscription {self.subscription!r} is {self.sub_type.name} with connected "
                             f"consumers; a {sub_type.name} consumer cannot join until they leave",
                             self._longest_lease(), now_ms)
        if self.consumers and sub_type == ConsumerType.Exclusive:
            current = self._longest_lease()
            raise self._busy(f"exclusive subscription {self.subscription!r} already has consumer {current.name!r}",
                             current, now_ms)
        mode_clash = bool(key_shared and self.key_shared) and (key_shared or {}).get("mode") != self.key_shared.get(
            "mode"
        )
        if sub_type == ConsumerType.KeyShared and self.consumers and mode_clash:
            raise self._busy(f"Key_Shared subscription {self.subscription!r} uses mode "
                             f"{self.key_shared.get('mode')}; a consumer with mode {(key_shared or {}).get('mode')} "
                             "cannot join until its consumers leave", self._longest_lease(), now_ms)
        if not self.consumers:
            self.sub_type = sub_type
            if key_shared is not None:
                self.key_shared = dict(key_shared)
        ends = None
        if self._auto_split_ranges():
            # raises ConsumerAssignException before anything below changes
            ends = auto_split_join(self.auto_split_end_keys(), name, self.auto_split_range_size())
        entry = ConsumerEntry(
            name=name,
            join_order=self.next_join_order,
            lease_expires_ms=now_ms + lease_ms,
            priority_level=priority_level,
            sticky_ranges=[list(r) for r in (sticky_ranges or [])],
            holder=dict(holder or {}),
        )
        self.next_join_order += 1
        self.consumers[name] = entry
        if ends is not None:
            self._store_end_keys(ends)
        return entry

    def release_leases(self, gone: Callable[[ConsumerEntry], bool], *, keep: str | None = None) -> list[str]:
        """Drop the consumers (but ``keep``) whose lease holder is ``gone`` (``lease_holder.is_gone``:
        provably unable to use it); their claims become redeliverable.  Returns their names."""
        dropped = [name for name, entry in self.consumers.items() if name != keep and gone(entry)]
        for name in dropped:
            self.remove_consumer(name)
        return dropped

    def _longest_lease(self) -> ConsumerEntry:
        return max(self.consumers.values(), key=lambda c: c.lease_expires_ms)

    def _busy(self, why: str, entry: ConsumerEntry, now_ms: int) -> ConsumerBusy:
        return ConsumerBusy(
            f"{why}: {entry.lease_text(now_ms)}. If that consumer is still running, close it; if it was "
            "closed or its process died, its lease lapses then (or delete the subscription with "
            "`pubsub subscriptions delete --force`)",
            subscription=self.subscription, consumer=entry.name, lease_expires_ms=entry.lease_expires_ms,
        )

    def _auto_split_ranges(self) -> bool:
        """AUTO_SPLIT hash ranges depend on the join/leave history, so the cursor keeps the layout."""
        return (
            self.sub_type == ConsumerType.KeyShared
            and self.key_shared.get("mode", "AutoSplit") == "AutoSplit"
            and not self.key_shared.get("consistentHashing", False)
        )

    def has_auto_split_layout(self) -> bool:
        """Whether the document stores an auto-split layout (current ``autoSplitEndKeys`` or the
        legacy ``regions`` of roots written before 4.x selectors, docs/PROTOCOL.md)."""
        return "autoSplitEndKeys" in self.key_shared or "regions" in self.key_shared

    def auto_split_range_size(self) -> int:
        """The subscription's auto-split range size (legacy documents: 65536)."""
        return int(self.key_shared.get("rangeSize", DEFAULT_RANGE_SIZE))

    def auto_split_end_keys(self) -> list[tuple[int, str]]:
        """The stored auto-split layout as ``(end key, consumer)`` pairs, legacy ``regions`` converted."""
        if "autoSplitEndKeys" in self.key_shared:
            return [(int(end), str(name)) for end, name in self.key_shared["autoSplitEndKeys"]]
        return end_keys_from_regions(self.key_shared.get("regions", []))

    def _store_end_keys(self, ends: list[tuple[int, str]]) -> None:
        self.key_shared.pop("regions", None)  # a legacy layout is rewritten in the current form
        self.key_shared["autoSplitEndKeys"] = [[end, name] for end, name in ends]

    def renew(self, name: str, *, now_ms: int, lease_ms: int) -> bool:
        """Extend a consumer's lease; False if it is no longer registered (it was expired)."""
        entry = self.consumers.get(name)
        if entry is None:
            return False
        entry.lease_expires_ms = now_ms + lease_ms
        return True

    def remove_consumer(self, name: str) -> None:
        """Unregister a consumer; its claims go back to the subscription, counted as redeliveries."""
        self.consumers.pop(name, None)
        if self._auto_split_ranges() and self.has_auto_split_layout():
            self._store_end_keys(auto_split_leave(self.auto_split_end_keys(), name, self.auto_split_range_size()))
        claims = self.claims.pop(name, None)
        if claims:
            self._count_redelivery(claims.offsets())

    # -- acknowledgment ---------------------------------------------------------------------------

    def ack(self, offsets: list[int] | np.ndarray) -> None:
        """Acknowledge individual offsets (idempotent; offsets below markDelete are ignored)."""
        arr = np.asarray(offsets, dtype=np.int64)
        arr = arr[arr >= self.mark_delete]
        if not len(arr):
            return
        self.acked.add_offsets(arr)
        for rs in self.claims.values():
            rs.remove_offsets(arr)
        if self.redelivery:
            for off in arr.tolist():
                self.redelivery.pop(off, None)
        self._advance()

    def ack_cumulative(self, offset: int) -> None:
        """Acknowledge every offset up to and including ``offset``."""
        if offset + 1 <= self.mark_delete:
            return
        self.mark_delete = offset + 1
        self._trim_below_mark_delete()
        self._advance()

    def _advance(self) -> None:
        start = self.acked.first_start()
        while start is not None and start <= self.mark_delete:
            end = self.acked._ends[0]
            self.mark_delete = max(self.mark_delete, end)
            self.acked.remove(start, end)
            start = self.acked.first_start()
        self._trim_below_mark_delete()

    def _trim_below_mark_delete(self) -> None:
        floor = self.mark_delete
        self.acked.remove_below(floor)
        for rs in self.claims.values():
            rs.remove_below(floor)
        if self.redelivery:
            self.redelivery = {k: v for k, v in self.redelivery.items() if k >= floor}

    def is_acked(self, offsets: np.ndarray) -> np.ndarray:
        return (offsets < self.mark_delete) | self.acked.contains_array(offsets)

    # -- dispatch bookkeeping ---------------------------------------------------------------------

    def claim(self, consumer: str, offsets: list[int]) -> None:
        if consumer not in self.consumers:
            raise NotAllowedError(
                f"consumer {consumer!r} is not registered on {self.subscription!r} (its lease expired)",
                subscription=self.subscription,
            )
        self.claims.setdefault(consumer, RangeSet()).add_offsets(offsets)

    def claim_in_order(self, consumer: str, offsets: list[int]) -> list[int]:
        """Failover: the active consumer takes ``offsets``, read in order from markDelete.

        Unlike a Shared claim this does not skip what others hold: after a switch the new active
        consumer reads again what the old one received and never acknowledged (the old one may still
        hold it, having lost the subscription while alive), and after a negative ack or an ack timeout
        the active consumer rewinds and reads its own messages again.  Taking an offset that someone
        (this consumer included) still has claimed is therefore a redelivery.  It is counted here, at
        the one place every redelivery passes, so the count goes up by exactly one per delivery
        whoever had the message before; a claim dropped when its consumer left was counted then, and
        is not claimed any more.

        Returns:
            The offsets taken: ``offsets`` without those acknowledged meanwhile.

        Raises:
            NotAllowedError: the consumer is not registered (its lease expired).
        """
        if consumer not in self.consumers:
            raise NotAllowedError(
                f"consumer {consumer!r} is not registered on {self.subscription!r} (its lease expired)",
                subscription=self.subscription,
            )
        arr = np.asarray(offsets, dtype=np.int64)
        arr = arr[~self.is_acked(arr)]
        if not len(arr):
            return []
        for rs in self.claims.values():
            held = rs.contains_array(arr)
            if held.any():
                again = arr[held]
                rs.remove_offsets(again)
                self._count_redelivery(again.tolist())
        self.claims.setdefault(consumer, RangeSet()).add_offsets(arr)
        return [int(o) for o in arr.tolist()]

    def claimed_by(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
        """All claimed ranges as (starts, ends, owner index, owner names), sorted by start."""
        rows: list[tuple[int, int, int]] = []
        names = list(self.claims)
        for index, name in enumerate(names):
            for s, e in self.claims[name].to_json():
                rows.append((s, e, index))
        rows.sort()
        if not rows:
            empty = np.empty(0, np.int64)
            return empty, empty, empty, names
        arr = np.asarray(rows, dtype=np.int64)
        return arr[:, 0], arr[:, 1], arr[:, 2], names

    def release(self, consumer: str, offsets: list[int], *, count_redelivery: bool = True) -> None:
        """Give claimed offsets back (nack, ack timeout, redeliver) so they are dispatched again."""
        rs = self.claims.get(consumer)
        # only what the consumer still holds: after its lease expired its claims were released (and
        # counted) already, and may belong to another consumer by now
        held = [o for o in dict.fromkeys(offsets) if o >= self.mark_delete and rs is not None and o in rs]
        if rs is not None:
            rs.remove_offsets(held)
        if count_redelivery:
            self._count_redelivery(held)

    def count_redelivery(self, offsets: list[int]) -> None:
        """Record a redelivery of offsets that were not claimed (Exclusive nack, ack timeout)."""
        self._count_redelivery(o for o in offsets if o >= self.mark_delete and o not in self.acked)

    def _count_redelivery(self, offsets: Any) -> None:
        for off in offsets:
            if off >= self.mark_delete:
                self.redelivery[off] = self.redelivery.get(off, 0) + 1

    def seek(self, offset: int) -> None:
        """Reset the cursor to ``offset`` (the one operation that may move it backwards)."""
        self.mark_delete = offset
        self.acked = RangeSet()
        self.claims = {}
        self.redelivery = {}


def new_cursor(subscription: str, sub_type: ConsumerType, mark_delete: int) -> Cursor:
    return Cursor(subscription=subscription, sub_type=sub_type, mark_delete=mark_delete)


__all__ = ["ConsumerEntry", "ConsumerType", "Cursor", "new_cursor"]
