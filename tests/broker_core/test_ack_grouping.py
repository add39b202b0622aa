"""Acknowledgments reach storage within the grouping time, whatever the dispatch thread is doing.

A consumer used to commit its grouped acknowledgments from its dispatch thread, between two
dispatch rounds: while a round was slow (a claim reading thousands of small segments), acknowledged
messages stayed uncommitted, and a SIGKILLed Shared consumer had them redelivered (3.2 s of them
with a 100 ms grouping time).  Here the dispatch of a subprocess consumer is stuck for good after
its first claim; its acknowledgments must still be on storage within the grouping time (plus slack
for a busy machine), and after a SIGKILL none of them is delivered again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from broker_core import Client, ConsumerType, InitialPosition
from broker_core.broker.broker import Broker
from broker_core.naming import TopicName

ACK_GROUP_S = 0.1
SLACK_S = 3.0  # scheduling on two busy cores; the stuck dispatch would hold the acks forever
TOPIC = "persistent://public/default/acks"
N_MESSAGES = 300
N_ACKS = 60


@pytest.mark.slow
def test_acks_of_a_stuck_consumer_reach_storage_and_survive_a_kill(tmp_path: Path) -> None:
    (tmp_path / "_pubsub").mkdir()
    (tmp_path / "_pubsub" / "broker.toml").write_text("fsyncEnabled = false\nconsumerLeaseMs = 1000\n")
    client = Client(str(tmp_path))
    client.subscribe(TOPIC, "s", consumer_type=ConsumerType.Shared, initial_position=InitialPosition.Earliest).close()
    producer = client.create_producer(TOPIC, batching_enabled=True)
    for i in range(N_MESSAGES):
        producer.send_async(str(i).encode(), None)
    producer.flush()
    client.close()
    worker = Path(__file__).with_name("ack_worker.py")
    args = {"root": str(tmp_path), "topic": TOPIC, "subscription": "s", "acks": N_ACKS}
    proc = subprocess.Popen([sys.executable, str(worker), json.dumps(args)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=str(worker.parent))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        acked_at = time.monotonic()
        assert line and line[0] == "acked", line
        acked = {int(o) for o in line[1:]}
        assert len(acked) == N_ACKS
        store = Broker.for_url(str(tmp_path)).cursor_store(TopicName.parse(TOPIC), "s")
        durable: set[int] = set()
        pause = threading.Event()
        while time.monotonic() - acked_at < ACK_GROUP_S + SLACK_S:
            _, cursor = store.load()
            assert cursor is not None
            durable = {o for o in acked if o < cursor.mark_delete or o in cursor.acked}
            if durable == acked:
                break
            pause.wait(0.01)  # polling the cursor files, as another process would
        assert durable == acked, f"{len(acked - durable)} acknowledgments not on storage after {SLACK_S} s"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    # the killed consumer's claims expire with its lease; everything not acknowledged comes back once
    client = Client(str(tmp_path))
    try:
        consumer = client.subscribe(TOPIC, "s", consumer_type=ConsumerType.Shared)
        got = [int(consumer.receive(20_000).data()) for _ in range(N_MESSAGES - N_ACKS)]
        assert not set(got) & acked  # (values are offsets here: one topic, sent in order)
        assert sorted(got) == sorted(set(range(N_MESSAGES)) - acked)
    finally:
        client.close()
