"""Keyword-argument checks shared by the client classes.

The official client raises ``ValueError`` for a wrongly typed argument; ours raise
``InvalidConfiguration`` (a ``ValueError``) naming the argument, the type given and the type wanted.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from broker_core.errors import InvalidConfiguration


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


def check_str_map(value: Any, name: str) -> dict[str, str] | None:
    """A dict of str to str (message or producer properties), or None."""
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
    and negative sequence ids; what each does with a well-typed value (a delay) is its own rule.
    """
    props = check_str_map(properties, "properties")
    check_type_or_none(str, partition_key, "partition_key")
    check_type_or_none(str, ordering_key, "ordering_key")
    check_type_or_none(int, sequence_id, "sequence_id")
    if sequence_id is not None and sequence_id < 0:
        raise InvalidConfiguration(f"argument 'sequence_id' must be >= 0, got {sequence_id}", argument="sequence_id")
    check_type_or_none(list, replication_clusters, "replication_clusters")
    check_type(bool, disable_replication, "disable_replication")
    check_type_or_none(int, event_timestamp, "event_timestamp")
    check_type_or_none(int, deliver_at, "deliver_at")
    check_type_or_none(timedelta, deliver_after, "deliver_after")
    return props


__all__ = ["check_positive", "check_send_arguments", "check_str_map", "check_type", "check_type_or_none"]
