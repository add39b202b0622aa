"""Subprocess side of ``test_producer_pipeline.py``: a pipelined producer that the test SIGKILLs.

Run as ``python pipeline_worker.py '<json args>'`` (``root``, ``topic``, ``batch``, ``max_pending``).
It opens the client, prints ``ready``, waits for ``go <first>`` on stdin, creates the producer
(retrying while the killed predecessor's registration is still live), prints ``started``, then
sends ``<topic>:<seq>`` with sequence id ``seq`` from ``first`` on, forever, with ``send_async``,
as an application that resends everything after its last acknowledgement does.  Every 25th
acknowledgement in a row prints ``ack <end>`` (sequence ids below ``end`` are acknowledged); a
callback out of send order, or a failed send, prints ``error <what>``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from broker_core import Client, ProducerBusy, Result


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    args = json.loads(sys.argv[1])
    client = Client(args["root"])
    emit("ready")
    command = sys.stdin.readline().split()
    assert command[0] == "go", command
    first = int(command[1])
    while True:
        try:
            producer = client.create_producer(
                args["topic"], producer_name="writer", batching_enabled=True, block_if_queue_full=True,
                batching_max_messages=args["batch"], max_pending_messages=args["max_pending"],
                batching_max_publish_delay_ms=5,
            )
            break
        except ProducerBusy:  # the killed predecessor's lease has not run out yet
            time.sleep(0.02)
    emit("started")
    expected = [first]

    def on_ack(seq: int, result: Any) -> None:
        if result != Result.Ok:
            emit(f"error send {seq}: {result}")
        elif seq != expected[0]:
            emit(f"error order: callback of {seq}, expected {expected[0]}")
        expected[0] = seq + 1
        if seq % 25 == 24:
            emit(f"ack {seq + 1}")

    seq = first
    while True:
        producer.send_async(f"{args['topic']}:{seq}".encode(), lambda r, _id, s=seq: on_ack(s, r), sequence_id=seq)
        seq += 1


if __name__ == "__main__":
    main()
