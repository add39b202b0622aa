"""How a consumer or reader notices that its topic was deleted, so it stops instead of polling on.

Pulsar disconnects the consumers and readers of a deleted topic.  Here nobody pushes that news:
the handle finds out when reading the log fails (``TopicNotFound``/``TopicDeleted``) or a cursor
write finds the topic's directory gone (``DirectoryGone``).  It then checks that every internal
topic it reads really is gone (a storage hiccup is not a deletion), closes itself, and raises
``TopicDeleted`` once; later calls raise ``AlreadyClosed`` like any closed handle.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker_core.errors import DirectoryGone, TopicDeleted, TopicNotFound
from broker_core.topic.topic_log import TopicLog

GONE_ERRORS = (TopicNotFound, DirectoryGone)
"""Errors that may mean the topic was deleted (confirmed with ``deleted_error``)."""


def deleted_error(logs: Iterable[TopicLog], *, topic: str, what: str) -> TopicDeleted | None:
    """``TopicDeleted`` for ``what`` ("reader 'r'") if every log is deleted or being deleted, else None."""
    for log in logs:
        try:
            snapshot = log.snapshot()
        except TopicNotFound:
            continue
        if not snapshot.deleted:
            return None
    return TopicDeleted(
        f"topic {topic} was deleted: {what} stopped and is closed; create a new one once the topic exists again",
        topic=topic,
    )


__all__ = ["GONE_ERRORS", "deleted_error"]
