"""Letters sent in bulk by an engine (``retry_or_dead_letter``, behind Spark's ``reconsume_later`` and
``dead_letter``) are the stored originals (D82): payload, writer schema version and encryption, whatever
the engine's rows made of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from records import V1, V2

from broker_core import Client, CryptoKeyReader, InitialPosition, InvalidMessage, MessageId
from broker_core import schema as m
from broker_core.client.retry_letters import retry_or_dead_letter
from broker_core.config import BrokerConfig

TOPIC = "persistent://public/default/t"
DLQ = f"{TOPIC}-s-DLQ"
RETRY = f"{TOPIC}-s-RETRY"
WAIT_MS = 10_000


@pytest.fixture
def client(tmp_path: Path) -> Any:
    client = Client(str(tmp_path / "root"), create_root=True, broker_config=BrokerConfig(fsync_enabled=False))
    yield client
    client.close()


def _id_text(msg_id: MessageId) -> str:
    """The engine's ``messageId`` column: ``ledger:entry:partition:batch``."""
    return f"{msg_id.ledger_id()}:{msg_id.entry_id()}:{msg_id.partition()}:{msg_id.batch_index()}"


def _failed(topic: str, ids: list[MessageId], values: pa.Array) -> pa.Table:
    return pa.table({"value": values, "topic": [topic] * len(ids), "message_id": [_id_text(i) for i in ids]})


def _stored_size(client: Client, topic: str) -> int:
    broker = client._broker
    return sum(broker.topic_log(p).snapshot().next_offset for p in broker.partitions(topic)
               if broker.topic_log(p).exists())


def test_letters_of_a_typed_topic_keep_each_writer_schema_though_the_engine_decoded_the_values(
        client: Client) -> None:
    ids = [client.create_producer(TOPIC, schema=m.AvroSchema(V1)).send(V1(id=1, name="old")),
           client.create_producer(TOPIC, schema=m.AvroSchema(V2)).send(V2(id=2, name="new", score=2.0))]
    decoded = pa.array([{"id": 1, "name": "old"}, {"id": 2, "name": "new"}])  # a typed read's struct values
    outcome = retry_or_dead_letter(client._broker, _failed(TOPIC, ids, decoded), subscription="s", delay_ms=0,
                                   max_reconsume_times=0, now_ms=0)
    assert (outcome.retried, outcome.dead_lettered) == (0, 2)
    consumer = client.subscribe(DLQ, "check", schema=m.AvroSchema(V2), initial_position=InitialPosition.Earliest)
    letters = [consumer.receive(WAIT_MS) for _ in range(2)]
    assert [x.value() for x in letters] == [V2(id=1, name="old", score=0.5), V2(id=2, name="new", score=2.0)]
    registry = client._broker.schemas
    originals = client.subscribe(TOPIC, "o", initial_position=InitialPosition.Earliest)
    for letter in letters:
        original = originals.receive(WAIT_MS)
        assert letter.data() == original.data()  # the payload bytes as written
        written = registry.lookup(DLQ, letter.schema_version())
        assert written is not None and written.same_as(registry.lookup(TOPIC, original.schema_version()))


def test_letters_of_an_encrypted_topic_stay_encrypted(client: Client, tmp_path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public, private = tmp_path / "public.pem", tmp_path / "private.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    keys = CryptoKeyReader(str(public), str(private))
    producer = client.create_producer(TOPIC, encryption_key="app-key", crypto_key_reader=keys)
    ids = [producer.send(b"secret-%d" % i) for i in range(3)]
    outcome = retry_or_dead_letter(client._broker, _failed(TOPIC, ids, pa.array([b"whatever"] * 3)),
                                   subscription="s", delay_ms=0, max_reconsume_times=5, now_ms=0)
    assert outcome.retried == 3
    stored = client._broker.topic_log(client._broker.partitions(RETRY)[0]).read(0, 3)[0]
    assert not any(b"secret" in v for v in stored.column("value").to_pylist())  # no plaintext on storage
    consumer = client.subscribe(RETRY, "check", crypto_key_reader=keys, initial_position=InitialPosition.Earliest)
    assert sorted(consumer.receive(WAIT_MS).data() for _ in range(3)) == [b"secret-0", b"secret-1", b"secret-2"]


def test_letters_are_found_on_the_partition_the_message_id_names(client: Client) -> None:
    client._broker.admin.create_partitioned_topic(TOPIC, 3)
    producer = client.create_producer(TOPIC)
    ids = [producer.send(b"m%d" % i, partition_key=f"k{i}") for i in range(6)]
    retry_or_dead_letter(client._broker, _failed(TOPIC, ids, pa.array([b"x"] * 6)), subscription="s", delay_ms=0,
                         max_reconsume_times=0, now_ms=0)
    consumer = client.subscribe(DLQ, "check", initial_position=InitialPosition.Earliest)
    assert sorted(consumer.receive(WAIT_MS).data() for _ in range(6)) == [b"m%d" % i for i in range(6)]


def test_a_message_no_longer_stored_sends_nothing_and_says_so(client: Client) -> None:
    producer = client.create_producer(TOPIC)
    real = producer.send(b"here")
    gone = MessageId(partition=real.partition(), ledger_id=real.ledger_id(), entry_id=real.entry_id() + 5,
                     batch_index=real.batch_index())
    with pytest.raises(InvalidMessage, match="no longer stored"):
        retry_or_dead_letter(client._broker, _failed(TOPIC, [real, gone], pa.array([b"a", b"b"])),
                             subscription="s", delay_ms=0, max_reconsume_times=0, now_ms=0)
    assert _stored_size(client, DLQ) == 0
