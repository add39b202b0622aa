"""End-to-end encryption: AES-GCM payloads, RSA-wrapped data keys, and the failure actions."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest
from consumer_helpers import drain

import broker_core.asyncio as aio
from broker_core import (
    BrokerConfig,
    Client,
    ConsumerCryptoFailureAction,
    ConsumerDeadLetterPolicy,
    ConsumerType,
    CryptoError,
    CryptoKeyReader,
    InitialPosition,
    InvalidConfiguration,
    MessageId,
    OperationNotSupported,
    Timeout,
)
from broker_core.crypto import ALGORITHM, ENCRYPTION_PROPERTY

cryptography = pytest.importorskip("cryptography")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa  # noqa: E402
from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: E402

EARLIEST = InitialPosition.Earliest
WAIT_MS = 10_000
SECRET = b"the launch code is 0000"


def write_keys(folder: Path, name: str, key: Any) -> tuple[str, str]:
    private = folder / f"{name}-private.pem"
    public = folder / f"{name}-public.pem"
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return str(public), str(private)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("keys")
    right = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    wrong = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    right_paths = write_keys(folder, "right", right)
    wrong_paths = write_keys(folder, "wrong", wrong)
    return {
        "private": right,
        "reader": CryptoKeyReader(*right_paths),
        "wrong": CryptoKeyReader(right_paths[0], wrong_paths[1]),  # encrypts fine, cannot decrypt
        "ec": write_keys(folder, "ec", ec.generate_private_key(ec.SECP256R1())),
        "folder": folder,
    }


@pytest.fixture
def client(tmp_path: Path) -> Any:
    c = Client(str(tmp_path), broker_config=BrokerConfig(fsync_enabled=False))
    yield c
    c.close()


def send_secret(client: Client, keys: dict[str, Any], *, count: int = 1, **kwargs: Any) -> list[MessageId]:
    producer = client.create_producer("t", encryption_key="app-key", crypto_key_reader=keys["reader"], **kwargs)
    ids = [producer.send(SECRET + b"-%d" % i, properties={"k": "v"}) for i in range(count)]
    producer.close()
    return ids


def test_round_trip_and_nothing_readable_on_storage(tmp_path: Path, client: Client, keys: dict[str, Any]) -> None:
    sent = send_secret(client, keys, count=3, batching_enabled=True)
    consumer = client.subscribe("t", "s", initial_position=EARLIEST, crypto_key_reader=keys["reader"])
    msgs = [consumer.receive(WAIT_MS) for _ in range(3)]
    assert [m.data() for m in msgs] == [SECRET + b"-%d" % i for i in range(3)]
    assert [m.message_id() for m in msgs] == sent
    assert msgs[0].properties() == {"k": "v"}  # the reserved property is not the application's
    context = msgs[0].encryption_context()
    assert context is not None and not context.is_decryption_failed()
    assert context.algorithm() == ALGORITHM and len(context.param()) == 12
    assert [k.key for k in context.keys()] == ["app-key"]  # noqa: SIM118  # the official method
    consumer.close()
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert SECRET not in stored


def test_the_documented_format_opens_with_plain_cryptography(client: Client, keys: dict[str, Any]) -> None:
    """PROTOCOL.md's fields, read without this library's decryptor: unwrap with RSA-OAEP(SHA-1),
    open with AES-256-GCM under the IV (the tag is the ciphertext's last 16 bytes)."""
    send_secret(client, keys)
    raw = client.create_reader("t", MessageId.earliest).read_batch(10)
    props = dict(raw.column("properties")[0].as_py())
    header = json.loads(props[ENCRYPTION_PROPERTY])
    assert (header["v"], header["algo"], sorted(header)) == (1, "AES-256-GCM", ["algo", "iv", "keys", "v"])
    assert header["keys"][0]["name"] == "app-key" and header["keys"][0]["metadata"] == {}
    oaep = padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
    data_key = keys["private"].decrypt(base64.b64decode(header["keys"][0]["value"]), oaep)
    ciphertext = raw.column("value")[0].as_py()
    assert len(ciphertext) == len(SECRET + b"-0") + 16
    assert AESGCM(data_key).decrypt(base64.b64decode(header["iv"]), ciphertext, None) == SECRET + b"-0"


@pytest.mark.parametrize("reader_key", [None, "wrong"])
def test_fail_keeps_the_message_unacknowledged_for_a_consumer_that_can(
    client: Client, keys: dict[str, Any], reader_key: str | None
) -> None:
    send_secret(client, keys)
    blind = client.subscribe("t", "s", initial_position=EARLIEST, consumer_type=ConsumerType.Shared,
                             crypto_key_reader=keys[reader_key] if reader_key else None)
    for _ in range(100):  # the dispatcher reports the failure once it has tried (bounded: 10 s)
        with pytest.raises(Timeout):
            blind.receive(100)  # never delivered
        if any(isinstance(e, CryptoError) for e in blind._errors):
            break
    assert any(isinstance(e, CryptoError) for e in blind._errors)
    blind.close()  # it leaves: the message goes back to the subscription
    able = client.subscribe("t", "s", consumer_type=ConsumerType.Shared, crypto_key_reader=keys["reader"])
    assert able.receive(WAIT_MS).data() == SECRET + b"-0"
    able.close()


def test_discard_acknowledges_what_it_cannot_decrypt(client: Client, keys: dict[str, Any]) -> None:
    send_secret(client, keys, count=2)
    blind = client.subscribe("t", "s", initial_position=EARLIEST,
                             crypto_failure_action=ConsumerCryptoFailureAction.DISCARD)
    assert drain(blind) == []
    blind.close()
    able = client.subscribe("t", "s", crypto_key_reader=keys["reader"])
    assert drain(able) == []  # discarded means acknowledged
    able.close()


def test_consume_hands_over_the_ciphertext_marked_failed(client: Client, keys: dict[str, Any]) -> None:
    send_secret(client, keys)
    blind = client.subscribe("t", "s", initial_position=EARLIEST, crypto_key_reader=keys["wrong"],
                             crypto_failure_action=ConsumerCryptoFailureAction.CONSUME)
    msg = blind.receive(WAIT_MS)
    assert SECRET not in msg.data() and msg.properties() == {"k": "v"}
    context = msg.encryption_context()
    assert context is not None and context.is_decryption_failed()
    blind.close()


def test_readers_decrypt_or_apply_their_failure_action(client: Client, keys: dict[str, Any]) -> None:
    send_secret(client, keys, count=2)
    assert client.create_reader("t", MessageId.earliest, crypto_key_reader=keys["reader"]).read_next(
        WAIT_MS).data() == SECRET + b"-0"
    failing = client.create_reader("t", MessageId.earliest)
    with pytest.raises(CryptoError, match="no crypto_key_reader"):
        failing.read_next(WAIT_MS)
    with pytest.raises(CryptoError):
        failing.read_next(WAIT_MS)  # it moved past the first one
    with pytest.raises(Timeout):
        failing.read_next(100)
    discarding = client.create_reader("t", MessageId.earliest,
                                      crypto_failure_action=ConsumerCryptoFailureAction.DISCARD)
    with pytest.raises(Timeout):
        discarding.read_next(100)  # both were dropped
    consuming = client.create_reader("t", MessageId.earliest, crypto_key_reader=keys["wrong"],
                                     crypto_failure_action=ConsumerCryptoFailureAction.CONSUME)
    msg = consuming.read_next(WAIT_MS)
    assert SECRET not in msg.data() and msg.encryption_context().is_decryption_failed()  # type: ignore[union-attr]


def test_producer_key_problems_fail_at_creation_and_write_nothing(
    tmp_path: Path, client: Client, keys: dict[str, Any]
) -> None:
    missing = CryptoKeyReader(str(keys["folder"] / "missing.pem"), str(keys["folder"] / "missing.pem"))
    with pytest.raises(CryptoError, match="cannot read the public key"):
        client.create_producer("t", encryption_key="app-key", crypto_key_reader=missing)
    with pytest.raises(CryptoError, match="RSA"):
        client.create_producer("t", encryption_key="app-key", crypto_key_reader=CryptoKeyReader(*keys["ec"]))
    with pytest.raises(InvalidConfiguration, match="both"):
        client.create_producer("t", encryption_key="app-key")
    with pytest.raises(ValueError, match="crypto_key_reader"):
        client.subscribe("t", "s", crypto_key_reader="keys.pem")
    with pytest.raises(OperationNotSupported, match="chunking"):
        client.create_producer("t", encryption_key="k", crypto_key_reader=keys["reader"], chunking_enabled=True)
    with pytest.raises(OperationNotSupported, match="persistent"):
        client.create_producer("non-persistent://public/default/np", encryption_key="k",
                               crypto_key_reader=keys["reader"])
    producer = client.create_producer("t", encryption_key="k", crypto_key_reader=keys["reader"])
    with pytest.raises(InvalidConfiguration, match="reserved"):
        producer.send(b"x", properties={ENCRYPTION_PROPERTY: "forged"})
    with pytest.raises(OperationNotSupported, match="send_table"):
        import pyarrow as pa

        producer.send_table(pa.table({"value": [b"x"]}))
    producer.close()
    assert drain(client.subscribe("t", "after", initial_position=EARLIEST)) == []


def test_the_asyncio_client_encrypts_and_decrypts_too(tmp_path: Path, keys: dict[str, Any]) -> None:
    async def main() -> list[bytes]:
        client = aio.Client(str(tmp_path), broker_config=BrokerConfig(fsync_enabled=False))
        producer = await client.create_producer("t", encryption_key="app-key", crypto_key_reader=keys["reader"])
        consumer = await client.subscribe("t", "s", initial_position=EARLIEST, crypto_key_reader=keys["reader"])
        await asyncio.gather(*[producer.send(SECRET + b"-%d" % i) for i in range(5)])
        got = [(await asyncio.wait_for(consumer.receive(), 10)).data() for _ in range(5)]
        await client.close()
        return got

    assert asyncio.run(main()) == [SECRET + b"-%d" % i for i in range(5)]


def test_a_golden_encrypted_root_stays_readable(tmp_path: Path) -> None:
    """A root written by this version (tests/broker_core/data/encrypted_root, with its test-only key
    pair): later versions must still decrypt it, and plain readers must still see ciphertext."""
    import shutil

    golden = Path(__file__).parent / "data" / "encrypted_root"
    shutil.copytree(golden / "root", tmp_path / "root")
    reader = CryptoKeyReader(str(golden / "test-only-public.pem"), str(golden / "test-only-private.pem"))
    client = Client(str(tmp_path / "root"), broker_config=BrokerConfig(fsync_enabled=False))
    try:
        consumer = client.subscribe("orders", "s", initial_position=EARLIEST, crypto_key_reader=reader)
        msgs = [consumer.receive(WAIT_MS) for _ in range(3)]
        assert [m.data() for m in msgs] == [b"golden secret %d" % i for i in range(3)]
        assert [(m.properties(), m.partition_key()) for m in msgs] == [({"n": str(i)}, f"k{i}") for i in range(3)]
        assert [m.encryption_context().keys()[0].key for m in msgs] == ["golden-key"] * 3  # type: ignore[union-attr]
        raw = client.create_reader("orders", MessageId.earliest).read_batch(10)
        assert not any(b"golden secret" in v for v in raw.column("value").to_pylist())
    finally:
        client.close()


# -- dead and retry letters of encrypted messages stay encrypted ------------------------------------------


def _stored(root: Path, topic_dir: str) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file() and topic_dir in str(p))


def test_dead_and_retry_letters_of_encrypted_messages_are_encrypted(
    tmp_path: Path, client: Client, keys: dict[str, Any]
) -> None:
    send_secret(client, keys, count=2)
    policy = ConsumerDeadLetterPolicy(max_redeliver_count=1)
    consumer = client.subscribe("t", "s", initial_position=EARLIEST, consumer_type=ConsumerType.Shared,
                                crypto_key_reader=keys["reader"], retry_enable=True, dead_letter_policy=policy,
                                negative_ack_redelivery_delay_ms=0)
    first = consumer.receive(WAIT_MS)
    consumer.reconsume_later(first, 0)  # -> t-s-RETRY
    for _ in range(2):  # -> t-s-DLQ once redelivered past max_redeliver_count
        msg = consumer.receive(WAIT_MS)
        while msg.data() != SECRET + b"-1":
            consumer.acknowledge(msg)
            msg = consumer.receive(WAIT_MS)
        consumer.negative_acknowledge(msg)
    drain(consumer, ack=True)
    consumer.close()
    for letters in ("t-s-RETRY", "t-s-DLQ"):
        assert _stored(tmp_path, letters), f"nothing was written to {letters}"
        assert SECRET not in _stored(tmp_path, letters), f"{letters} holds the plaintext"
    for topic, payload in (("t-s-RETRY", SECRET + b"-0"), ("t-s-DLQ", SECRET + b"-1")):
        able = client.subscribe(topic, "check", initial_position=EARLIEST, crypto_key_reader=keys["reader"])
        letter = able.receive(WAIT_MS)
        assert letter.data() == payload
        context = letter.encryption_context()
        assert context is not None and [k.key for k in context.keys()] == ["app-key"]  # noqa: SIM118
        able.close()


def test_a_letter_of_a_message_that_failed_decryption_carries_its_ciphertext_and_header(
    tmp_path: Path, client: Client, keys: dict[str, Any]
) -> None:
    send_secret(client, keys)
    blind = client.subscribe("t", "s", initial_position=EARLIEST, crypto_key_reader=keys["wrong"],
                             crypto_failure_action=ConsumerCryptoFailureAction.CONSUME,
                             dead_letter_policy=ConsumerDeadLetterPolicy(max_redeliver_count=1),
                             negative_ack_redelivery_delay_ms=0, consumer_type=ConsumerType.Shared)
    for _ in range(2):  # delivered, redelivered once, then dead-lettered
        blind.negative_acknowledge(blind.receive(WAIT_MS))
    assert drain(blind) == []
    blind.close()
    assert SECRET not in _stored(tmp_path, "t-s-DLQ")
    able = client.subscribe("t-s-DLQ", "check", initial_position=EARLIEST, crypto_key_reader=keys["reader"])
    assert able.receive(WAIT_MS).data() == SECRET + b"-0"  # the key holder still opens it
    able.close()


def test_a_letter_is_not_copied_in_plaintext_when_no_key_can_seal_it(client: Client, keys: dict[str, Any]) -> None:
    class PrivateOnly(CryptoKeyReader):
        def public_key(self, key_name: str) -> bytes:
            raise CryptoError(f"no public key for {key_name}")

    send_secret(client, keys)
    private_only = PrivateOnly(*[str(keys["folder"] / f"right-{kind}.pem") for kind in ("public", "private")])
    consumer = client.subscribe("t", "s", initial_position=EARLIEST, crypto_key_reader=private_only,
                                retry_enable=True, consumer_type=ConsumerType.Shared)
    msg = consumer.receive(WAIT_MS)
    with pytest.raises(CryptoError, match="no public key"):
        consumer.reconsume_later(msg, 0)
    consumer.close()
    again = client.subscribe("t", "s", consumer_type=ConsumerType.Shared, crypto_key_reader=keys["reader"])
    assert again.receive(WAIT_MS).data() == SECRET + b"-0"  # still there, unacknowledged
    again.close()
