"""Subprocess side of ``test_durability.py``: writers that race, get killed, and take topics over.

Run as a script (``python durability_worker.py <mode> '<json args>'``); it talks to the test over
stdin/stdout, one line per event, flushed at once so that a SIGKILL loses nothing that was printed:

- ``ready``: the worker has started; with ``wait_go`` it then blocks until stdin says ``go`` (or
  ``go <start>``), so a test can boot workers ahead of time.
- ``started``: the topic is open, appends follow.
- ``ack <first> <end>``: sequence ids ``[first, end)`` were committed (the append returned).
- ``done <json>``: a summary when the worker finishes by itself.
"""

from __future__ import annotations

import json
import random
import sys
import time
from typing import Any

import numpy as np
from log_helpers import open_topic, producer_table

from broker_core.errors import ProducerBusy, ProducerFenced
from broker_core.producer.registry import ProducerAccessMode, ProducerRegistry
from broker_core.topic.topic_log import TopicLog


def random_layout(rng: random.Random, rows: int) -> list[int]:
    """Split ``rows`` into batched (``n``) and unbatched (``-k``) runs at random."""
    layout: list[int] = []
    left = rows
    while left:
        size = rng.randint(1, left)
        layout.append(size if rng.random() < 0.5 else -size)
        left -= size
    return layout


def count_lost_races(topic: TopicLog) -> list[int]:
    """Count the commits this process lost to another writer (put-if-absent of a log version
    returning False), by wrapping the storage call on this instance only."""
    lost = [0]
    put = topic.io.put_if_absent

    def counting_put(path: str, data: bytes, **kwargs: Any) -> bool:
        created = put(path, data, **kwargs)
        if not created and path.endswith(".json"):
            lost[0] += 1
        return created

    topic.io.put_if_absent = counting_put  # type: ignore[method-assign]
    return lost


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def append_loop(args: dict[str, Any]) -> None:
    """Append ``count`` messages of one producer from ``start`` in random batches and layouts."""
    emit("ready")
    start = args.get("start")
    if args.get("wait_go"):  # "go" or "go <start>": the test may decide the start only now
        command = sys.stdin.readline().split()
        assert command[0] == "go", command
        if len(command) > 1:
            start = int(command[1])
    assert start is not None
    rng = random.Random(args["seed"])
    interval = args["checkpoint_interval"]
    topic = open_topic(args["root"], args["path"], checkpoint_interval=interval, create=False)
    lost_races = count_lost_races(topic)
    topic.snapshot()
    emit("started")
    seq, end = start, start + args["count"]
    written = 0
    appends = 0
    while seq < end:
        rows = min(rng.randint(1, args["max_rows"]), end - seq)
        now_ms = int(time.time() * 1000)
        table = producer_table(args["producer"], np.arange(seq, seq + rows), publish_ms=now_ms)
        result = topic.append(table, layout=random_layout(rng, rows), dedup=True)
        written += result.num_written
        appends += 1
        if args.get("acks", True):
            emit(f"ack {seq} {seq + rows}")
        seq += rows
    emit("done " + json.dumps({"written": written, "appends": appends, "lost_races": lost_races[0]}))


def take_over(args: dict[str, Any]) -> None:
    """Try Exclusive and Shared (refused while the test holds the topic), then fence it."""
    topic = open_topic(args["root"], args["path"], create=False)
    registry = ProducerRegistry(topic.io, args["path"])
    now_ms = args["now_ms"]
    outcome: dict[str, Any] = {}
    for name, mode in [("p2", ProducerAccessMode.Exclusive), ("p4", ProducerAccessMode.Shared)]:
        try:
            registry.register(name, mode, now_ms=now_ms, lease_ms=60_000)
            outcome[mode.name] = "registered"
        except (ProducerBusy, ProducerFenced) as exc:  # an exclusive newcomer is fenced, a shared one busy
            outcome[mode.name] = "busy: " + str(exc)
    epoch = registry.register("p3", ProducerAccessMode.ExclusiveWithFencing, now_ms=now_ms, lease_ms=60_000)
    topic.bump_producer_epoch(to=epoch)
    result = topic.append(producer_table("p3", [0]), layout=[1], producer_epoch=epoch, dedup=True)
    outcome.update(epoch=epoch, version=result.version, live=registry.live_producers(now_ms=now_ms))
    try:
        topic.append(producer_table("p3", [1]), layout=[1], producer_epoch=epoch - 1)
        outcome["stale_epoch"] = "written"
    except ProducerFenced:
        outcome["stale_epoch"] = "fenced"
    emit("done " + json.dumps(outcome))


def register(args: dict[str, Any]) -> None:
    """Register one producer under ``mode`` as soon as stdin says ``go`` (to race other processes)."""
    registry = ProducerRegistry(open_topic(args["root"], args["path"], create=False).io, args["path"])
    emit("ready")
    assert sys.stdin.readline().strip() == "go"
    try:
        mode = ProducerAccessMode[args["mode"]]
        registry.register(args["name"], mode, now_ms=args["now_ms"], lease_ms=60_000)
        emit("done registered")
    except (ProducerBusy, ProducerFenced):
        emit("done busy")


def main() -> None:
    mode, raw = sys.argv[1], sys.argv[2]
    args = json.loads(raw)
    {"append": append_loop, "take-over": take_over, "register": register}[mode](args)


if __name__ == "__main__":
    main()
