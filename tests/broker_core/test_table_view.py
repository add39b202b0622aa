"""``Client.create_table_view``: contents from the compacted view and the log, live updates, tombstones,
listeners, other processes' writes, and the official API's shape."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from processes import run_python
from records import V1, V2

from broker_core import AlreadyClosed, BrokerConfig, Client, StringSchema
from broker_core import schema as m
from broker_core.broker.broker import Broker
from broker_core.client import table_view
from broker_core.jobs.compaction import compact_topic


@pytest.fixture
def client(tmp_path: Path) -> Any:
    c = Client(str(tmp_path))
    yield c
    c.close()


def eventually(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait for ``check`` (updates arrive on the view's background thread)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)


def produce(client: Client, topic: str, messages: list[tuple[str | None, bytes | None]]) -> None:
    producer = client.create_producer(topic)
    for key, value in messages:
        producer.send(value, partition_key=key)
    producer.close()


def test_the_view_holds_the_latest_value_per_key(tmp_path: Path, client: Client) -> None:
    produce(client, "t", [("a", b"1"), ("b", b"2"), ("a", b"3"), (None, b"keyless"), ("c", b""), ("b", None)])
    compact_topic(Broker.for_url(str(tmp_path)), "t")
    produce(client, "t", [("c", b"4"), ("d", b"5"), (None, b"keyless-2")])  # after the horizon: from the log
    view = client.create_table_view("t")
    assert dict(view.items()) == {"a": b"3", "c": b"4", "d": b"5"}
    assert len(view) == 3 and "a" in view and "b" not in view
    assert view.get("a") == b"3" and view.get("b") is None
    assert sorted(view.keys()) == ["a", "c", "d"] == sorted(view)
    assert sorted(view.values()) == [b"3", b"4", b"5"]
    seen: dict[str, bytes] = {}
    view.for_each(seen.__setitem__)
    assert seen == {"a": b"3", "c": b"4", "d": b"5"}
    assert str(view) == repr(view) == "TableView(topic=t)"


def test_an_uncompacted_topic_and_an_empty_value(client: Client) -> None:
    produce(client, "t", [("a", b"1"), ("a", b"")])
    view = client.create_table_view("t", subscription_name="tv")
    assert dict(view.items()) == {"a": b""}  # an empty payload is a value; only null is a tombstone
    assert str(view) == "TableView(topic=t, subscription=tv)"


def test_updates_and_tombstones_arrive_and_listeners_hear_them(client: Client) -> None:
    produce(client, "t", [("a", b"1"), ("b", b"2")])
    view = client.create_table_view("t")
    heard: list[tuple[str, Any]] = []
    listened: list[tuple[str, Any]] = []
    view.for_each_and_listen(lambda k, v: heard.append((k, v)))
    view.listen(lambda k, v: listened.append((k, v)))
    assert sorted(heard) == [("a", b"1"), ("b", b"2")]
    produce(client, "t", [("a", b"10"), ("b", None), (None, b"ignored"), ("c", b"3")])
    eventually(lambda: len(listened) == 3)
    assert heard[2:] == listened == [("a", b"10"), ("b", None), ("c", b"3")]
    assert dict(view.items()) == {"a": b"10", "c": b"3"}


def test_in_process_updates_are_pushed(client: Client) -> None:
    view = client.create_table_view("t")
    arrived = threading.Event()
    view.listen(lambda k, v: arrived.set())
    producer = client.create_producer("t")
    started = time.monotonic()
    producer.send(b"v", partition_key="k")
    assert arrived.wait(2.0)
    assert time.monotonic() - started < 1.0
    assert view.get("k") == b"v"


def test_another_processs_writes_are_polled_and_refresh_reads_them_at_once(tmp_path: Path) -> None:
    client = Client(str(tmp_path), reader_poll_interval_ms=10_000)  # the background poll will not help
    try:
        view = client.create_table_view("t")
        code = (
            "import sys\nfrom broker_core import Client\n"
            f"c = Client({str(tmp_path)!r})\np = c.create_producer('t')\n"
            "p.send(b'from-afar', partition_key='far')\nc.close()\n"
        )
        run_python("-c", code, timeout_s=60)
        view.refresh()
        assert view.get("far") == b"from-afar"
    finally:
        client.close()


def test_a_compaction_while_the_view_is_open_changes_nothing(tmp_path: Path, client: Client) -> None:
    produce(client, "t", [(f"k{i % 5}", f"{i}".encode()) for i in range(20)])
    view = client.create_table_view("t")
    before = dict(view.items())
    compact_topic(Broker.for_url(str(tmp_path)), "t")
    produce(client, "t", [("k0", b"new")])
    eventually(lambda: view.get("k0") == b"new")
    assert dict(view.items()) == {**before, "k0": b"new"}


def test_a_schema_decodes_values(client: Client) -> None:
    producer = client.create_producer("t", schema=StringSchema())
    producer.send("hello", partition_key="greeting")
    view = client.create_table_view("t", schema=StringSchema())
    assert view.get("greeting") == "hello"
    assert view.items() == [("greeting", "hello")]


def test_values_are_resolved_from_the_schema_version_they_were_written_with(
    tmp_path: Path, client: Client
) -> None:
    """A value written as V1 reads as V2 (its default filled in), in the compacted part, in the log,
    and in what listeners hear, after the topic's schema evolved to V2."""
    client.create_producer("evolving", schema=m.AvroSchema(V1)).send(V1(id=1, name="a"), partition_key="a")
    compact_topic(Broker.for_url(str(tmp_path)), "evolving")
    client.create_producer("evolving", schema=m.AvroSchema(V1)).send(V1(id=2, name="b"), partition_key="b")
    v2 = client.create_producer("evolving", schema=m.AvroSchema(V2))
    v2.send(V2(id=3, name="c", score=3.0), partition_key="c")
    view = client.create_table_view("evolving", schema=m.AvroSchema(V2))
    heard: dict[str, Any] = {}
    view.listen(heard.__setitem__)
    assert dict(view.items()) == {"a": V2(id=1, name="a", score=0.5), "b": V2(id=2, name="b", score=0.5),
                                  "c": V2(id=3, name="c", score=3.0)}
    client.create_producer("evolving", schema=m.AvroSchema(V1)).send(V1(id=4, name="d"), partition_key="d")
    eventually(lambda: "d" in heard)
    assert heard["d"] == view.get("d") == V2(id=4, name="d", score=0.5)
    view.close()


def test_a_partitioned_topic(tmp_path: Path, client: Client) -> None:
    Broker.for_url(str(tmp_path)).admin.create_partitioned_topic("p", 3)
    produce(client, "p", [(f"k{i}", f"{i}".encode()) for i in range(12)] + [("k1", None)])
    view = client.create_table_view("p")
    assert len(view) == 11 and "k1" not in view and view.get("k7") == b"7"


def test_close_stops_updates_and_the_client_closes_its_views(client: Client) -> None:
    view = client.create_table_view("t")
    other = client.create_table_view("t")
    view.close()
    view.close()  # idempotent
    produce(client, "t", [("a", b"1")])
    eventually(lambda: other.get("a") == b"1")
    assert view.get("a") is None
    with pytest.raises(AlreadyClosed):
        view.refresh()
    client.close()
    with pytest.raises(AlreadyClosed):
        other.refresh()


def test_a_failing_listener_does_not_stop_the_view(client: Client) -> None:
    view = client.create_table_view("t")

    def boom(key: str, value: Any) -> None:
        raise RuntimeError("listener bug")

    view.listen(boom)
    produce(client, "t", [("a", b"1"), ("a", b"2")])
    eventually(lambda: view.get("a") == b"2")


@pytest.mark.parametrize(("args", "name"), [((1,), "topic"), (("t", 5), "subscription_name"),
                                            (("t", None, "schema"), "schema")])
def test_wrongly_typed_arguments_are_refused(client: Client, args: tuple[Any, ...], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        client.create_table_view(*args)


def test_a_chunked_message_is_one_value_even_when_its_chunks_arrive_in_two_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(table_view, "_READ_ROWS", 3)  # 4 chunks cannot come in one read
    client = Client(str(tmp_path), broker_config=BrokerConfig(max_message_size=1000))
    try:
        producer = client.create_producer("t", chunking_enabled=True)
        big = bytes(range(256)) * 14  # 4 chunks
        producer.send(b"small", partition_key="a")
        producer.send(big, partition_key="big")
        view = client.create_table_view("t")
        assert dict(view.items()) == {"a": b"small", "big": big}
        producer.send(big[::-1], partition_key="a")
        eventually(lambda: view.get("a") == big[::-1])
    finally:
        client.close()
