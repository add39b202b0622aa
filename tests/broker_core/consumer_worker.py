"""Subprocess side of ``test_subscription_processes.py``: one consumer of a shared subscription.

Run as a script::

    python consumer_worker.py '<json args>'

with ``root``, ``topic``, ``subscription``, ``type`` (a ``ConsumerType`` name), ``name`` (the consumer
name), ``queue`` (receiver queue size), ``work_ms`` (simulated processing time per message) and
``stop`` (a file whose existence, once the worker finds nothing to receive, makes it close and exit).

It writes one line per event to stdout, flushed at once, so a SIGKILL loses nothing it printed:

- ``ready <t_ns>``: subscribed;
- ``received <key> <value> <redelivery_count> <t_ns>``: ``receive()`` returned this message
  (``t_ns`` is ``time.time_ns()``, comparable across processes on one machine);
- ``acked <value> <t_ns>``: ``acknowledge()`` returned for it (the ack is committed later, grouped);
- ``closed``: the consumer closed cleanly.
"""

from __future__ import annotations

import json
import os
import sys
import time

from broker_core import Client, ConsumerType, InitialPosition, Timeout


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    args = json.loads(sys.argv[1])
    client = Client(args["root"])
    consumer = client.subscribe(
        args["topic"], args["subscription"], consumer_type=ConsumerType[args["type"]],
        consumer_name=args["name"], receiver_queue_size=args["queue"],
        initial_position=InitialPosition.Earliest,
    )
    emit(f"ready {time.time_ns()}")
    work_s = args["work_ms"] / 1000
    while True:
        try:
            msg = consumer.receive(200)
        except Timeout:
            if os.path.exists(args["stop"]):
                break
            continue
        value = msg.data().decode()
        emit(f"received {msg.partition_key()} {value} {msg.redelivery_count()} {time.time_ns()}")
        if work_s:
            time.sleep(work_s)
        consumer.acknowledge(msg)
        emit(f"acked {value} {time.time_ns()}")
    consumer.close()
    client.close()
    emit("closed")


if __name__ == "__main__":
    main()
