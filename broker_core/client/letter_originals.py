"""The stored originals of failed messages, for letters sent in bulk by an engine (Spark's foreachBatch).

A letter is the original as written (D82): the same payload bytes, the same writer schema, still
encrypted.  The client copies a ``Message`` it holds; an engine hands over rows as it read them, and
those rows are not the original: a typed read has decoded ``value`` into a struct, and no row carries
the writer's schema version.  So the bulk path looks each message up in its log by its id and copies
the stored payload, keys, properties (with any encryption header) and schema version.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from broker_core.broker.broker import Broker
from broker_core.errors import InvalidMessage
from broker_core.log.segment import SEGMENT_SCHEMA
from broker_core.log.snapshot import Snapshot
from broker_core.message_id import MessageId
from broker_core.naming import TopicName
from broker_core.topic.topic_log import TopicLog

STORED_COLUMNS = ("value", "key", "ordering_key", "properties", "schema_version")
_EMPTY = SEGMENT_SCHEMA.empty_table().select([*STORED_COLUMNS, "num_chunks"])


@dataclass(frozen=True, slots=True)
class Originals:
    """The stored rows of the failed messages, in the order they were handed over."""

    rows: pa.Table  # STORED_COLUMNS
    internal_topics: list[str]  # the partition (or non-partitioned topic) each message lives in


def _internal_topic(topic: str, msg_id: MessageId) -> TopicName:
    name = TopicName.parse(topic)
    if name.is_partition or msg_id.partition() < 0:
        return name
    return name.partition(msg_id.partition())


def stored_originals(broker: Broker, topics: list[str], ids: list[str], values: pa.Array) -> Originals:
    """Each failed message's stored row, looked up in its log by ``(topic, message id)``.

    ``values`` is the engine's ``value`` column; it stands in for the payload of a chunked message
    only (its stored rows are the chunks; the engine's binary value is the joined whole).

    Raises:
        InvalidMessage: a message is no longer stored (retention or TTL removed it), or a chunked
            message arrived with a decoded (non-binary) value: nothing is sent.
    """
    logs: dict[str, tuple[TopicLog, Snapshot]] = {}
    internal: list[str] = []
    pieces: list[pa.Table] = []
    for topic, text in zip(topics, ids, strict=True):
        msg_id = MessageId.parse(str(text))
        name = str(_internal_topic(topic, msg_id))
        internal.append(name)
        if name not in logs:
            log = broker.topic_log(TopicName.parse(name))
            logs[name] = (log, log.snapshot())
        log, snap = logs[name]
        offset = log.offset_for_message_id(msg_id, inclusive=True, snapshot=snap)
        stored_id = log.message_id(offset, -1, snapshot=snap) if offset < snap.next_offset else None
        wanted = (msg_id.ledger_id(), msg_id.entry_id(), msg_id.batch_index())
        if stored_id is None or (stored_id.ledger_id(), stored_id.entry_id(), stored_id.batch_index()) != wanted:
            raise InvalidMessage(
                f"message {msg_id} of {name} is no longer stored (retention or TTL removed it), so its letter "
                "cannot be the original; nothing was sent: send letters before the data expires",
                column="messageId",
            )
        table, _ = log.read(offset, offset + 1, snapshot=snap)  # the segment cache serves its neighbours
        pieces.append(table.select([*STORED_COLUMNS, "num_chunks"]))
    stored = pa.concat_tables(pieces) if pieces else _EMPTY
    chunked = pc.fill_null(pc.is_valid(stored.column("num_chunks")), False)
    if pc.any(chunked).as_py():
        if not pa.types.is_binary(values.type) and not pa.types.is_large_binary(values.type):
            raise InvalidMessage(
                f"a chunked message arrived with a decoded value ({values.type}); read the topic with "
                "valueFormat=binary to send its letters",
                column="value",
            )
        stored = stored.set_column(0, "value", pc.if_else(chunked, values.cast(pa.binary()),
                                                          stored.column("value")))
    return Originals(stored.select(STORED_COLUMNS), internal)


__all__ = ["STORED_COLUMNS", "Originals", "stored_originals"]
