"""Where cursors live: ``<topic>/_cursors/<subscription>/<v>.json``, one handle per process.

Consumers in one process share a ``CursorStore`` per (topic, subscription), so a change made by one
of them (an ack, a release, a consumer leaving) wakes the others at once; other processes see it at
their next poll, which is a stat of the next version file.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from broker_core.errors import InvalidConfiguration
from broker_core.log.state_store import VersionedState
from broker_core.storage import FileIO
from broker_core.subscription import activity
from broker_core.subscription.cursor import Cursor
from broker_core.topic.waiters import Waiters

_SUBSCRIPTION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=-]{0,254}$")
CURSORS_DIR = "_cursors"


def validate_subscription_name(name: object) -> str:
    """Subscription names become directory names, so they follow the topic-part rules."""
    if not isinstance(name, str) or not _SUBSCRIPTION_RE.match(name):
        raise InvalidConfiguration(
            f"invalid subscription name {name!r}: use 1-255 ASCII letters, digits, '-', '_', '=' or '.', "
            "starting with a letter or digit",
            subscription=name,
        )
    return name


class CursorStore(Waiters):
    """The cursor of one subscription on one internal topic."""

    def __init__(self, io: FileIO, topic_path: str, subscription: str) -> None:
        self.topic_path = topic_path
        self.subscription = validate_subscription_name(subscription)
        super().__init__()
        self.state = cursor_state(io, topic_path, subscription)
        self._known: tuple[float, int, dict[str, Any] | None] | None = None  # (when, version, document)

    def load(self, *, max_age_s: float = 0.0) -> tuple[int, Cursor | None]:
        """The newest cursor version (polls storage); None if the subscription does not exist.

        ``max_age_s``: a cursor this process read or wrote less than that long ago is good enough; it
        comes from memory, with no request and no wait for an update in flight (an acknowledgment
        flush holds the state's lock for its round trips).  Consumers on object stores poll the
        cursor that way, once per ``newEntriesCheckMaxDelayMillis`` at most (``docs/DECISIONS.md``):
        what they deliver is decided by commits that re-read it (claims), never by the cached copy.
        """
        known = self._known
        if max_age_s > 0 and known is not None and time.monotonic() - known[0] < max_age_s:
            version, doc = known[1], known[2]
        else:
            version, doc = self.state.latest()
            self._known = (time.monotonic(), version, doc)
        if doc is None:
            return version, None
        cursor = Cursor.from_json(doc)
        return version, None if cursor.deleted else cursor

    def load_document(self) -> tuple[int, dict[str, Any] | None]:
        """The newest cursor version as its raw document (with ``activity``; polls storage), for stats."""
        version, doc = self.state.latest()
        self._known = (time.monotonic(), version, doc)
        if doc is None or doc.get("deleted"):
            return version, None
        return version, doc

    def update(self, fn: Callable[[Cursor | None], Cursor | None]) -> Cursor | None:
        """Commit ``fn(latest)``; ``fn`` returns None for "no change". Re-run on a lost race.

        Each version also carries the subscription's ``activity`` (rates and last-ack times for stats)."""

        def apply(doc: dict[str, object] | None) -> dict[str, object] | None:
            current = Cursor.from_json(doc) if doc is not None else None
            if current is not None and current.deleted:
                current = None
            before = activity.counts(current)  # before ``fn``, which may change ``current`` in place
            new = fn(current)
            if new is None:
                return None
            out = new.to_json()
            if not new.deleted:  # the subscription's recent activity, for stats (``activity``)
                out[activity.ACTIVITY_KEY] = activity.stamp(doc, before, new, time.time_ns() // 1_000_000)
            return out

        version, doc = self.state.update(apply)
        self._known = (time.monotonic(), version, doc)
        self.notify(written=version)
        if doc is None:
            return None
        cursor = Cursor.from_json(doc)
        return None if cursor.deleted else cursor



def cursor_state(io: FileIO, topic_path: str, subscription: str) -> VersionedState:
    """The versioned state behind a cursor (a reader that needs no waiters, like the metrics exporter,
    may poll this alone)."""
    # a deleted topic's consumers re-create nothing (anchor); a damaged newest version falls back to
    # an older one (acknowledgements since then are redelivered: at least once, never lost silently)
    return VersionedState(io, f"{topic_path}/{CURSORS_DIR}/{subscription}", keep_versions=50,
                          anchor=topic_path, validate=Cursor.from_json, fall_back=True)


def list_subscriptions(io: FileIO, topic_path: str) -> list[str]:
    """Names of the subscriptions that have (or had) a cursor on an internal topic."""
    return [n for n in io.list_dir(f"{topic_path}/{CURSORS_DIR}") if _SUBSCRIPTION_RE.match(n)]


__all__ = ["CURSORS_DIR", "CursorStore", "cursor_state", "list_subscriptions", "validate_subscription_name"]
