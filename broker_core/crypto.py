"""End-to-end encryption names of the official client: ``CryptoKeyReader`` and
``ConsumerCryptoFailureAction``.

End-to-end encryption is not implemented: ``create_producer(encryption_key=...)`` and a
``crypto_key_reader`` anywhere are refused with ``OperationNotSupported``, so no payload is ever
stored in the clear while the caller believes it encrypted.  The names exist so ported code imports
and type-checks; ``docs/CLIENT.md`` says so.
"""

from __future__ import annotations

import enum
from typing import Any

from broker_core.errors import InvalidConfiguration


class ConsumerCryptoFailureAction(enum.IntEnum):
    """What a consumer does with a message it cannot decrypt (the official values)."""

    FAIL = 0
    DISCARD = 1
    CONSUME = 2


class CryptoKeyReader:
    """The official default key reader (a public and a private key file).

    Accepted for import compatibility only: passing one to a producer, consumer or reader raises
    ``OperationNotSupported``.
    """

    def __init__(self, public_key_path: str, private_key_path: str) -> None:
        self.public_key_path = check_type(str, public_key_path, "public_key_path")
        self.private_key_path = check_type(str, private_key_path, "private_key_path")


def check_type(expected: type, value: Any, name: str) -> Any:
    """``value`` if it is an ``expected``, else ``InvalidConfiguration`` naming the argument (kept
    here rather than imported from ``broker_core.client.args``: the client imports this module)."""
    if not isinstance(value, expected) or isinstance(value, bool):
        raise InvalidConfiguration(
            f"argument {name!r} must be {expected.__name__}, got {type(value).__name__} {value!r}", argument=name
        )
    return value


__all__ = ["ConsumerCryptoFailureAction", "CryptoKeyReader"]
