"""The ``Schema`` base class: encode a value to payload bytes, decode it back, describe itself.

Decoding goes through ``decode_message(msg)`` (the official hook) so a schema can use what the
message says about how it was written: an Avro or JSON schema looks up the writer's version in the
topic's registry (``attach_client`` hands it the lookup) and resolves it to its own schema.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from broker_core.schema.info import SchemaInfo, SchemaType

if TYPE_CHECKING:
    from broker_core.schema.avro_encode import RecordEncoder

# (topic, 8-byte schema version) -> the SchemaInfo registered under it, or None if unknown.
WriterLookup = Callable[[str, bytes], "SchemaInfo | None"]


class EncodedMessage(Protocol):
    """What a schema reads of a received message (``broker_core.message.Message`` is one).

    A protocol rather than ``Message`` itself: ``message.py`` builds on the schemas, so the schemas
    must not import it.
    """

    def data(self) -> bytes:
        """The payload."""

    def has_null_value(self) -> bool:
        """Whether the payload is null (a tombstone)."""

    def partition_key(self) -> str:
        """The message key."""

    def topic_name(self) -> str:
        """The topic the message was read from."""

    def schema_version(self) -> bytes:
        """The registry version the message was written under (empty: none)."""


class Schema(ABC):
    """Encodes values to payload bytes and back.

    A subclass that only implements ``encode``/``decode`` is an untyped schema for the registry
    (like ``BytesSchema``): it registers nothing and is never refused by a typed topic unless
    ``schemaValidationEnforced`` is on.
    """

    _lookup: WriterLookup | None = None
    batch_decodes: bool = False  # ``decode_values`` may decode a whole segment read's payloads at once
    separated_key: bool = False  # the key travels as the message key (``encode_separated``): KeyValue SEPARATED

    @abstractmethod
    def encode(self, value: Any) -> bytes:
        """Payload bytes of ``value``; ``PayloadTypeError`` if the value does not fit the schema."""

    @abstractmethod
    def decode(self, data: bytes) -> Any:
        """The value a payload encodes (as written with this very schema)."""

    def schema_info(self) -> SchemaInfo:
        """What the registry stores for this schema."""
        return SchemaInfo(SchemaType.BYTES, "BYTES")

    def decode_message(self, msg: EncodedMessage) -> Any:
        """The value of a received message (the writer's schema version may differ from this one)."""
        return self.decode(msg.data())

    def deferred_encoder(self) -> RecordEncoder | None:
        """An encoder whose ``defer`` a producer calls per send instead of ``encode``, and whose
        ``column`` encodes the deferred payloads of a whole batch when it is cut (``avro_encode``);
        None (the default): ``encode`` at every send."""
        return None

    def decode_values(self, payloads: Any, versions: Any, topic: str) -> list[Any] | Callable[[int], Any] | None:
        """The values of a column of payloads read together (``payloads``: a pyarrow binary array,
        ``versions``: the distinct schema versions its messages carry), each exactly what
        ``decode_message`` would give for its message once passed to ``value_of_datum`` (each datum is
        handed out once); or a function from a row's index to a new value of that row at every call
        (the batch may ask for a row again); None when the batch must be decoded message by message."""
        column = self.decode_batch(payloads, versions, topic)
        return None if column is None else self.values_of(column)

    def decode_batch(self, payloads: Any, versions: Any, topic: str) -> Any:
        """``decode_values``'s first half: the payloads decoded into one Arrow column (what a slice of
        rows can be taken from), or None when the batch must be decoded message by message (the
        default)."""
        return None

    def values_of(self, column: Any) -> list[Any] | Callable[[int], Any]:
        """``decode_values``'s second half: the values of (a slice of) a ``decode_batch`` column."""
        values: list[Any] = column.to_pylist()
        return values

    def value_of_datum(self, datum: Any) -> Any:
        """The value of one item of ``decode_values``'s list (built when the message asks for it)."""
        return datum

    def attach_client(self, client: Any) -> None:
        """Let the schema look up writer schemas of the client's topics (the official hook)."""
        lookup = getattr(client, "_schema_lookup", None)
        if lookup is not None:
            self._lookup = lookup

    def encode_separated(self, value: Any) -> tuple[str | None, bytes | None]:
        """(message key, payload) of a value whose key travels as the message key (``separated_key``)."""
        return None, self.encode(value)

    def __str__(self) -> str:
        return type(self).__name__


__all__ = ["Schema", "WriterLookup"]
