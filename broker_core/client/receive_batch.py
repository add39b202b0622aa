"""``batch_receive``: collect messages from a consumer's receiver queue up to a policy's limits.

Persistent and non-persistent consumers both keep a receiver queue guarded by a condition; this is
the one implementation of the official client's batch rules over such a queue.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from broker_core.client.policies import ConsumerBatchReceivePolicy
from broker_core.errors import PulsarException
from broker_core.message import Message


def collect_batch(
    cv: threading.Condition,
    queue: deque[Message],
    take: Callable[[], Message],
    check_open: Callable[[], None],
    policy: ConsumerBatchReceivePolicy,
    pending_error: Callable[[bool], PulsarException | None] = lambda clear: None,
) -> list[Message]:
    """Take messages until a limit is reached or the policy's timeout passes.

    As in the official client, a batch never goes over the byte limit unless its first message alone
    does, and a negative ``timeout_ms`` waits until a limit is reached.  ``take`` pops one message
    (and does the consumer's bookkeeping); the caller must not hold ``cv``.  ``pending_error(clear)``
    gives an error the consumer must hand to the application once (damaged storage; ``clear``: it is
    being handed over): a batch that has messages returns them at once and leaves the error for the
    next call, so every message before the damage comes first; an empty batch raises it.
    """
    deadline = None if policy.timeout_ms < 0 else time.monotonic() + policy.timeout_ms / 1000
    out: list[Message] = []
    size = 0
    with cv:
        while True:
            check_open()
            full = False
            while queue:
                nxt = len(queue[0].data())
                if out and (
                    (policy.max_num_message > 0 and len(out) >= policy.max_num_message)
                    or (policy.max_num_bytes > 0 and size + nxt > policy.max_num_bytes)
                ):
                    full = True
                    break
                out.append(take())
                size += nxt
            full = (
                full
                or (policy.max_num_message > 0 and len(out) >= policy.max_num_message)
                or (policy.max_num_bytes > 0 and size >= policy.max_num_bytes)
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
