"""The asyncio client: what the parametrized contract tests cannot show.

No thread per pending call, nothing blocking on the loop, nothing lost to a cancelled receive,
the same errors as the sync client.  (The contract tests marked ``BOTH_CLIENTS`` in
``test_consumer.py``, ``test_producer.py`` and ``test_client.py`` run on this client too.)
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

import broker_core.asyncio as aio
from broker_core import (
    AlreadyClosed,
    BrokerConfig,
    ConsumerBusy,
    InitialPosition,
    InvalidConfiguration,
    MessageId,
    PayloadTypeError,
    ProducerFenced,
    PulsarException,
    Result,
    StringSchema,
    Timeout,
)
from broker_core.asyncio.pump import Pump
from broker_core.producer.registry import ProducerAccessMode
from broker_core.storage import LocalFileIO

T = TypeVar("T")
EARLIEST = InitialPosition.Earliest
WAIT_S = 10.0


def run(tmp_path: Path, body: Callable[[aio.Client], Coroutine[Any, Any, T]]) -> T:
    """Run ``body(client)`` on a fresh event loop, bounded in time, and close the client."""

    async def main() -> T:
        client = aio.Client(str(tmp_path), broker_config=BrokerConfig(fsync_enabled=False))
        try:
            return await asyncio.wait_for(body(client), 60)
        finally:
            await client.close()

    return asyncio.run(main())


def test_round_trip_with_the_pulsar_asyncio_shape(tmp_path: Path) -> None:
    async def body(client: aio.Client) -> None:
        producer = await client.create_producer("orders", schema=StringSchema())
        consumer = await client.subscribe("orders", "billing", initial_position=EARLIEST, schema=StringSchema())
        msg_id = await producer.send("hello", properties={"k": "v"})
        assert isinstance(msg_id, MessageId)
        msg = await asyncio.wait_for(consumer.receive(), WAIT_S)
        assert (msg.value(), msg.properties(), msg.message_id()) == ("hello", {"k": "v"}, msg_id)
        await consumer.acknowledge(msg)
        assert producer.topic() == consumer.topic() == "persistent://public/default/orders"
        assert consumer.subscription_name() == "billing"
        assert producer.last_sequence_id() == 0
        assert await client.get_topic_partitions("orders") == ["persistent://public/default/orders"]
        await consumer.close()
        await producer.close()
        assert not consumer.is_connected() and not producer.is_connected()

    run(tmp_path, body)


def test_a_thousand_pending_receives_do_not_make_a_thousand_threads(tmp_path: Path) -> None:
    async def body(client: aio.Client) -> None:
        producer = await client.create_producer("t")
        consumer = await client.subscribe("t", "s", initial_position=EARLIEST)
        await producer.send(b"warm-up")  # every thread the client needs is started by now
        await consumer.acknowledge(await asyncio.wait_for(consumer.receive(), WAIT_S))
        before = threading.active_count()
        receives = [asyncio.ensure_future(consumer.receive()) for _ in range(1000)]
        await asyncio.sleep(0)  # every receive has started and is waiting
        assert sum(not r.done() for r in receives) == 1000
        assert threading.active_count() <= before + 1  # at most the consumer's pump thread
        sent = await asyncio.gather(*[producer.send(b"m%d" % i) for i in range(1000)])
        msgs = await asyncio.wait_for(asyncio.gather(*receives), WAIT_S)
        assert [m.data() for m in msgs] == [b"m%d" % i for i in range(1000)]  # in call order
        assert [m.message_id() for m in msgs] == sent
        assert threading.active_count() <= before + 2  # plus the send lane's thread

    run(tmp_path, body)


def test_a_cancelled_receive_loses_no_message(tmp_path: Path) -> None:
    async def body(client: aio.Client) -> None:
        producer = await client.create_producer("t")
        consumer = await client.subscribe("t", "s", initial_position=EARLIEST)
        for _ in range(3):
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(consumer.receive(), 0.05)
        await producer.send(b"only")
        msg = await asyncio.wait_for(consumer.receive(), WAIT_S)
        assert msg.data() == b"only"

    run(tmp_path, body)


def test_pump_hands_a_value_taken_for_a_cancelled_waiter_to_the_next_one() -> None:
    """The race itself, made deterministic: the source yields only once the first waiter is gone."""
    first_cancelled = threading.Event()
    values = iter([b"a", b"b"])

    def take(timeout_ms: int) -> bytes:
        first_cancelled.wait(WAIT_S)
        return next(values)

    async def main() -> list[bytes]:
        pump: Pump[bytes] = Pump(take, name="test-pump")
        first = pump.get()
        await asyncio.sleep(0)
        first.cancel()
        await asyncio.sleep(0)  # the cancellation is processed
        first_cancelled.set()
        await asyncio.sleep(0.01)  # let the thread post what it took (to nobody)
        got = [await asyncio.wait_for(pump.get(), WAIT_S), await asyncio.wait_for(pump.get(), WAIT_S)]
        pump.stop()
        return got

    assert asyncio.run(main()) == [b"a", b"b"]


def test_storage_is_never_touched_on_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file operation of a whole session (create, send, receive, ack by id, seek, read,
    unsubscribe, close) happens on a thread other than the loop's.  Sends queue on the loop only
    while the producer's cached policies are fresh; a stale cache sends them through the lane."""
    calls: list[tuple[str, int]] = []
    loop_running = threading.Event()

    def spy(name: str) -> None:
        original = getattr(LocalFileIO, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if loop_running.is_set():
                calls.append((name, threading.get_ident()))
            return original(*args, **kwargs)

        monkeypatch.setattr(LocalFileIO, name, wrapper)

    for name in ("read_bytes", "exists", "stat", "put_if_absent", "write_new", "replace", "list_dir", "delete",
                 "open_input", "abs_path"):  # (small local segments are opened by path: ``segment._open``)
        spy(name)
    # constructed before the loop runs: the constructor opens the root, as the sync one does
    client = aio.Client(str(tmp_path), broker_config=BrokerConfig(fsync_enabled=False))

    async def body() -> int:
        loop_running.set()
        producer = await client.create_producer("t")
        ids = [await producer.send(b"a")]
        producer._producer._policy_expires = 0.0  # stale: the next send must not re-read them here
        client._client._broker.policies._cache.clear()  # (nor find them in the store's own cache)
        ids.append(await producer.send(b"b"))
        consumer = await client.subscribe(["t", "u"], "s", initial_position=EARLIEST)
        first = await asyncio.wait_for(consumer.receive(), WAIT_S)
        await consumer.acknowledge(first.message_id())
        await consumer.negative_acknowledge(first.message_id())
        await consumer.seek(MessageId.earliest)
        await consumer.get_last_message_id()
        reader = await client.create_reader("t", MessageId.earliest)
        assert await reader.has_message_available()
        assert (await asyncio.wait_for(reader.read_next(), WAIT_S)).data() == b"a"
        await reader.close()
        await consumer.close()
        await producer.close()
        await client.close()
        loop_running.clear()
        return threading.get_ident()

    loop_thread = asyncio.run(asyncio.wait_for(body(), 60))
    assert {name for name, _ in calls} >= {"read_bytes", "put_if_absent", "abs_path"}
    on_loop = sorted({name for name, ident in calls if ident == loop_thread})
    assert on_loop == [], f"storage calls on the event loop: {on_loop}"


def test_errors_are_the_sync_clients(tmp_path: Path) -> None:
    async def body(client: aio.Client) -> None:
        producer = await client.create_producer("t")
        with pytest.raises(PayloadTypeError):
            await producer.send("not bytes")
        with pytest.raises(InvalidConfiguration, match="partition_key"):
            await producer.send(b"x", partition_key=5)
        with pytest.raises(InvalidConfiguration, match="receiver_queue_size"):
            await client.subscribe("t", "s", receiver_queue_size="10")
        with pytest.raises(ProducerFenced) as fenced:
            await client.create_producer("t", access_mode=ProducerAccessMode.Exclusive)
        assert fenced.value.error() == Result.ProducerFenced  # pulsar.asyncio's PulsarException.error()
        first = await client.subscribe("t", "ex", initial_position=EARLIEST)
        with pytest.raises(ConsumerBusy):
            await client.subscribe("t", "ex")
        pending = asyncio.ensure_future(first.receive())
        await asyncio.sleep(0)
        await first.close()
        with pytest.raises(AlreadyClosed):
            await asyncio.wait_for(pending, WAIT_S)
        with pytest.raises(AlreadyClosed):
            await first.receive()
        await producer.close()
        with pytest.raises(AlreadyClosed):
            await producer.send(b"x")
        assert aio.PulsarException is PulsarException
        listened = await client.subscribe("t", "l", message_listener=lambda c, m: None)
        with pytest.raises(InvalidConfiguration, match="message_listener"):
            await asyncio.wait_for(listened.receive(), WAIT_S)

    run(tmp_path, body)


@pytest.mark.parametrize("target", [True, "yesterday", 1.5, None])
def test_a_bad_seek_target_is_refused_alike_by_sync_and_asyncio_handles(tmp_path: Path, target: Any) -> None:
    """One check (``client.args.check_seek_target``): the same error from the consumer, the reader and
    their asyncio forms, and an asyncio handle keeps the message it had taken ahead."""
    async def body(client: aio.Client) -> list[str]:
        producer = await client.create_producer("t")
        await producer.send(b"m")
        consumer = await client.subscribe("t", "s", initial_position=EARLIEST)
        reader = await client.create_reader("t", MessageId.earliest)
        messages = []
        for handle in (consumer, reader, consumer._consumer, reader._reader):
            with pytest.raises(InvalidConfiguration, match="seek takes a MessageId") as info:
                result = handle.seek(target)
                if asyncio.iscoroutine(result):
                    await result
            messages.append(str(info.value))
        assert (await consumer.receive()).data() == b"m" and (await reader.read_next()).data() == b"m"
        return messages

    assert len(set(run(tmp_path, body))) == 1


def test_send_timeout_raises_timeout(tmp_path: Path) -> None:
    async def body(client: aio.Client) -> None:
        producer = await client.create_producer("t", send_timeout_millis=50)
        producer._producer._enqueue = lambda *args, **kwargs: None  # type: ignore[method-assign]  # never done
        with pytest.raises(Timeout, match="send timeout"):
            await producer.send(b"x")

    run(tmp_path, body)


def test_batching_is_on_by_default_so_concurrent_sends_share_entries(tmp_path: Path) -> None:
    async def body(client: aio.Client) -> None:
        producer = await client.create_producer("t", batching_max_publish_delay_ms=50)
        ids = await asyncio.gather(*[producer.send(b"m%d" % i) for i in range(20)])
        assert ids == sorted(ids)
        assert all(i.batch_index() >= 0 for i in ids)
        assert len({i.entry_id() for i in ids}) < 20

    run(tmp_path, body)


def test_pattern_topic_and_reader(tmp_path: Path) -> None:
    async def body(client: aio.Client) -> None:
        for name in ("orders-eu", "orders-us", "audit"):
            producer = await client.create_producer(name)
            await producer.send(name.encode())
            await producer.close()
        consumer = await client.subscribe(
            "persistent://public/default/orders-.*", "s", initial_position=EARLIEST, is_pattern_topic=True
        )
        got = {(await asyncio.wait_for(consumer.receive(), WAIT_S)).data() for _ in range(2)}
        assert got == {b"orders-eu", b"orders-us"}
        with pytest.raises(InvalidConfiguration, match="is_pattern_topic"):
            await client.subscribe(["a", "b"], "s", is_pattern_topic=True)
        reader = await client.create_reader("audit", MessageId.earliest)
        assert (await asyncio.wait_for(reader.read_next(), WAIT_S)).data() == b"audit"
        assert not await reader.has_message_available()
        await reader.seek(MessageId.earliest)
        assert (await asyncio.wait_for(reader.read_next(), WAIT_S)).data() == b"audit"
        await reader.close()
        with pytest.raises(AlreadyClosed):
            await reader.read_next()
        assert re.match(r"persistent://", reader.topic())

    run(tmp_path, body)
