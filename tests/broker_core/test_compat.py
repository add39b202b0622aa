"""What a pulsar-client program meets when its import changes: names, defaults and refusals."""

from __future__ import annotations

import logging
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
from consumer_helpers import drain, values

import broker_core
from broker_core import (
    AlreadyClosed,
    AuthenticationBasic,
    AuthenticationIgnoredWarning,
    AuthenticationToken,
    AuthorizationError,
    BrokerConfig,
    ChecksumError,
    Client,
    ConnectError,
    ConsoleLogger,
    ConsumerAssignError,
    ConsumerBusy,
    ConsumerCryptoFailureAction,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    ConsumerType,
    CryptoKeyReader,
    InitialPosition,
    InvalidConfiguration,
    KeySharedMode,
    LogCorrupted,
    LookupError,
    MessageId,
    OperationNotSupported,
    PulsarException,
    ReadError,
    Result,
    TopicNotFound,
)
from broker_core.broker.broker import Broker
from broker_core.log.checkpoint import checkpoint_path, read_checkpoint
from broker_core.storage import LocalFileIO

NAMES_FILE = Path(__file__).parent / "data" / "pulsar_exception_names.txt"
EARLIEST = InitialPosition.Earliest
WAIT_MS = 10_000


@pytest.fixture
def client(tmp_path: Path) -> Any:
    c = Client(str(tmp_path), broker_config=BrokerConfig(fsync_enabled=False))
    yield c
    c.close()


def send_all(client: Client, topic: str, data: list[str]) -> list[MessageId]:
    producer = client.create_producer(topic)
    ids = [producer.send(v.encode()) for v in data]
    producer.close()
    return ids


# -- exception names -------------------------------------------------------------------------------


def official_exception_names() -> list[str]:
    lines = NAMES_FILE.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_every_official_exception_name_exists_under_the_error_root() -> None:
    names = official_exception_names()
    assert len(names) == 46 and "IncompatibleSchema" in names
    for name in names:
        assert name in broker_core.__all__, name
        cls = getattr(broker_core, name)
        assert isinstance(cls, type) and issubclass(cls, PulsarException), name
        if name != "PulsarException":
            assert Result[name].name == name  # the result code a send_async callback gets
            assert cls.__doc__, f"{name} says when it is raised (or why never)"


def test_result_codes_follow_the_class_tree() -> None:
    assert ConnectError("x").error() == Result.ConnectError
    assert TopicNotFound("x").error() == Result.TopicNotFound
    assert issubclass(TopicNotFound, LookupError) and issubclass(LookupError, builtins_lookup_error())
    assert issubclass(ConsumerAssignError, ConsumerBusy)
    assert issubclass(AuthorizationError, PermissionError)
    assert issubclass(ChecksumError, LogCorrupted)


def test_result_codes_print_as_names_and_keep_their_numbers(tmp_path: Path) -> None:
    """As the official client's: a callback that logs its result reads a name, not ``3`` (issue 28)."""
    timeout = Result.Timeout
    assert str(timeout) == f"{timeout}" == "Result.Timeout"
    assert repr(timeout) == "<Result.Timeout: 3>"
    assert int(timeout) == timeout.value == 3 and timeout == 3
    assert f"{timeout:d}" == "3" and f"{timeout:03d}" == "003"  # a numeric format asks for the number
    assert f"{timeout:>16}" == "  Result.Timeout"
    logged: list[str] = []
    client = Client(str(tmp_path / "root"), create_root=True)
    try:
        producer = client.create_producer("persistent://public/default/results")
        producer.send_async(b"m", lambda result, _msg_id: logged.append(f"sent: {result}"))
        producer.flush()
    finally:
        client.close()
    assert logged == ["sent: Result.Ok"]


def builtins_lookup_error() -> type:
    import builtins

    return builtins.LookupError


def test_a_storage_root_that_cannot_be_created_is_a_connect_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    with pytest.raises(ConnectError, match="storage root"):
        Client(str(blocker / "root"), create_root=True)


def test_refused_storage_access_is_an_authorization_error(tmp_path: Path) -> None:
    io = LocalFileIO(str(tmp_path))
    # the classification itself (this test may run as root, whom permissions do not stop)
    assert isinstance(io._error("read", "x", PermissionError(13, "Permission denied")), AuthorizationError)
    assert isinstance(io._error("read", "x", OSError(5, "I/O error")), ReadError)
    assert type(io._error("write", "x", OSError(5, "I/O error"))) is broker_core.BrokerPersistenceError


def test_a_damaged_checkpoint_is_a_checksum_error(tmp_path: Path) -> None:
    io = LocalFileIO(str(tmp_path))
    path = checkpoint_path("t", 10)
    io.put_if_absent(path, b"PAR1 not really parquet")
    with pytest.raises(ChecksumError, match="unreadable"):
        read_checkpoint(io, "t", 10)


def test_overlapping_sticky_ranges_are_a_consumer_assign_error(client: Client) -> None:
    first = client.subscribe(
        "t", "s", consumer_type=ConsumerType.KeyShared,
        key_shared_policy=ConsumerKeySharedPolicy(KeySharedMode.Sticky, sticky_ranges=[(0, 100)]),
    )
    with pytest.raises(ConsumerAssignError, match="overlaps"):
        client.subscribe(
            "t", "s", consumer_type=ConsumerType.KeyShared,
            key_shared_policy=ConsumerKeySharedPolicy(KeySharedMode.Sticky, sticky_ranges=[(50, 150)]),
        )
    first.close()


# -- authentication, logger, crypto names -----------------------------------------------------------


def test_authentication_is_accepted_with_a_warning_never_silently(tmp_path: Path) -> None:
    with pytest.warns(AuthenticationIgnoredWarning, match="storage"):
        client = Client(str(tmp_path), authentication=AuthenticationToken("secret-token"))
    assert "secret-token" not in repr(AuthenticationToken("secret-token"))
    client.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Client(str(tmp_path)).close()  # no authentication, no warning


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (lambda: AuthenticationToken(5), "token"),
        (lambda: AuthenticationBasic("user", 5), "password"),
        (lambda: broker_core.AuthenticationTLS("cert.pem", None), "private_key_path"),
        (lambda: broker_core.AuthenticationOauth2({"issuer_url": "x"}), "auth_params_string"),
        (lambda: CryptoKeyReader("pub.pem", 3), "private_key_path"),
        (lambda: ConsoleLogger("info"), "log_level"),
    ],
)
def test_compatibility_classes_check_their_arguments(factory: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        factory()


@pytest.mark.parametrize(("kwarg", "value"), [("authentication", "token"), ("logger", "debug")])
def test_client_refuses_wrong_authentication_and_logger_types(tmp_path: Path, kwarg: str, value: Any) -> None:
    with pytest.raises(ValueError, match=kwarg):
        Client(str(tmp_path), **{kwarg: value})


def test_loggers_of_every_official_kind_are_accepted(tmp_path: Path) -> None:
    file_logger = broker_core.FileLogger(broker_core.LoggerLevel.Warn, "x.log")
    for logger in (logging.getLogger("app"), ConsoleLogger(), file_logger):
        Client(str(tmp_path), logger=logger).close()


def test_crypto_arguments_are_type_checked(client: Client) -> None:
    with pytest.raises(ValueError, match="crypto_failure_action"):
        client.subscribe("t", "s", crypto_failure_action="FAIL")
    with pytest.raises(ValueError, match="crypto_key_reader"):
        client.create_reader("t", MessageId.earliest, crypto_key_reader=("pub.pem", "priv.pem"))
    client.subscribe("t", "s", crypto_failure_action=ConsumerCryptoFailureAction.DISCARD).close()


# -- messages and ids ------------------------------------------------------------------------------


def test_message_id_wrap_and_encryption_context(client: Client) -> None:
    send_all(client, "t", ["a"])
    consumer = client.subscribe("t", "s", initial_position=EARLIEST)
    msg = consumer.receive(WAIT_MS)
    assert msg.encryption_context() is None  # not encrypted
    wrapped = MessageId.wrap(msg.message_id())
    assert wrapped == msg.message_id() and wrapped._topic == msg.topic_name()
    with pytest.raises(ValueError, match=r"MessageId\.wrap"):
        MessageId.wrap(b"\x08\x01")  # type: ignore[arg-type]
    consumer.close()


def test_a_multi_topic_consumer_refuses_an_id_without_its_topic(client: Client) -> None:
    ids = send_all(client, "a", ["a0", "a1", "a2"])
    send_all(client, "b", ["b0"])
    consumer = client.subscribe(["a", "b"], "s", initial_position=EARLIEST)
    got = {m.data(): m for m in (consumer.receive(WAIT_MS) for _ in range(4))}
    with pytest.raises(OperationNotSupported, match="carries no topic"):
        consumer.acknowledge(ids[0])  # the producer's id: no topic attached
    with pytest.raises(OperationNotSupported):
        consumer.acknowledge(MessageId.deserialize(ids[1].serialize()))
    consumer.acknowledge(got[b"a0"].message_id())  # a received message's id knows its topic
    consumer.acknowledge(MessageId.deserialize(ids[1].serialize(), topic="persistent://public/default/a"))
    consumer.acknowledge(got[b"a2"])
    consumer.acknowledge(got[b"b0"])
    consumer.close()
    again = client.subscribe(["a", "b"], "s", initial_position=EARLIEST)
    assert drain(again) == []
    again.close()
    single = client.subscribe("a", "one", initial_position=EARLIEST)
    single.receive(WAIT_MS)
    single.acknowledge(ids[0])  # one topic: an id needs no topic
    single.close()


def test_dead_letter_policy_defaults_match_the_official_client() -> None:
    policy = ConsumerDeadLetterPolicy(3)
    assert (policy.max_redeliver_count, policy.dead_letter_topic, policy.initial_subscription_name) == (3, "", "")
    for bad in (0, -1, None):
        with pytest.raises(ValueError, match="max_redeliver_count"):
            ConsumerDeadLetterPolicy(bad)  # type: ignore[arg-type]


# -- receiver_queue_size=0 ------------------------------------------------------------------------


def test_a_zero_queue_consumer_fetches_only_for_a_waiting_receive(client: Client) -> None:
    zero = client.subscribe("t", "s", consumer_type=ConsumerType.Shared, receiver_queue_size=0)
    send_all(client, "t", [f"m{i}" for i in range(5)])
    other = client.subscribe("t", "s", consumer_type=ConsumerType.Shared)
    assert values(drain(other, ack=True)) == [f"m{i}" for i in range(5)]  # zero held none back
    send_all(client, "t", ["late"])
    other.close()
    msg = zero.receive(WAIT_MS)
    assert msg.data() == b"late"
    zero.acknowledge(msg)
    with pytest.raises(InvalidConfiguration, match="receiver_queue_size=0"):
        zero.batch_receive()
    zero.close()
    with pytest.raises(AlreadyClosed):
        zero.receive(10)


def test_a_zero_queue_consumer_feeds_a_message_listener(client: Client) -> None:
    got: list[bytes] = []
    all_in = threading.Event()

    def listener(consumer: Any, msg: Any) -> None:
        got.append(msg.data())
        consumer.acknowledge(msg)
        if len(got) == 3:
            all_in.set()

    zero = client.subscribe("t", "s", receiver_queue_size=0, message_listener=listener)
    send_all(client, "t", ["a", "b", "c"])
    assert all_in.wait(WAIT_MS / 1000)
    assert got == [b"a", b"b", b"c"]
    zero.close()


def test_a_zero_queue_needs_one_non_partitioned_topic(tmp_path: Path, client: Client) -> None:
    Broker.for_url(str(tmp_path)).admin.create_partitioned_topic("p", 2)
    for topic in (["a", "b"], "p"):
        with pytest.raises(InvalidConfiguration, match="receiver_queue_size=0"):
            client.subscribe(topic, "s", receiver_queue_size=0)
    reader = client.create_reader("a", MessageId.earliest, receiver_queue_size=0)
    send_all(client, "a", ["x"])
    assert reader.read_next(WAIT_MS).data() == b"x"
    reader.close()


class _Foreign:
    """A value of a type no argument accepts."""


def _keyword_parameters(fn: Any, skip: set[str]) -> list[str]:
    import inspect

    return [name for name in inspect.signature(fn).parameters if name not in skip | {"self"}]


def test_every_wrongly_typed_keyword_argument_is_a_value_error(tmp_path: Path, client: Client) -> None:
    """CLIENT.md's promise, checked for every keyword of the entry points rather than a sample."""
    calls: list[tuple[str, Any]] = []
    for name in _keyword_parameters(Client.__init__, {"service_url"}):
        calls.append((f"Client({name})", lambda n=name: Client(str(tmp_path), **{n: _Foreign()})))
    for name in _keyword_parameters(Client.create_producer, {"topic"}):
        calls.append((f"create_producer({name})", lambda n=name: client.create_producer("t", **{n: _Foreign()})))
    for name in _keyword_parameters(Client.subscribe, {"topic", "subscription_name"}):
        calls.append((f"subscribe({name})", lambda n=name: client.subscribe("t", "s", **{n: _Foreign()})))
    for name in _keyword_parameters(Client.create_reader, {"topic", "start_message_id"}):
        calls.append((f"create_reader({name})",
                      lambda n=name: client.create_reader("t", MessageId.earliest, **{n: _Foreign()})))
    producer = client.create_producer("t")
    for name in _keyword_parameters(producer.send, {"content"}):
        calls.append((f"send({name})", lambda n=name: producer.send(b"x", **{n: _Foreign()})))
    assert len(calls) > 80  # every keyword of the five entry points
    accepted = []
    for label, call in calls:
        try:
            call()
            accepted.append(label)
        except ValueError:
            pass
    assert accepted == []
    with pytest.raises(TypeError):
        producer.send("text")  # a payload that is not bytes, with the bytes schema
