"""Keyword-argument checks shared by the client classes.

The official client raises ``ValueError`` for a wrongly typed argument; ours raise
``InvalidConfiguration`` (a ``ValueError``) naming the argument, the type given and the type wanted.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from broker_core.errors import InvalidConfiguration
from broker_core.message_id import MessageId

INT64_MAX = (1 << 63) - 1
MAX_TIMESTAMP_MS = INT64_MAX // 1000
"""Segments store times as int64 microseconds (``docs/PROTOCOL.md``): the largest ms value that fits."""


def _names(expected: type | tuple[type, ...]) -> str:
    types = expected if isinstance(expected, tuple) else (expected,)
    return " or ".join(t.__name__ for t in types)


def check_type(expected: type | tuple[type, ...], value: Any, name: str) -> Any:
    """Return ``value`` if it is an instance of ``expected`` (a bool never counts as an int)."""
    types = expected if isinstance(expected, tuple) else (expected,)
    ok = False if isinstance(value, bool) and bool not in types else isinstance(value, types)
    if not ok:
        raise InvalidConfiguration(
            f"argument {name!r} must be {_names(expected)}, got {type(value).__name__} {value!r}",
            argument=name,
        )
    return value


def check_type_or_none(expected: type | tuple[type, ...], value: Any, name: str) -> Any:
    return None if value is None else check_type(expected, value, name)


def check_positive(value: int, name: str, *, allow_zero: bool = False) -> int:
    check_type(int, value, name)
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidConfiguration(f"argument {name!r} must be {bound}, got {value}", argument=name)
    return value


def check_utf8(value: str, name: str) -> str:
    """A str that encodes as UTF-8: a lone surrogate (``"\\ud800"``) cannot be stored in a segment,
    and finding out at commit time would fail every message committed with it."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidConfiguration(
                f"argument {name!r} holds {value!r}, which is not valid Unicode text ({exc.reason} at "
                f"index {exc.start}); pass well-formed text (decode bytes with errors='replace' if needed)",
                argument=name,
            ) from None
    return value


def check_int_range(value: int, name: str, low: int, high: int, fix: str) -> int:
    """``low <= value <= high``; the error names the argument, the value and ``fix``."""
    if not low <= value <= high:
        raise InvalidConfiguration(
            f"argument {name!r} must be between {low} and {high}, got {value}; {fix}", argument=name
        )
    return value


def check_str_map(value: Any, name: str) -> dict[str, str] | None:
    """A dict of str to str (message or producer properties) of valid Unicode text, or None."""
    if value is None:
        return None
    check_type(dict, value, name)
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise InvalidConfiguration(
                f"argument {name!r} must map str to str; entry {k!r}: {v!r} is "
                f"{type(k).__name__}: {type(v).__name__}",
                argument=name,
            )
        check_utf8(k, f"{name} key")
        check_utf8(v, f"{name}[{k!r}]")
    return value


def check_send_arguments(
    properties: Any,
    partition_key: Any,
    ordering_key: Any,
    sequence_id: Any,
    replication_clusters: Any,
    disable_replication: Any,
    event_timestamp: Any,
    deliver_at: Any,
    deliver_after: Any,
) -> dict[str, str] | None:
    """Check the optional arguments of ``send`` / ``send_async``; return the properties.

    Persistent and non-persistent producers take the same arguments and refuse the same wrong types
    and out-of-range values; what each does with a well-typed value (a delay) is its own rule.  Every
    value a segment cannot store is refused here, for this message alone: found at commit time it
    would fail every message of the batch or group commit (``docs/DECISIONS.md``).
    """
    props = check_str_map(properties, "properties")
    if check_type_or_none(str, partition_key, "partition_key") is not None:
        check_utf8(partition_key, "partition_key")
    if check_type_or_none(str, ordering_key, "ordering_key") is not None:
        check_utf8(ordering_key, "ordering_key")
    if check_type_or_none(int, sequence_id, "sequence_id") is not None:
        check_int_range(sequence_id, "sequence_id", 0, INT64_MAX, "sequence ids are signed 64-bit and not negative")
    check_type_or_none(list, replication_clusters, "replication_clusters")
    check_type(bool, disable_replication, "disable_replication")
    if check_type_or_none(int, event_timestamp, "event_timestamp") is not None:
        check_int_range(event_timestamp, "event_timestamp", 0, MAX_TIMESTAMP_MS,
                        "pass milliseconds since the epoch (as Pulsar, not negative)")
    if check_type_or_none(int, deliver_at, "deliver_at") is not None:
        check_int_range(deliver_at, "deliver_at", -MAX_TIMESTAMP_MS, MAX_TIMESTAMP_MS,
                        "pass milliseconds since the epoch")
    if check_type_or_none(timedelta, deliver_after, "deliver_after") is not None:
        delay_ms = deliver_after // timedelta(milliseconds=1)
        check_int_range(delay_ms, "deliver_after (in ms)", -MAX_TIMESTAMP_MS // 2, MAX_TIMESTAMP_MS // 2,
                        "pass a delay a timestamp can hold")
    return props


def check_initial_sequence_id(value: Any) -> int | None:
    """``create_producer``'s ``initial_sequence_id``: the last id already published, so the next one
    (this + 1) must be a valid sequence id too."""
    if check_type_or_none(int, value, "initial_sequence_id") is None:
        return None
    return check_int_range(value, "initial_sequence_id", -1, INT64_MAX - 1,
                           "it is the last sequence id published (-1: none), and the next one must fit in 64 bits")


def check_seek_target(value: Any, name: str) -> MessageId | int:
    """``seek``'s target: a ``MessageId``, or a publish timestamp in ms (an int; a bool is neither).

    One check for the consumer, the reader and their asyncio forms (which check before they drop the
    messages taken ahead, so a bad argument changes nothing).
    """
    if isinstance(value, bool) or not isinstance(value, MessageId | int):
        raise InvalidConfiguration(
            f"seek takes a MessageId or a publish timestamp in ms (int), got {type(value).__name__} {value!r}",
            argument=name,
        )
    return value


__all__ = [
    "INT64_MAX",
    "MAX_TIMESTAMP_MS",
    "check_initial_sequence_id",
    "check_int_range",
    "check_positive",
    "check_seek_target",
    "check_send_arguments",
    "check_str_map",
    "check_type",
    "check_type_or_none",
    "check_utf8",
]
