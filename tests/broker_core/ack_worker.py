"""Subprocess side of ``test_ack_grouping.py``: a Shared consumer whose dispatch gets stuck.

Run as a script::

    python ack_worker.py '<json args>'

with ``root``, ``topic``, ``subscription`` and ``acks`` (how many messages to acknowledge).  After
its first receive, every later dispatch window read blocks for good (as a read of a long backlog of
small segments, or a hung storage request, would stall the dispatch thread); once the dispatch thread
is stuck so, the worker acknowledges ``acks`` messages, prints ``acked <offset> ...`` and waits to be
killed.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from broker_core import Client, ConsumerType, InitialPosition
from broker_core.client.subscription_part import SubscriptionPart


def main() -> None:
    args = json.loads(sys.argv[1])
    client = Client(args["root"])
    consumer = client.subscribe(args["topic"], args["subscription"], consumer_type=ConsumerType.Shared,
                                receiver_queue_size=100, initial_position=InitialPosition.Earliest)
    first = consumer.receive(10_000)
    never, stuck = threading.Event(), threading.Event()

    def stuck_window(self: SubscriptionPart, start: int, end: int) -> Any:
        stuck.set()
        never.wait()

    SubscriptionPart.window = stuck_window  # type: ignore[method-assign]
    msgs = [first] + [consumer.receive(10_000) for _ in range(args["acks"] - 1)]
    # the queue fell below half: the dispatch thread claims more and gets stuck; ack only then
    assert stuck.wait(30), "the dispatch thread never asked for a window"
    for msg in msgs:
        consumer.acknowledge(msg)
    print("acked " + " ".join(str(m._offset) for m in msgs), flush=True)
    sys.stdin.readline()  # killed while waiting here


if __name__ == "__main__":
    main()
