"""Bulk "reconsume later" and dead-lettering for engines (Spark's foreachBatch).

The client does this message by message (``Consumer.reconsume_later``); a batch engine hands over a
whole table of failed messages.  Each row goes to its subscription's retry letter topic with a
delivery delay and ``RECONSUMETIMES`` + 1, or, once that would exceed the limit, to the dead letter
topic, with the same property bookkeeping as the client (``client/dead_letters.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from broker_core.broker.broker import Broker
from broker_core.client.dead_letters import (
    DEFAULT_MAX_RECONSUME_TIMES,
    REAL_TOPIC,
    LetterTopics,
    WriterSchema,
    letter_topics,
    pulsar_id_string,
    reconsume_properties,
)
from broker_core.client.letter_originals import stored_originals
from broker_core.errors import InvalidMessage
from broker_core.message_id import MessageId
from broker_core.naming import TopicName
from broker_core.producer.bulk import append_partitioned, route_rows, to_segment_rows

FAILED_COLUMNS = ("value", "key", "ordering_key", "properties", "topic", "message_id")


@dataclass(frozen=True, slots=True)
class RetryOutcome:
    retried: int
    dead_lettered: int


def _origin(topic: str) -> str:
    return str(TopicName.parse(topic).partitioned_topic_name)


def _letter_version(broker: Broker, topic: str, version: bytes | None, target: str) -> bytes | None:
    """The schema version a letter of a message written under ``version`` of ``topic`` carries on
    ``target``: the same writer schema, registered there (``IncompatibleSchema`` if refused)."""
    if not version:
        return None
    info = broker.schemas.lookup(topic, version)
    if info is None:
        return None
    return broker.schemas.attach_producer(TopicName.parse(target), WriterSchema(info))


def retry_or_dead_letter(
    broker: Broker,
    failed: pa.Table,
    *,
    subscription: str,
    delay_ms: int,
    max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES,
    extra_properties: dict[str, str] | None = None,
    now_ms: int,
) -> RetryOutcome:
    """Send failed messages to the retry letter topic (delayed) or, past the limit, the dead letter
    topic, named and stamped as the client's ``reconsume_later`` does (``client/dead_letters.py``).

    Each letter is the stored original (``letter_originals``): its payload, keys, properties and
    writer schema are read from the log by message id, whatever the engine made of them (a typed read's
    struct ``value``, say); the writer schema is registered on the letter topic as the client does.

    Args:
        failed: columns ``value``, ``topic`` (the topic or internal topic it was read from) and
            ``message_id`` (admin form); other columns are ignored.

    Raises:
        InvalidMessage: a column is missing, or a message is no longer stored; nothing is sent.
        IncompatibleSchema: a letter topic's schema policy refuses the original's writer schema.
    """
    missing = [c for c in ("value", "topic", "message_id") if c not in failed.column_names]
    if missing:
        raise InvalidMessage(f"failed messages need column {missing[0]!r} (as read from the pubsub source)",
                             column=missing[0])
    retried = dead = 0
    topics = failed.column("topic").to_pylist()
    ids = failed.column("message_id").to_pylist()
    originals = stored_originals(broker, topics, ids, failed.column("value").combine_chunks())
    props = originals.rows.column("properties").to_pylist()
    routes: dict[str, list[int]] = {}
    retry_targets: set[str] = set()
    names: dict[str, LetterTopics] = {}
    new_props: list[list[tuple[str, str]]] = []
    for i in range(failed.num_rows):
        original = dict(props[i] or {})
        origin = original.get(REAL_TOPIC) or _origin(originals.internal_topics[i])
        if origin not in names:  # the same naming as the client's consumer with retry enabled
            names[origin] = letter_topics(broker, origin, subscription, None, retry_enabled=True)
        current, times = reconsume_properties(
            original, real_topic=origin, message_id=pulsar_id_string(MessageId.parse(str(ids[i]))),
            delay_ms=delay_ms, custom=extra_properties,
        )
        if times > max_reconsume_times:
            target = names[origin].dead_letter
            dead += 1
        else:
            target = names[origin].retry
            retry_targets.add(target)
            retried += 1
        routes.setdefault(target, []).append(i)
        new_props.append(list(current.items()))
    stored = originals.rows
    known: dict[tuple[str, bytes | None, str], bytes | None] = {}

    def letter_version(topic: str, version: bytes | None, target: str) -> bytes | None:
        """Looked up and registered once per (origin, writer version, letter topic), not per row."""
        key = (topic, version, target)
        if key not in known:
            known[key] = _letter_version(broker, topic, version, target)
        return known[key]

    table = pa.table({name: stored.column(name) for name in ("value", "key", "ordering_key")}).append_column(
        "properties", pa.array(new_props, pa.map_(pa.string(), pa.string())))
    versions = stored.column("schema_version").to_pylist()
    for target, rows in routes.items():
        part = table.take(pa.array(rows))
        if target in retry_targets and delay_ms > 0:
            part = part.append_column("deliver_at", pa.array([now_ms + delay_ms] * part.num_rows, pa.int64()))
        segment_rows, explicit = to_segment_rows(part, publish_time_ms=now_ms,
                                                 max_message_size=broker.config.max_message_size)
        letter_versions = [letter_version(originals.internal_topics[i], versions[i], target) for i in rows]
        segment_rows = segment_rows.set_column(
            segment_rows.schema.get_field_index("schema_version"), "schema_version",
            pa.array(letter_versions, pa.binary()))
        partitions = broker.partitions(target)
        chosen = route_rows(segment_rows, explicit, len(partitions))
        append_partitioned([broker.topic_log(p) for p in partitions], segment_rows, chosen)
    return RetryOutcome(retried=retried, dead_lettered=dead)


__all__ = ["FAILED_COLUMNS", "RetryOutcome", "retry_or_dead_letter"]
