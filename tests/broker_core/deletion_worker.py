"""Subprocess side of ``test_topic_deletion.py``: a producer in another process while a topic is deleted.

Run as a script (``python deletion_worker.py '<json args>'``, args ``root``, ``topic``, ``mode`` and,
for ``idle``, ``count``).  It writes one line per event to stdout, flushed at once:

- ``ready``: the producer is connected.
- mode ``send``: ``ack <n>`` after each acknowledged send, until a send fails.
- mode ``idle``: sends ``count`` messages, prints ``sent <count>``, then waits for ``go`` on stdin
  (the test deletes and re-creates the topic meanwhile) and sends once more.
- ``error <class> <is TopicNotFound> <message>``: the first failed send.
- ``again <class>`` / ``flush <class>``: a further send and a flush, which must fail the same way.
- then it waits for ``close`` on stdin (so the test can watch for stray files while the producer's
  threads are alive), closes the producer and the client and prints ``closed``.
"""

from __future__ import annotations

import json
import sys

from broker_core import Client, PulsarException, TopicNotFound


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__} {isinstance(exc, TopicNotFound)} {str(exc).replace(chr(10), ' ')}"


def main() -> None:
    args = json.loads(sys.argv[1])
    client = Client(args["root"])
    producer = client.create_producer(args["topic"], batching_enabled=False)
    emit("ready")
    sent = 0
    try:
        if args["mode"] == "idle":
            for i in range(args["count"]):
                producer.send(f"old-{i}".encode())
            emit(f"sent {args['count']}")
            assert sys.stdin.readline().strip() == "go"
            producer.send(b"after re-creation")
            emit("ack after-go")
        else:
            while True:
                producer.send(f"m{sent}".encode())
                sent += 1
                emit(f"ack {sent}")
    except PulsarException as exc:
        emit(f"error {describe(exc)}")
    for name, action in (("again", lambda: producer.send(b"again")), ("flush", producer.flush)):
        try:
            action()
            emit(f"{name} ok")
        except PulsarException as exc:
            emit(f"{name} {type(exc).__name__}")
    assert sys.stdin.readline().strip() == "close"
    producer.close()
    client.close()
    emit("closed")


if __name__ == "__main__":
    main()
