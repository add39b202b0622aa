"""The blocking read of an in-memory receiver queue: ``read_next`` and ``receive`` of non-persistent handles.

A non-persistent reader or consumer has no storage to fetch from: the topic pushes messages into
its queue (``offer``) and a read only waits for one, under the condition that guards the queue.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from broker_core.client.args import check_type_or_none
from broker_core.errors import Timeout
from broker_core.message import Message


def wait_next(
    cv: threading.Condition,
    queue: deque[Message],
    take: Callable[[], Message],
    check_open: Callable[[], None],
    timeout_millis: int | None,
    topic_label: str,
) -> Message:
    """The next message of ``queue``, taken by ``take`` (which does the handle's bookkeeping).

    Waits up to ``timeout_millis`` (forever if None); the caller must not hold ``cv``.

    Raises:
        Timeout: nothing arrived in time.
        AlreadyClosed: from ``check_open``, also when the handle closes while waiting.
    """
    check_type_or_none(int, timeout_millis, "timeout_millis")
    deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1000
    with cv:
        while True:
            check_open()
            if queue:
                return take()
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise Timeout(f"no message on {topic_label} within {timeout_millis} ms", topic=topic_label)
            cv.wait(timeout=remaining)


__all__ = ["wait_next"]
