"""Where a consumer's reads run (D117): on a folder, on the thread that calls ``receive`` when its
queue runs dry; on an object store, read ahead by the dispatcher.  A read whose messages never reach
the queue (a storage error, an interrupt) is read again, never skipped."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from moto_s3 import Root

from broker_core import BrokerConfig, Client, ConsumerType, InitialPosition
from broker_core.client.subscription_part import SubscriptionPart
from broker_core.errors import StorageUnavailable

TOPIC = "reads"
N = 30
EARLIEST = InitialPosition.Earliest
WAIT_MS = 10_000
QUIET_S = 0.3  # how long "nothing is read" is watched


@pytest.fixture
def client(any_root: Root) -> Iterator[Client]:
    c = Client(any_root.url, storage_options=any_root.storage_options, broker_config=BrokerConfig(fsync_enabled=False))
    yield c
    c.close()


@pytest.fixture
def quiet_client(any_root: Root) -> Iterator[Client]:
    """A client whose drained dispatchers poll once a minute: within a test, only a ``receive`` (or a
    commit) reads."""
    c = Client(any_root.url, storage_options=any_root.storage_options, reader_poll_interval_ms=60_000,
               broker_config=BrokerConfig(fsync_enabled=False))
    yield c
    c.close()


def fill(client: Client) -> list[bytes]:
    producer = client.create_producer(TOPIC, batching_enabled=False)
    values = [f"m{i}".encode() for i in range(N)]
    for value in values:
        producer.send(value)
    producer.close()
    return values


def fail_once(monkeypatch: pytest.MonkeyPatch, error: BaseException,
              only: Callable[[], bool] = lambda: True) -> list[str]:
    """Make the first ``messages_for`` that ``only`` allows raise ``error``; returns the threads it hit."""
    real = SubscriptionPart.messages_for
    hit: list[str] = []

    def messages_for(self: SubscriptionPart, *args: Any, **kwargs: Any) -> Any:
        if not hit and only():
            hit.append(threading.current_thread().name)
            raise error
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SubscriptionPart, "messages_for", messages_for)
    return hit


@pytest.mark.parametrize("consumer_type", [ConsumerType.Exclusive, ConsumerType.Failover, ConsumerType.Shared])
def test_a_read_that_fails_is_read_again_not_skipped(client: Client, monkeypatch: pytest.MonkeyPatch,
                                                     consumer_type: ConsumerType) -> None:
    values = fill(client)
    hit = fail_once(monkeypatch, StorageUnavailable("injected: the store did not answer"))
    consumer = client.subscribe(TOPIC, "sub", consumer_type=consumer_type, initial_position=EARLIEST,
                                receiver_queue_size=10)
    got = []
    for _ in range(N):
        msg = consumer.receive(WAIT_MS)
        got.append(msg.data())
        consumer.acknowledge(msg)
    assert hit
    if consumer_type == ConsumerType.Shared:  # the claimed messages were given back, then handed out again
        assert sorted(got) == sorted(values)
    else:
        assert got == values


def test_an_interrupted_receive_loses_nothing(quiet_client: Client, any_root: Root,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    if any_root.is_s3:
        pytest.skip("an object store is read ahead: which thread meets the interrupt is not fixed")
    client = quiet_client
    values = fill(client)
    on_main = threading.main_thread()
    hit = fail_once(monkeypatch, KeyboardInterrupt(), only=lambda: threading.current_thread() is on_main)
    consumer = client.subscribe(TOPIC, "sub", initial_position=EARLIEST, receiver_queue_size=10)
    got: list[bytes] = []
    with pytest.raises(KeyboardInterrupt):
        while len(got) < N:  # the dispatcher fills the queue once; the next read is this thread's own
            got.append(consumer.receive(WAIT_MS).data())
    assert hit == [threading.main_thread().name]
    while len(got) < N:
        got.append(consumer.receive(WAIT_MS).data())
    assert got == values


def test_a_folder_is_read_when_the_queue_runs_dry_and_an_object_store_ahead(
        quiet_client: Client, any_root: Root, monkeypatch: pytest.MonkeyPatch) -> None:
    client = quiet_client
    fill(client)
    real = SubscriptionPart.messages_for
    readers: list[str] = []

    def messages_for(self: SubscriptionPart, *args: Any, **kwargs: Any) -> Any:
        readers.append(threading.current_thread().name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SubscriptionPart, "messages_for", messages_for)
    consumer = client.subscribe(TOPIC, "sub", initial_position=EARLIEST, receiver_queue_size=4)
    for _ in range(3):  # one message left queued: below half the queue
        consumer.receive(WAIT_MS)
    reads = len(readers)
    me = threading.current_thread().name
    if any_root.is_s3:  # the dispatcher reads on, unasked
        deadline = time.monotonic() + WAIT_MS / 1000
        while len(readers) == reads and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(readers) > reads and readers[-1] != me
    else:  # nothing is read until the queue is empty, then by the thread that receives
        time.sleep(QUIET_S)
        assert len(readers) == reads
        consumer.receive(WAIT_MS)
        assert len(readers) == reads
        consumer.receive(WAIT_MS)
        assert readers[reads:] == [me]
