"""``NonPersistentReader``: reads what is published to a non-persistent topic from the moment it connects.

A non-persistent topic keeps no messages, so a reader can only start "now" and cannot seek; it
buffers what the topic relays up to its receiver queue size and misses what arrives when full.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from broker_core.client.context import HandleOwner
from broker_core.client.non_persistent.handles import registry_of, track
from broker_core.client.non_persistent.receiver_queue import wait_next
from broker_core.client.non_persistent.refusals import seek_refused, unsupported
from broker_core.errors import AlreadyClosed, Timeout
from broker_core.message import Message, Schema
from broker_core.message_id import MessageId
from broker_core.naming import TopicName

_LOG = logging.getLogger(__name__)


class NonPersistentReader:
    """Reads the messages published to a non-persistent topic from now on. Create with
    ``Client.create_reader``; ``MessageId.earliest`` and ``MessageId.latest`` both mean "from now"."""

    def __init__(
        self,
        client: HandleOwner,
        topic: TopicName,
        partitions: list[TopicName],
        *,
        receiver_queue_size: int,
        reader_name: str,
        schema: Schema,
        reader_listener: Callable[[NonPersistentReader, Message], None] | None,
    ) -> None:
        self._client = client
        self._topic = topic
        self._name = reader_name
        self._schema = schema
        self._queue_size = receiver_queue_size
        self._cv = threading.Condition()
        self._buffer: deque[Message] = deque()
        self._closed = False
        registry = registry_of(client)
        self._topics = [registry.topic(p) for p in partitions]
        self._tokens = [np_topic.add_reader(self) for np_topic in self._topics]
        self._listener_thread: threading.Thread | None = None
        if reader_listener is not None:
            self._listener_thread = threading.Thread(
                target=self._listen, args=(reader_listener,), name=f"pubsub-np-reader-{reader_name}",
                daemon=True,
            )
            self._listener_thread.start()

    def offer(self, message: Message) -> bool:
        """``Receiver`` hook: buffer a message the topic relays (False when full or closed)."""
        with self._cv:
            if self._closed or len(self._buffer) >= self._queue_size:
                return False
            message._schema = self._schema
            self._buffer.append(message)
            self._cv.notify_all()
            return True

    def topic(self) -> str:
        return str(self._topic)

    def is_connected(self) -> bool:
        return not self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed(f"reader {self._name!r} on {self._topic} is closed")

    def read_next(self, timeout_millis: int | None = None) -> Message:
        """The next message; waits up to ``timeout_millis`` (forever if None), else ``Timeout``."""
        return wait_next(self._cv, self._buffer, self._buffer.popleft, self._check_open, timeout_millis,
                         str(self._topic))

    def has_message_available(self) -> bool:
        """Whether ``read_next`` would return without waiting for a new publish."""
        self._check_open()
        with self._cv:
            return bool(self._buffer)

    def seek(self, message_id: MessageId | int) -> None:
        """Refused: a non-persistent topic keeps no messages to go back (or forward) to."""
        self._check_open()
        raise seek_refused(str(self._topic))

    def close(self) -> None:
        """Disconnect; a blocked ``read_next`` wakes and raises ``AlreadyClosed``."""
        if self._closed:
            return
        with self._cv:
            self._closed = True
            self._buffer.clear()
            self._cv.notify_all()
        for np_topic, token in zip(self._topics, self._tokens, strict=True):
            np_topic.remove_reader(token)
        self._client._forget(self)

    def _listen(self, listener: Callable[[NonPersistentReader, Message], None]) -> None:
        while not self._closed:
            try:
                msg = self.read_next(timeout_millis=100)
            except (Timeout, AlreadyClosed):
                continue
            try:
                listener(self, msg)
            except Exception:
                _LOG.exception("reader listener of %s on %s raised", self._name, self._topic)

    def __iter__(self) -> Iterator[Message]:
        while self.has_message_available():
            yield self.read_next()


def create_non_persistent_reader(
    client: HandleOwner,
    topic: str,
    *,
    start_message_id: MessageId,
    receiver_queue_size: int,
    reader_name: str | None,
    schema: Schema,
    reader_listener: Callable[[Any, Any], None] | None,
) -> NonPersistentReader:
    """``Client.create_reader`` for a non-persistent topic (arguments already type-checked)."""
    name = TopicName.parse(topic)
    if start_message_id not in (MessageId.earliest, MessageId.latest):
        raise unsupported(
            f"a reader on non-persistent topic {name} can start only at MessageId.earliest or "
            f"MessageId.latest (both mean: the next message published), not at {start_message_id}; "
            "no message is kept",
            topic=str(name),
        )
    partitions = client._broker.partitions(name)
    reader = NonPersistentReader(
        client, name, partitions, receiver_queue_size=receiver_queue_size,
        reader_name=reader_name or f"reader-{uuid.uuid4().hex[:10]}", schema=schema,
        reader_listener=reader_listener,
    )
    track(client, reader)
    return reader


__all__ = [
    "NonPersistentReader",
    "create_non_persistent_reader",
]
