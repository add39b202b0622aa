"""``batch_receive``: collect messages from a consumer's receiver queue up to a policy's limits.

Persistent and non-persistent consumers both keep a receiver queue guarded by a condition; this is
the one implementation of the official client's batch rules over such a queue.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from itertools import accumulate, islice

from broker_core.client.policies import ConsumerBatchReceivePolicy
from broker_core.errors import PulsarException
from broker_core.message import Message


def collect_batch(
    cv: threading.Condition,
    queue: deque[Message],
    take: Callable[[int], list[Message]],
    check_open: Callable[[], None],
    policy: ConsumerBatchReceivePolicy,
    pending_error: Callable[[bool], PulsarException | None] = lambda clear: None,
) -> list[Message]:
    """Take messages until a limit is reached or the policy's timeout passes.

    As in the official client, a batch never goes over the byte limit unless its first message alone
    does, and a negative ``timeout_ms`` waits until a limit is reached.  ``take(count)`` pops the next
    ``count`` messages (and does the consumer's bookkeeping for all of them at once: a batch is the
    fast path, not a loop over the one-message path); the caller must not hold ``cv``.
    ``pending_error(clear)`` gives an error the consumer must hand to the application once (damaged
    storage; ``clear``: it is being handed over): a batch that has messages returns them at once and
    leaves the error for the next call, so every message before the damage comes first; an empty
    batch raises it.
    """
    deadline = None if policy.timeout_ms < 0 else time.monotonic() + policy.timeout_ms / 1000
    max_count, max_bytes = policy.max_num_message, policy.max_num_bytes
    out: list[Message] = []
    size = 0
    with cv:
        while True:
            check_open()
            full = False
            if queue:
                count = len(queue) if max_count <= 0 else min(len(queue), max_count - len(out))
                if max_bytes > 0:  # the longest run that stays within the byte limit (at least one message)
                    ends = list(accumulate(map(len, map(Message.data, islice(queue, count))), initial=size))
                    fits = bisect_right(ends, max_bytes) - 1
                    count = max(fits, 0 if out else 1)
                    size = ends[count]
                    full = count < len(ends) - 1
                out += take(count)
            full = (
                full
                or (max_count > 0 and len(out) >= max_count)
                or (max_bytes > 0 and size >= max_bytes)
            )
            remaining = None if deadline is None else deadline - time.monotonic()
            if full or (remaining is not None and remaining <= 0):
                return out
            if not queue and pending_error(False) is not None:
                if out:
                    return out
                error = pending_error(True)
                assert error is not None
                raise error
            cv.wait(timeout=remaining)


__all__ = ["collect_batch"]
