"""How consumers and readers learn of other processes' commits: inotify, polling, idle backoff.

"Another process" is played by a ``TopicLog`` handle of our own on the same root: it is not the
broker's shared handle, so its commits wake nobody in this process except through storage, exactly
like a commit of another process.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from broker_core import BrokerConfig, Client, ConsumerType, InitialPosition, MessageId
from broker_core.broker.broker import notifier_for
from broker_core.broker.tenancy import topic_dir
from broker_core.naming import TopicName
from broker_core.producer.bulk import to_segment_rows
from broker_core.storage import file_io_for
from broker_core.topic.topic_log import TopicLog
from broker_core.topic.waiters import Waiters
from broker_core.topic.watch import InotifyNotifier, PollingNotifier, PollSchedule

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux-only")
VERSION = "00000000000000000001.json"


class Counter:
    def __init__(self) -> None:
        self.calls = 0
        self.versions: list[int] = []
        self.event = threading.Event()

    def __call__(self, version: int) -> None:
        self.calls += 1
        self.versions.append(version)
        self.event.set()


@pytest.fixture
def notifier() -> Iterator[InotifyNotifier]:
    n = InotifyNotifier()
    yield n
    n.close()


@linux_only
def test_inotify_calls_back_for_new_version_files_only(tmp_path: Path, notifier: InotifyNotifier) -> None:
    seen = Counter()
    unwatch = notifier.watch(str(tmp_path), seen)
    (tmp_path / ".00000000000000000001.json.abc.tmp").write_bytes(b"{}")  # a commit's temp file: no
    (tmp_path / "_last_checkpoint").write_bytes(b"{}")
    os.link(tmp_path / ".00000000000000000001.json.abc.tmp", tmp_path / VERSION)  # put-if-absent: yes
    assert seen.event.wait(5)
    assert seen.versions == [1]
    unwatch()
    unwatch()  # idempotent
    seen.event.clear()
    (tmp_path / "00000000000000000002.json").write_bytes(b"{}")
    (tmp_path / "00000000000000000003.json").write_bytes(b"{}")
    # a callback still registered for the same directory proves the events were delivered
    other = Counter()
    notifier.watch(str(tmp_path), other)
    (tmp_path / "00000000000000000004.json").write_bytes(b"{}")
    assert other.event.wait(5)
    assert seen.calls == 1


@linux_only
def test_inotify_shares_one_watch_per_directory(tmp_path: Path, notifier: InotifyNotifier) -> None:
    first, second = Counter(), Counter()
    stop_first = notifier.watch(str(tmp_path), first)
    notifier.watch(str(tmp_path), second)
    stop_first()  # the second watcher keeps the kernel watch alive
    (tmp_path / VERSION).write_bytes(b"{}")
    assert second.event.wait(5)
    assert first.calls == 0


@linux_only
def test_inotify_missing_directory_falls_back_to_polling(tmp_path: Path, notifier: InotifyNotifier) -> None:
    unwatch = notifier.watch(str(tmp_path / "missing"), Counter())
    unwatch()  # a no-op, and no error


def test_polling_notifier_never_calls_back(tmp_path: Path) -> None:
    seen = Counter()
    notifier = PollingNotifier()
    notifier.watch(str(tmp_path), seen)()
    assert not notifier.pushes and seen.calls == 0


def test_notifier_choice_follows_the_config(tmp_path: Path) -> None:
    io = file_io_for(str(tmp_path))
    assert isinstance(notifier_for(io, BrokerConfig(file_system_notifications_enabled=False)), PollingNotifier)
    chosen = notifier_for(io, BrokerConfig())
    assert chosen.pushes == sys.platform.startswith("linux")


def test_waiters_watch_only_while_somebody_waits() -> None:
    started: list[Any] = []
    stopped: list[Any] = []

    def start(callback: Any) -> Any:
        started.append(callback)
        return lambda: stopped.append(callback)

    waiters = Waiters()
    waiters.watch_with(start)
    assert started == []
    first, second = threading.Event(), threading.Event()
    waiters.add_waiter(first)
    waiters.add_waiter(second)
    assert len(started) == 1
    waiters.notify(written=7)  # this process committed version 7 (and woke everyone then)
    first.clear()
    second.clear()
    started[0](7)  # ... so its file-system notification wakes nobody again
    assert not first.is_set() and not second.is_set()
    started[0](8)  # another process's version wakes every waiter
    assert first.is_set() and second.is_set()
    waiters.remove_waiter(first)
    assert stopped == []
    waiters.remove_waiter(second)
    assert len(stopped) == 1


def test_poll_schedule_backs_off_to_its_cap_and_resets(monkeypatch: pytest.MonkeyPatch) -> None:
    from broker_core.topic import watch

    now = [1000.0]
    monkeypatch.setattr(watch, "time", type("FakeTime", (), {"monotonic": staticmethod(lambda: now[0])}))
    schedule = PollSchedule(0.01, 0.1)
    assert schedule.grace_s == 0.05  # half the cap
    seen = []
    for _ in range(6):
        seen.append(schedule.interval_s)
        schedule.idle()
    assert seen == pytest.approx([0.01, 0.02, 0.04, 0.08, 0.1, 0.1])  # never active yet: backs off at once
    schedule.active()
    assert schedule.interval_s == 0.01
    for _ in range(3):  # within the grace after activity: still the base interval
        now[0] += 0.01
        schedule.idle()
        assert schedule.interval_s == 0.01
    now[0] += 0.03  # grace over: doubling again, up to the cap
    seen = []
    for _ in range(4):
        schedule.idle()
        seen.append(schedule.interval_s)
    assert seen == pytest.approx([0.02, 0.04, 0.08, 0.1])
    assert PollSchedule(0.5, 0.1).max_s == 0.5  # a cap below the base interval never shortens it


# --- consumers and readers, end to end --------------------------------------------------------------


def foreign_append(root: Path, topic: str, value: bytes) -> float:
    """Commit one message as another process would; returns the time it became visible."""
    io = file_io_for(str(root), fsync=False)
    log = TopicLog(io, topic_dir(TopicName.parse(topic)))
    rows, _ = to_segment_rows(pa.table({"value": [value]}), publish_time_ms=int(time.time() * 1000),
                              max_message_size=1 << 20, default_producer="elsewhere")
    log.append(rows, layout=[1])
    return time.monotonic()


@linux_only
def test_consumer_and_reader_wake_on_another_process_commit(tmp_path: Path) -> None:
    """With polls a minute apart, only a notification can deliver within the test's bound."""
    config = BrokerConfig(fsync_enabled=False, new_entries_check_max_delay_millis=60_000)
    client = Client(str(tmp_path), broker_config=config, reader_poll_interval_ms=60_000)
    try:
        consumer = client.subscribe("t", "s", consumer_type=ConsumerType.Exclusive,
                                    initial_position=InitialPosition.Earliest)
        reader = client.create_reader("t", start_message_id=MessageId.earliest)
        foreign_append(tmp_path, "t", b"first")  # (the consumer's thread may be mid-round: catch it asleep)
        assert consumer.receive(10_000).data() == b"first"
        assert reader.read_next(10_000).data() == b"first"
        committed = foreign_append(tmp_path, "t", b"second")
        assert consumer.receive(10_000).data() == b"second"
        assert reader.read_next(10_000).data() == b"second"
        assert time.monotonic() - committed < 10
    finally:
        client.close()


@pytest.mark.parametrize("consumer_type", [ConsumerType.Exclusive, ConsumerType.Shared])
def test_idle_consumer_backs_off_and_still_gets_the_next_message(tmp_path: Path, consumer_type: Any) -> None:
    """Polling only (as on an object store): an idle consumer polls ever less often, down to one
    round per cap, and a message committed elsewhere still arrives.  (A Shared consumer's
    delayed-delivery tick must not count as activity.)"""
    cap_ms = 200
    config = BrokerConfig(fsync_enabled=False, file_system_notifications_enabled=False,
                          new_entries_check_max_delay_millis=cap_ms)
    client = Client(str(tmp_path), broker_config=config, reader_poll_interval_ms=5)
    try:
        consumer = client.subscribe("t", "s", consumer_type=consumer_type,
                                    initial_position=InitialPosition.Earliest)
        rounds = 0
        tick = consumer._tick

        def counting_tick() -> None:
            nonlocal rounds
            rounds += 1
            tick()

        consumer._tick = counting_tick  # type: ignore[method-assign]
        idle_s = 1.5
        threading.Event().wait(idle_s)  # measuring a rate over a fixed span, not waiting for an event
        # without backoff: ~idle_s / 5 ms = 200 rounds; with it: the grace after the subscription's
        # first round (half the cap, at 5 ms), a few to reach the cap, then one per cap
        assert rounds <= 8 + (cap_ms / 2) / 5 + idle_s * 1000 / cap_ms
        assert consumer._schedule.interval_s == pytest.approx(cap_ms / 1000)
        foreign_append(tmp_path, "t", b"after-idle")
        assert consumer.receive(10_000).data() == b"after-idle"
    finally:
        client.close()


@linux_only
def test_a_forked_child_gets_its_own_notifier(tmp_path: Path) -> None:
    from broker_core.topic import watch

    parent = watch.local_notifier(enabled=True)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a working notifier of its own, not the parent's (whose thread is gone)
        ok = False
        try:
            child = watch.local_notifier(enabled=True)
            seen = Counter()
            child.watch(str(tmp_path), seen)
            (tmp_path / VERSION).write_bytes(b"{}")
            ok = child is not parent and seen.event.wait(10)
        finally:
            os.write(write_end, b"1" if ok else b"0")
            os._exit(0)
    os.close(write_end)
    verdict = os.read(read_end, 1)
    os.waitpid(pid, 0)
    assert verdict == b"1"
