"""The root of the exception tree, bad input, and things looked up and not there.

The root is ``PulsarException`` so code written against the official ``pulsar-client`` keeps its
``except`` clauses.  Where it helps callers, a class also derives from a builtin (``ValueError`` for
bad arguments and configuration, ``LookupError`` for missing things).
"""

from __future__ import annotations

import builtins
from typing import Any

from broker_core.errors.result import Result, result_for


class PulsarException(Exception):
    """Root of every error this library raises on purpose.

    Args:
        message: what went wrong, the bad value, and how to fix it.
        **context: attributes that travel with the error (``topic=...``, ``version=...``).
    """

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.context = context
        for name, value in context.items():
            setattr(self, name, value)

    def error(self) -> Result:
        """The ``Result`` code of this error, as ``pulsar.asyncio.PulsarException.error()`` gives."""
        return result_for(self)


# --- bad input -------------------------------------------------------------------------------------


class InvalidConfiguration(PulsarException, ValueError):
    """A configuration value, option or keyword argument is malformed or of the wrong type."""


class InvalidTopicName(PulsarException, ValueError):
    """A topic, tenant or namespace name is not valid (or would escape the storage root)."""


class InvalidUrl(PulsarException, ValueError):
    """The service URL does not name a storage root this library understands."""


class InvalidMessage(PulsarException, ValueError):
    """A message (or a column of a bulk append) is malformed."""


class PayloadTypeError(PulsarException, TypeError):
    """A payload is not ``bytes`` for the bytes schema."""


class SchemaDefinitionError(PulsarException, ValueError):
    """A schema, record declaration or schema-registry input is malformed (names the bad part)."""


class MessageTooBig(InvalidMessage):
    """A message exceeds ``maxMessageSize`` and chunking is off."""


# --- missing or conflicting things -----------------------------------------------------------------


class LookupError(PulsarException, builtins.LookupError):  # the official client's name
    """Looking something up failed: the base of every ``NotFound``.

    The official client raises it when a topic lookup fails; here a lookup is a read of the storage
    root, and what it reports is that the topic, namespace, tenant or subscription is not there.
    The class shadows the builtin of the same name only for code that imports it by name (as
    ``from pulsar import *`` does); ``except LookupError`` with the builtin still catches it.
    """


class NotFound(LookupError):
    """Base of everything that is looked up and not there."""


class RootNotFound(NotFound):
    """The storage root does not exist (or is not a directory) and creating it was not asked for."""


class TopicNotFound(NotFound):
    """The topic does not exist and auto-creation is off (or not allowed for it)."""


class TopicDeleted(TopicNotFound):
    """The topic was deleted (``Admin.delete_topic``) while this producer was connected to it.

    Pulsar disconnects the producers of a deleted topic; here nothing can, so the deletion fences
    them on storage instead and every later operation of such a producer raises this error.  It is a
    ``TopicNotFound`` (result code ``TopicNotFound``), so existing handlers keep working.
    """


class TenantNotFound(NotFound):
    """The tenant does not exist."""


class NamespaceNotFound(NotFound):
    """The namespace does not exist."""


class SubscriptionNotFound(NotFound):
    """The subscription does not exist."""


class AlreadyExists(PulsarException):
    """A tenant, namespace, topic or subscription that is being created exists already."""
