"""The ``Client``: construction from a storage root, closing, topic resolution and auto-creation."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from async_facade import BOTH_CLIENT_CLASSES, ClientMaker
from processes import run_python

from broker_core import (
    AlreadyClosed,
    BrokerConfig,
    Client,
    InvalidConfiguration,
    InvalidTopicName,
    InvalidUrl,
    MessageId,
    OperationNotSupported,
    PulsarException,
    Result,
    TopicNotFound,
)
from broker_core.broker.admin import Admin
from broker_core.broker.broker import Broker
from broker_core.errors import RootNotFound


@pytest.fixture
def client_class(request: pytest.FixtureRequest) -> Iterator[ClientMaker]:
    """Makes sync clients; tests marked ``BOTH_CLIENT_CLASSES`` also run on the asyncio client."""
    maker = ClientMaker(getattr(request, "param", "sync"))
    yield maker
    maker.dispose()


def _tree(root: Path) -> set[str]:
    """Every path under ``root``, relative to it."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _topic_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("_delta_log"))


# -- construction -------------------------------------------------------------------------------------


def test_client_on_a_folder_path_round_trips_a_message(tmp_path: Path) -> None:
    client = Client(str(tmp_path))
    try:
        producer = client.create_producer("t")
        msg_id = producer.send(b"hello")
        reader = client.create_reader("t", MessageId.earliest)
        msg = reader.read_next(timeout_millis=5000)
        assert msg.data() == b"hello"
        assert msg.message_id() == msg_id
        assert msg.topic_name() == "persistent://public/default/t"
    finally:
        client.close()
    assert _topic_dirs(tmp_path) == [tmp_path / "public" / "default" / "persistent" / "t"]


def test_file_url_names_the_same_root_as_the_path(tmp_path: Path) -> None:
    by_path = Client(str(tmp_path))
    by_url = Client(tmp_path.as_uri())
    try:
        assert tmp_path.as_uri().startswith("file:///")
        by_path.create_producer("t").send(b"via path")
        reader = by_url.create_reader("t", MessageId.earliest)
        assert reader.read_next(timeout_millis=5000).data() == b"via path"
    finally:
        by_url.close()
        by_path.close()


def test_a_missing_root_is_an_error_naming_it_and_creates_nothing(tmp_path: Path) -> None:
    typo = tmp_path / "roto"
    for url in (str(typo), typo.as_uri()):
        with pytest.raises(RootNotFound, match=r"roto.*does not exist") as info:
            Client(url)
        assert isinstance(info.value, PulsarException)
        with pytest.raises(RootNotFound):
            Admin.open(url)
    assert not typo.exists()
    client = Client(str(typo), create_root=True)  # asked for explicitly
    try:
        assert typo.is_dir()
        client.create_producer("t").send(b"x")
    finally:
        client.close()
    with pytest.raises(ValueError, match="create_root"):
        Client(str(typo), create_root="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "url",
    [
        "pulsar://localhost:6650",
        "pulsar+ssl://broker.example.com:6651",
        "http://localhost:8080",
        "s3x://bucket/x",
    ],
)
def test_broker_urls_are_refused_with_invalid_url(tmp_path: Path, url: str) -> None:
    with pytest.raises(InvalidUrl) as info:
        Client(url)
    assert url in str(info.value)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, PulsarException)


def test_pulsar_url_error_says_what_to_pass_instead() -> None:
    with pytest.raises(InvalidUrl, match="storage root"):
        Client("pulsar://localhost:6650")


@pytest.mark.parametrize("url", [None, 6650, b"/tmp/x", Path("/tmp/x")])
def test_non_str_service_url_is_a_value_error(url: Any) -> None:
    with pytest.raises(ValueError, match="service_url"):
        Client(url)


@pytest.mark.parametrize(
    ("kwarg", "value"),
    [
        ("operation_timeout_seconds", "30"),
        ("operation_timeout_seconds", 1.5),
        ("io_threads", "1"),
        ("message_listener_threads", None),
        ("concurrent_lookup_requests", True),
        ("log_conf_file_path", 3),
        ("stats_interval_in_seconds", "600"),
        ("use_tls", "yes"),
        ("use_tls", 1),
        ("tls_trust_certs_file_path", 7),
        ("tls_allow_insecure_connection", None),
        ("tls_validate_hostname", "no"),
        ("connection_timeout_ms", 10.0),
        ("listener_name", 1),
        ("reader_poll_interval_ms", "10"),
        ("broker_config", 5),
        ("broker_config", {"maxMessageSize": 10}),
        ("clock", 5),
    ],
)
def test_wrongly_typed_kwargs_raise_value_error_naming_the_argument(
    tmp_path: Path, kwarg: str, value: Any
) -> None:
    with pytest.raises(ValueError, match=kwarg):
        Client(str(tmp_path), **{kwarg: value})


@pytest.mark.parametrize(("kwarg", "value"), [("operation_timeout_seconds", 0), ("io_threads", -1)])
def test_out_of_range_kwargs_are_invalid_configuration(tmp_path: Path, kwarg: str, value: int) -> None:
    with pytest.raises(InvalidConfiguration, match=kwarg):
        Client(str(tmp_path), **{kwarg: value})


def test_official_network_kwargs_are_accepted(tmp_path: Path) -> None:
    client = Client(
        str(tmp_path),
        None,
        30,
        2,
        2,
        100,
        None,
        60,
        False,
        None,
        False,
        False,
        None,
        5000,
        None,
        tls_private_key_file_path=None,
        tls_certificate_file_path=None,
    )
    client.close()


def test_broker_config_may_be_a_toml_path(tmp_path: Path) -> None:
    conf = tmp_path / "broker.toml"
    conf.write_text("allowAutoTopicCreation = false\n")
    root = tmp_path / "root"
    client = Client(str(root), broker_config=str(conf), create_root=True)
    try:
        with pytest.raises(TopicNotFound):
            client.create_producer("t")
    finally:
        client.close()


# -- close --------------------------------------------------------------------------------------------


@BOTH_CLIENT_CLASSES
def test_close_closes_producers_and_readers(client_class: ClientMaker, tmp_path: Path) -> None:
    client = client_class(str(tmp_path))
    producer = client.create_producer("t")
    producer.send(b"a")
    reader = client.create_reader("t", MessageId.earliest)
    assert producer.is_connected()
    assert reader.is_connected()
    client.close()
    assert not producer.is_connected()
    assert not reader.is_connected()
    with pytest.raises(AlreadyClosed):
        producer.send(b"b")
    with pytest.raises(AlreadyClosed):
        reader.read_next(timeout_millis=10)
    client.close()  # idempotent


def test_close_flushes_queued_batched_messages(tmp_path: Path) -> None:
    client = Client(str(tmp_path))
    producer = client.create_producer("t", batching_enabled=True, batching_max_publish_delay_ms=60_000)
    results: list[tuple[Result, MessageId | None]] = []
    for i in range(3):
        producer.send_async(b"m%d" % i, lambda res, msg_id: results.append((res, msg_id)))
    assert results == []  # the batch waits for its (long) publish delay
    client.close()
    assert [res for res, _ in results] == [Result.Ok] * 3
    assert [msg_id.batch_index() for _, msg_id in results if msg_id is not None] == [0, 1, 2]
    other = Client(str(tmp_path))
    try:
        reader = other.create_reader("t", MessageId.earliest)
        assert [reader.read_next(timeout_millis=5000).data() for _ in range(3)] == [b"m0", b"m1", b"m2"]
    finally:
        other.close()


@BOTH_CLIENT_CLASSES
def test_everything_raises_already_closed_after_close(client_class: ClientMaker, tmp_path: Path) -> None:
    client = client_class(str(tmp_path))
    client.close()
    with pytest.raises(AlreadyClosed):
        client.create_producer("t")
    with pytest.raises(AlreadyClosed):
        client.create_reader("t", MessageId.earliest)
    with pytest.raises(AlreadyClosed):
        client.get_topic_partitions("t")
    assert _topic_dirs(tmp_path) == []


@BOTH_CLIENT_CLASSES
def test_closing_one_client_leaves_another_on_the_same_root_working(client_class: ClientMaker, tmp_path: Path) -> None:
    first = client_class(str(tmp_path))
    second = client_class(str(tmp_path))
    try:
        first.create_producer("t").send(b"one")
        first.close()
        second.create_producer("t").send(b"two")
        reader = second.create_reader("t", MessageId.earliest)
        assert [reader.read_next(timeout_millis=5000).data() for _ in range(2)] == [b"one", b"two"]
    finally:
        second.close()


# -- topics -------------------------------------------------------------------------------------------


@BOTH_CLIENT_CLASSES
def test_get_topic_partitions_of_a_non_partitioned_topic_is_the_topic(
    client_class: ClientMaker, tmp_path: Path
) -> None:
    client = client_class(str(tmp_path))
    try:
        assert client.get_topic_partitions("t") == ["persistent://public/default/t"]
        assert client.get_topic_partitions("persistent://public/default/t") == [
            "persistent://public/default/t"
        ]
    finally:
        client.close()


@BOTH_CLIENT_CLASSES
def test_get_topic_partitions_of_a_partitioned_topic(client_class: ClientMaker, tmp_path: Path) -> None:
    Broker.for_url(str(tmp_path)).admin.create_partitioned_topic("orders", 3)
    client = client_class(str(tmp_path))
    try:
        assert client.get_topic_partitions("orders") == [
            f"persistent://public/default/orders-partition-{i}" for i in range(3)
        ]
        assert client.get_topic_partitions("persistent://public/default/orders-partition-1") == [
            "persistent://public/default/orders-partition-1"
        ]
        with pytest.raises(TopicNotFound):
            client.get_topic_partitions("orders-partition-3")
        with pytest.raises(ValueError, match="topic"):
            client.get_topic_partitions(5)  # type: ignore[arg-type]
    finally:
        client.close()


@BOTH_CLIENT_CLASSES
def test_auto_creation_on_creates_the_topic_on_first_use(client_class: ClientMaker, tmp_path: Path) -> None:
    client = client_class(str(tmp_path))
    try:
        client.create_reader("fresh", MessageId.earliest)
        assert _topic_dirs(tmp_path) == [tmp_path / "public" / "default" / "persistent" / "fresh"]
    finally:
        client.close()


@BOTH_CLIENT_CLASSES
def test_auto_creation_off_raises_topic_not_found_and_writes_nothing(client_class: ClientMaker, tmp_path: Path) -> None:
    config = BrokerConfig(allow_auto_topic_creation=False)
    client = client_class(str(tmp_path), broker_config=config)
    try:
        with pytest.raises(TopicNotFound, match="allowAutoTopicCreation"):
            client.create_producer("missing")
        with pytest.raises(TopicNotFound):
            client.create_reader("missing", MessageId.earliest)
        with pytest.raises(TopicNotFound):
            client.get_topic_partitions("missing")
        assert _topic_dirs(tmp_path) == []
        # An existing topic still works.
        Broker.for_url(str(tmp_path), config).admin.create_partitioned_topic("made", 2)
        producer = client.create_producer("made")
        assert producer.send(b"x").partition() in (0, 1)
    finally:
        client.close()


def test_auto_creation_of_partitioned_topics(tmp_path: Path) -> None:
    config = BrokerConfig(allow_auto_topic_creation_type="partitioned", default_num_partitions=4)
    client = Client(str(tmp_path), broker_config=config)
    try:
        producer = client.create_producer("auto")
        assert client.get_topic_partitions("auto") == [
            f"persistent://public/default/auto-partition-{i}" for i in range(4)
        ]
        ids = [producer.send(b"x", partition_key=f"k{i}") for i in range(20)]
        assert {i.partition() for i in ids} <= {0, 1, 2, 3}
        assert len(_topic_dirs(tmp_path)) == 4
    finally:
        client.close()


def test_non_persistent_topics_work_in_memory_and_write_nothing(tmp_path: Path) -> None:
    client = Client(str(tmp_path))
    before = _tree(tmp_path)
    try:
        topic = "non-persistent://public/default/np"
        assert client.get_topic_partitions(topic) == [topic]
        reader = client.create_reader(topic, MessageId.earliest)
        producer = client.create_producer(topic)
        producer.send(b"hello")
        assert reader.read_next(timeout_millis=1000).data() == b"hello"
        with pytest.raises(OperationNotSupported, match="non-persistent"):
            client.create_producer(topic, chunking_enabled=True)
    finally:
        client.close()
    assert _tree(tmp_path) == before


@BOTH_CLIENT_CLASSES
@pytest.mark.parametrize(
    "topic",
    [
        "",
        "../escape",
        "persistent://public/default/../escape",
        "persistent://../default/x",
        "public/../../x",
        "a/b",
        "persistent://public/default/",
        "persistent://public/default/x?y",
        "persistent://public/_hidden/x",
        "persistent:/public/default/x",
        "Persistent://public/default/x",
        "persistent://public/default/a/b",
    ],
)
def test_bad_topic_names_fail_before_anything_is_written(client_class: ClientMaker, tmp_path: Path, topic: str) -> None:
    client = client_class(str(tmp_path))
    before = _tree(tmp_path)
    try:
        for call in (
            lambda: client.create_producer(topic),
            lambda: client.create_reader(topic, MessageId.earliest),
            lambda: client.get_topic_partitions(topic),
        ):
            with pytest.raises(InvalidTopicName):
                call()
    finally:
        client.close()
    assert _tree(tmp_path) == before
    assert _topic_dirs(tmp_path) == []
    assert not (tmp_path / "public" / "default" / "persistent").exists()
    assert not (tmp_path.parent / "escape").exists()


@BOTH_CLIENT_CLASSES
def test_topic_that_is_not_a_str_is_a_value_error(client_class: ClientMaker, tmp_path: Path) -> None:
    client = client_class(str(tmp_path))
    try:
        with pytest.raises(ValueError, match="topic"):
            client.create_producer(b"t")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="topic"):
            client.create_reader(None, MessageId.earliest)  # type: ignore[arg-type]
    finally:
        client.close()
    assert _topic_dirs(tmp_path) == []


def test_wrongly_typed_reader_kwargs_raise_value_error(tmp_path: Path) -> None:
    client = Client(str(tmp_path))
    try:
        for kwargs in (
            {"start_message_id": "earliest"},
            {"start_message_id": MessageId.earliest, "receiver_queue_size": "10"},
            {"start_message_id": MessageId.earliest, "reader_name": 3},
            {"start_message_id": MessageId.earliest, "start_message_id_inclusive": 1},
            {"start_message_id": MessageId.earliest, "reader_listener": "not callable"},
            {"start_message_id": MessageId.earliest, "schema": "bytes"},
        ):
            with pytest.raises(ValueError):
                client.create_reader("t", **kwargs)
    finally:
        client.close()
    assert _topic_dirs(tmp_path) == []


UNCLOSED_SCRIPT = textwrap.dedent(
    """
    import sys
    from broker_core import Client, MessageId

    client = Client(sys.argv[1], reader_poll_interval_ms=60_000)
    producer = client.create_producer("t", batching_enabled=True, batching_max_publish_delay_ms=600_000)
    producer.send(b"durable")
    producer.send_async(b"still queued", None)
    client.create_reader("t", MessageId.latest, reader_listener=lambda reader, msg: None)
    print("exiting without close", flush=True)
    """
)


def test_an_unclosed_client_does_not_block_interpreter_exit(tmp_path: Path) -> None:
    done = run_python("-c", UNCLOSED_SCRIPT, tmp_path)
    assert "exiting without close" in done.stdout
    client = Client(str(tmp_path))
    try:
        reader = client.create_reader("t", MessageId.earliest)
        assert reader.read_next(timeout_millis=5000).data() == b"durable"
    finally:
        client.close()
