"""Shared and Key_Shared subscriptions across real OS processes, with one consumer SIGKILLed.

Three ``consumer_worker.py`` processes consume one subscription while this process produces 3,000
messages over 30 keys (the second and third join while the first holds a backlog); when about half
the messages have been processed, the busiest consumer is killed with SIGKILL.  Everything goes
through storage: the processes agree on a consumer lease through ``<root>/_pubsub/broker.toml``.

The test is the clock of the victim's lease: the lease is long (a minute), so a live consumer keeps
its registration however loaded the machine is (with a 2 s lease, a dispatch round that read a
backlog from a busy S3 emulator outlasted it: live consumers were expired and their claims
redelivered, docs/DECISIONS.md D93), and once the victim is dead the test commits its lease as run
out.  The survivors' own dispatch rounds then find it expired and take its claims, as they would
when its lease ran out by itself; that expiry by the clock is covered with a ``ManualClock``
elsewhere (test_consumer_types.py, test_cursor.py).

What Pulsar guarantees, and what is asserted:

- at-least-once: every message is processed and acknowledged, the cursor ends fully acknowledged;
- the dead consumer's unacknowledged messages (its claims in the cursor at the moment it died,
  whether its application had seen them or not) are redelivered to a live consumer, each exactly
  once, with redelivery count 1; no other message is ever redelivered or handed to two consumers;
- Key_Shared only:
  - a key's messages are never processed by two consumers at the same time: per key, the intervals
    from ``receive()`` returning to ``acknowledge()`` returning never overlap (the killed consumer's
    last interval ends when it died);
  - per-key order: the key's messages, in the order they were received across all processes, are
    in offset order once the killed consumer's unacknowledged ones are taken out; those were
    processed again by the consumer that inherited the key, before any later message of the key
    (redelivery does not break the order among live consumers).  Messages the killed consumer
    processed but had not acknowledged *were* seen twice, which at-least-once allows.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
from moto_s3 import Root

from broker_core import Client
from broker_core.broker.broker import Broker
from broker_core.naming import TopicName
from broker_core.storage import file_io_for
from broker_core.subscription.cursor import Cursor

WORKER = Path(__file__).with_name("consumer_worker.py")
TOPIC = "persistent://public/default/work"
SUBSCRIPTION = "workers"
N_MESSAGES = 3000
N_KEYS = 30
LEASE_MS = 60_000  # no live consumer loses it, however starved; the test runs the victim's out itself
WORK_MS = 3  # simulated processing per message: consumers are the bottleneck, so a backlog builds
FIRST_WORK_MS = 8  # the first consumer is slower: it still holds claims when the others join
QUEUE = 100


@dataclass(frozen=True)
class Received:
    worker: str
    key: str
    offset: int  # the value is the send index, which is the offset (one producer, one partition)
    count: int
    t_ns: int


class Worker:
    """A ``consumer_worker.py`` process; a thread collects its stdout lines as they come."""

    def __init__(self, root: str, work: Path, name: str, sub_type: str, *, work_ms: int = WORK_MS) -> None:
        self.name = name
        self.stderr_path = work / f"{name}.stderr"
        args = {"root": root, "topic": TOPIC, "subscription": SUBSCRIPTION, "type": sub_type,
                "name": name, "queue": QUEUE, "work_ms": work_ms, "stop": str(work / "stop")}
        with open(self.stderr_path, "wb") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, str(WORKER), json.dumps(args)], stdout=subprocess.PIPE, stderr=stderr,
                text=True, bufsize=1,
            )
        self.lines: list[str] = []
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("ready"):
                self.ready.set()
            with self.lock:
                self.lines.append(line)

    def received_count(self) -> int:
        with self.lock:
            return sum(1 for line in self.lines if line.startswith("received "))

    def working(self) -> bool:
        """Whether it is processing a message it has not acknowledged yet: then it holds at least
        that message's claim (its acknowledgment waits for the ack group to be committed)."""
        with self.lock:
            return bool(self.lines) and self.lines[-1].startswith("received ")

    def events(self) -> tuple[list[Received], dict[tuple[int, int], int]]:
        """Its ``received`` events, and ack times keyed by (offset, index of the receive event)."""
        with self.lock:
            lines = list(self.lines)
        received: list[Received] = []
        acked: dict[tuple[int, int], int] = {}
        for line in lines:
            parts = line.split()
            if parts[0] == "received":
                received.append(Received(self.name, parts[1], int(parts[2]), int(parts[3]), int(parts[4])))
            elif parts[0] == "acked":
                # the worker acks each message right after processing it, before receiving the next
                assert received and received[-1].offset == int(parts[1]), line
                acked[(int(parts[1]), len(received) - 1)] = int(parts[2])
        return received, acked

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-4000:]


def cursor_of(root: str) -> Cursor:
    _, cursor = Broker.for_url(root).cursor_store(TopicName.parse(TOPIC), SUBSCRIPTION).load()
    assert cursor is not None
    return cursor


def run_out_lease(root: str, name: str) -> Cursor:
    """Commit consumer ``name``'s lease as run out; return the cursor as it was just before.

    Only the lease changes: the consumer stays registered with its claims until a survivor's next
    dispatch round expires it (``Cursor.expire_consumers``), the path a lease running out takes."""
    before: dict[str, Cursor] = {}

    def fn(cursor: Cursor | None) -> Cursor | None:
        assert cursor is not None and name in cursor.consumers, f"{name} was expired before the kill"
        before["cursor"] = Cursor.from_json(cursor.to_json())
        cursor.consumers[name].lease_expires_ms = 0
        return cursor

    Broker.for_url(root).cursor_store(TopicName.parse(TOPIC), SUBSCRIPTION).update(fn)
    return before["cursor"]


def run_with_a_kill(tmp_path: Path, sub_type: str, root: str | None = None) -> dict[str, object]:
    """Produce, consume in 3 processes, SIGKILL the busiest one midway (while it processes a message);
    return what happened.

    ``root``: a storage root URL (S3 is reached through the ``AWS_*`` environment); a folder by default."""
    root = root or str(tmp_path / "root")
    file_io_for(root).put_if_absent("_pubsub/broker.toml", f"consumerLeaseMs = {LEASE_MS}\n".encode())
    client = Client(root)
    producer = client.create_producer(TOPIC, batching_enabled=True, batching_max_publish_delay_ms=5,
                                      block_if_queue_full=True)
    # One consumer first; the other two join while messages flow and the first holds a backlog, so
    # Key_Shared hash ranges move away from a consumer that still has unacknowledged messages.
    workers = [Worker(root, tmp_path, "w0", sub_type, work_ms=FIRST_WORK_MS)]
    try:
        rng = random.Random(7)
        keys = [f"key-{rng.randrange(N_KEYS)}" for _ in range(N_MESSAGES)]
        assert workers[0].ready.wait(60), f"w0 did not subscribe:\n{workers[0].stderr()}"
        victim: Worker | None = None
        claims_at_kill: set[int] = set()
        acked_at_kill: set[int] = set()
        t_dead = 0
        sent = 0
        deadline = time.monotonic() + 120
        while victim is None or sent < N_MESSAGES:
            assert time.monotonic() < deadline, "the run did not finish in time"
            if sent < N_MESSAGES:  # ~1,000 messages a second, in batches of 50
                for i in range(sent, min(N_MESSAGES, sent + 50)):
                    producer.send_async(str(i).encode(), None, partition_key=keys[i])
                producer.flush()
                sent = min(N_MESSAGES, sent + 50)
                time.sleep(0.05)
            else:
                time.sleep(0.01)
            if len(workers) == 1 and sent >= 200:
                workers += [Worker(root, tmp_path, "w1", sub_type), Worker(root, tmp_path, "w2", sub_type)]
            all_ready = len(workers) == 3 and all(w.ready.is_set() for w in workers)
            working = [w for w in workers if w.working()]  # (one between two messages may hold no claim)
            if victim is None and all_ready and working and sum(w.received_count() for w in workers) >= N_MESSAGES // 2:
                victim = max(working, key=lambda w: w.received_count())
                victim.proc.send_signal(signal.SIGKILL)
                victim.proc.wait(10)
                t_dead = time.time_ns()
                cursor = run_out_lease(root, victim.name)  # the dead consumer's claims, frozen since the kill
                held = cursor.claims.get(victim.name)
                claims_at_kill = set(held.offsets()) if held is not None else set()
                acked_at_kill = {o for o in range(N_MESSAGES) if o < cursor.mark_delete or o in cursor.acked}
        assert victim is not None
        while cursor_of(root).mark_delete < N_MESSAGES:
            assert time.monotonic() < deadline, (
                f"not everything was acknowledged: markDelete {cursor_of(root).mark_delete}"
            )
            time.sleep(0.05)
        (tmp_path / "stop").touch()
        for worker in workers:
            if worker is not victim:
                assert worker.proc.wait(30) == 0, f"{worker.name} failed:\n{worker.stderr()}"
                worker.reader.join(10)
                assert worker.lines[-1] == "closed"
        victim.reader.join(10)
        table, offsets = Broker.for_url(root).topic_log(TopicName.parse(TOPIC)).read(0, N_MESSAGES)
        assert offsets.tolist() == list(range(N_MESSAGES))
        assert [v.decode() for v in table.column("value").to_pylist()] == [str(i) for i in range(N_MESSAGES)]
        return {"workers": workers, "victim": victim, "claims": claims_at_kill, "acked": acked_at_kill,
                "t_dead": t_dead, "keys": keys}
    finally:
        (tmp_path / "stop").touch()
        for worker in workers:
            if worker.proc.poll() is None:
                try:
                    worker.proc.wait(20)
                except subprocess.TimeoutExpired:
                    worker.proc.kill()
                    worker.proc.wait()
        producer.close()
        client.close()


def check_at_least_once(run: dict[str, object]) -> tuple[list[Received], dict[tuple[str, int, int], int]]:
    """Checks common to Shared and Key_Shared; returns every receive event and the ack times."""
    workers: list[Worker] = run["workers"]  # type: ignore[assignment]
    victim: Worker = run["victim"]  # type: ignore[assignment]
    claims: set[int] = run["claims"]  # type: ignore[assignment]
    acked_at_kill: set[int] = run["acked"]  # type: ignore[assignment]
    keys: list[str] = run["keys"]  # type: ignore[assignment]
    events: list[Received] = []
    ack_times: dict[tuple[str, int, int], int] = {}
    for worker in workers:
        received, acked = worker.events()
        events.extend(received)
        for (offset, index), t_ns in acked.items():
            ack_times[(worker.name, offset, received[index].t_ns)] = t_ns
    by_offset: dict[int, list[Received]] = defaultdict(list)
    for ev in events:
        assert ev.key == keys[ev.offset], f"offset {ev.offset} arrived with key {ev.key}"
        by_offset[ev.offset].append(ev)

    assert claims, "the killed consumer held no claims: the kill tested nothing"
    assert set(by_offset) == set(range(N_MESSAGES)), "some messages were never received"
    victim_seen = {ev.offset for ev in events if ev.worker == victim.name}
    # what the victim processed was either committed as acknowledged, or still claimed by it
    assert victim_seen <= acked_at_kill | claims
    for offset in range(N_MESSAGES):
        evs = by_offset[offset]
        if offset in claims:
            # redelivered once to a live consumer, after the kill, with redelivery count 1
            again = [ev for ev in evs if ev.worker != victim.name]
            assert len(again) == 1 and again[0].count == 1, f"offset {offset}: {evs}"
            assert again[0].t_ns > run["t_dead"], f"offset {offset} redelivered before the kill: {evs}"  # type: ignore[operator]
            mine = [ev for ev in evs if ev.worker == victim.name]
            assert len(mine) <= 1 and all(ev.count == 0 for ev in mine), f"offset {offset}: {evs}"
        else:
            assert len(evs) == 1 and evs[0].count == 0, f"offset {offset} delivered more than once: {evs}"
        for ev in evs:
            if ev.worker != victim.name:
                assert (ev.worker, ev.offset, ev.t_ns) in ack_times, f"{ev} was never acknowledged"
    return events, ack_times


@pytest.mark.slow
def test_shared_subscription_survives_a_killed_consumer(tmp_path: Path, any_root: Root) -> None:
    run = run_with_a_kill(tmp_path, "Shared", any_root.url)
    events, _ = check_at_least_once(run)
    survivors = {ev.worker for ev in events if ev.t_ns > run["t_dead"]}  # type: ignore[operator]
    assert len(survivors) == 2, f"work after the kill should be shared by both survivors, got {survivors}"


@pytest.mark.slow
def test_key_shared_subscription_keeps_keys_exclusive_and_ordered_across_a_kill(tmp_path: Path) -> None:
    run = run_with_a_kill(tmp_path, "KeyShared")
    events, ack_times = check_at_least_once(run)
    victim: Worker = run["victim"]  # type: ignore[assignment]
    claims: set[int] = run["claims"]  # type: ignore[assignment]
    t_dead: int = run["t_dead"]  # type: ignore[assignment]
    by_key: dict[str, list[Received]] = defaultdict(list)
    for ev in sorted(events, key=lambda e: e.t_ns):
        by_key[ev.key].append(ev)
    for key, evs in by_key.items():
        # never two consumers processing one key at a time
        busy_until, busy_with = 0, ""
        for ev in evs:
            end = ack_times.get((ev.worker, ev.offset, ev.t_ns), t_dead if ev.worker == victim.name else None)
            assert end is not None, f"{ev} was never acknowledged"
            assert ev.worker == busy_with or ev.t_ns > busy_until, (
                f"key {key}: {ev.worker} received offset {ev.offset} while {busy_with} was still processing "
                f"a message of the key ({(busy_until - ev.t_ns) / 1e6:.3f} ms overlap)"
            )
            if end > busy_until:
                busy_until, busy_with = end, ev.worker
        # per-key order among live consumers, the victim's unacknowledged (redelivered) ones taken out
        order = [ev.offset for ev in evs if not (ev.worker == victim.name and ev.offset in claims)]
        assert order == sorted(order), f"key {key} processed out of order: {order}"
        assert len(order) == len(set(order))
    moved = {ev.key for ev in events if ev.offset in claims}
    assert moved, "no key moved from the killed consumer"
