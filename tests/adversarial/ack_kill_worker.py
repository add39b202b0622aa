"""Subprocess side of ``test_kills.py``: a Shared consumer that acknowledges until it is SIGKILLed.

Run as ``python ack_kill_worker.py '<json args>'`` (``root``, ``topic``, ``subscription``, ``seed``).
Lines are flushed at once, so a SIGKILL loses nothing that was printed:

- ``ready`` once subscribed;
- ``got <value>`` for each message received;
- ``acking <value> ...`` before a group of acknowledgments is committed (skipping a few messages,
  which stay unacknowledged), then ``committed <value> ...`` once the cursor commit has returned;
- ``done`` when nothing is left to receive.

Acknowledgments are committed only by the explicit flush (the background group commit is pushed an
hour away), so what is printed as ``committed`` is exactly what the cursor holds, and what a kill
lands between ``acking`` and ``committed`` is the only uncertain group.
"""

from __future__ import annotations

import json
import random
import sys

from broker_core import Client, ConsumerType, InitialPosition
from broker_core.errors import Timeout


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    args = json.loads(sys.argv[1])
    rng = random.Random(args["seed"])
    client = Client(args["root"])
    consumer = client.subscribe(args["topic"], args["subscription"], consumer_type=ConsumerType.Shared,
                                initial_position=InitialPosition.Earliest, receiver_queue_size=20)
    consumer._ack_group_s = 3600.0  # only the explicit flushes below commit
    emit("ready")
    group: list[str] = []
    while True:
        try:
            message = consumer.receive(args.get("receive_timeout_ms", 3_000))
        except Timeout:
            break
        value = message.data().decode()
        emit(f"got {value}")
        if rng.random() < 0.1:
            continue  # left unacknowledged: redelivered once this consumer is gone
        consumer.acknowledge(message)
        group.append(value)
        if len(group) >= rng.randint(1, 4):
            emit("acking " + " ".join(group))
            consumer._flush_acks()
            emit("committed " + " ".join(group))
            group = []
    if group:
        emit("acking " + " ".join(group))
        consumer._flush_acks()
        emit("committed " + " ".join(group))
    emit("done")
    consumer.close()
    client.close()


if __name__ == "__main__":
    main()
