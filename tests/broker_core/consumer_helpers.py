"""Helpers the consumer tests share: draining a consumer, reading values, simulating a crash."""

from __future__ import annotations

from broker_core import Consumer, Message, Timeout

WAIT_MS = 10_000  # generous bound for a message that must arrive
QUIET_MS = 300  # how long "nothing more arrives" is watched


def drain(consumer: Consumer, *, ack: bool = False, quiet_ms: int = QUIET_MS) -> list[Message]:
    """Everything that arrives until the consumer stays quiet for ``quiet_ms``."""
    out: list[Message] = []
    while True:
        try:
            msg = consumer.receive(quiet_ms)
        except Timeout:
            return out
        out.append(msg)
        if ack:
            consumer.acknowledge(msg)


def values(msgs: list[Message]) -> list[str]:
    return [m.data().decode() for m in msgs]


def crash(consumer: Consumer) -> None:
    """Stop a consumer's thread without flushing or leaving, like a process that died."""
    with consumer._cv:
        consumer._closed = True
        consumer._cv.notify_all()
    consumer._wake.set()
    consumer._thread.join(WAIT_MS / 1000)
    assert not consumer._thread.is_alive()
    for part in consumer._parts:
        part.log.remove_waiter(consumer._wake)
        part.store.remove_waiter(consumer._wake)
    consumer._client._forget(consumer)
