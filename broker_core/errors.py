"""The one exception tree of spark-pubsub.

The root is ``PulsarException`` so code written against the official ``pulsar-client`` keeps its
``except`` clauses; subclasses carry the official names where one exists.  Where it helps callers,
a class also derives from a builtin (``ValueError`` for bad arguments and configuration,
``LookupError`` for missing things, ``TimeoutError`` for timeouts).

Messages name the thing, the bad value and the fix; context travels as attributes (``topic``,
``version``, ``partition``) rather than being parsed out of the text.
"""

from __future__ import annotations

import builtins
import enum
from typing import Any


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


class MessageTooBig(InvalidMessage):
    """A message exceeds ``maxMessageSize`` and chunking is off."""


# --- missing or conflicting things -----------------------------------------------------------------


class NotFound(PulsarException, builtins.LookupError):
    """Base of everything that is looked up and not there."""


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


# --- producer and consumer state -------------------------------------------------------------------


class AlreadyClosed(PulsarException):
    """The client, producer, consumer or reader was closed."""


class ProducerBusy(PulsarException):
    """The topic's access mode refuses this producer (another producer holds it)."""


class ProducerFenced(PulsarException):
    """An exclusive producer with fencing took the topic over; this producer may no longer write."""


class ProducerQueueIsFull(PulsarException):
    """The producer's pending queue is full and ``block_if_queue_full`` is off."""


class ConsumerBusy(PulsarException):
    """The subscription refuses this consumer (for example, Exclusive with a live consumer)."""


class NotAllowedError(PulsarException):
    """The operation is not allowed in this state or on this kind of topic."""


class OperationNotSupported(PulsarException):
    """The operation is not supported by this library (the message says what to use instead)."""


class CumulativeAcknowledgementNotAllowedError(NotAllowedError):
    """``acknowledge_cumulative`` on a Shared or Key_Shared subscription."""


class Timeout(PulsarException, TimeoutError):
    """An operation did not complete in time (``receive(timeout_millis)`` with nothing to deliver)."""


class ProducerBlockedQuotaExceededError(Timeout):
    """A send held by the ``producer_request_hold`` backlog quota policy ran out of send timeout.

    The official client's name; it is a ``Timeout`` as well because that is what the caller saw:
    the send waited for consumers to drain the backlog and the time ran out first.
    """


class ProducerBlockedQuotaExceededException(PulsarException):
    """The topic's backlog is over its quota and the policy is ``producer_exception``."""


# --- storage ---------------------------------------------------------------------------------------


class BrokerPersistenceError(PulsarException):
    """Storage failed or holds something this library cannot read."""


class CommitConflict(BrokerPersistenceError):
    """A commit lost the put-if-absent race too many times in a row."""


class DirectoryGone(BrokerPersistenceError):
    """A write's directory was removed (its topic was deleted); the write re-created nothing.

    Raised by writes that may create directories only *below* an anchor (``FileIO.put_if_absent``
    and friends with ``anchor=``): re-creating the anchor would resurrect half of a deleted topic.
    """


class StorageUnavailable(BrokerPersistenceError):
    """The root's store cannot be reached, or its bucket/container does not exist (``root=`` names it)."""


class StorageAccessDenied(BrokerPersistenceError):
    """The store refused the credentials, or they lack a permission the operation needs."""


class UnsafeStore(BrokerPersistenceError):
    """The store ignores conditional puts, so concurrent writers could overwrite each other's commits."""


class LogCorrupted(BrokerPersistenceError):
    """The transaction log is unreadable (a gap, a malformed action, a missing file)."""


class DataLoss(BrokerPersistenceError):
    """Messages a caller asked for were removed (retention) before they were read."""


class Result(enum.IntEnum):
    """Result codes handed to ``send_async`` callbacks (the official client's numbering)."""

    Ok = 0
    UnknownError = 1
    InvalidConfiguration = 2
    Timeout = 3
    BrokerPersistenceError = 11
    ConsumerBusy = 13
    AlreadyClosed = 15
    InvalidMessage = 16
    ProducerBusy = 19
    InvalidTopicName = 21
    InvalidUrl = 22
    OperationNotSupported = 24
    ProducerBlockedQuotaExceededError = 25
    ProducerBlockedQuotaExceededException = 26
    ProducerQueueIsFull = 27
    MessageTooBig = 28
    TopicNotFound = 29
    SubscriptionNotFound = 30
    TopicTerminated = 33
    CumulativeAcknowledgementNotAllowedError = 37
    NotAllowedError = 40
    ProducerFenced = 43


def result_for(exc: BaseException | None) -> Result:
    """The result code of an exception (``Ok`` for None), walking up the class tree."""
    if exc is None:
        return Result.Ok
    for cls in type(exc).__mro__:
        if cls.__name__ in Result.__members__:
            return Result[cls.__name__]
    return Result.UnknownError


__all__ = [
    "AlreadyClosed",
    "AlreadyExists",
    "BrokerPersistenceError",
    "CommitConflict",
    "ConsumerBusy",
    "CumulativeAcknowledgementNotAllowedError",
    "DataLoss",
    "DirectoryGone",
    "InvalidConfiguration",
    "InvalidMessage",
    "InvalidTopicName",
    "InvalidUrl",
    "LogCorrupted",
    "MessageTooBig",
    "NamespaceNotFound",
    "NotAllowedError",
    "NotFound",
    "OperationNotSupported",
    "PayloadTypeError",
    "ProducerBlockedQuotaExceededError",
    "ProducerBlockedQuotaExceededException",
    "ProducerBusy",
    "ProducerFenced",
    "ProducerQueueIsFull",
    "PulsarException",
    "Result",
    "StorageAccessDenied",
    "StorageUnavailable",
    "SubscriptionNotFound",
    "TenantNotFound",
    "Timeout",
    "TopicDeleted",
    "TopicNotFound",
    "UnsafeStore",
    "result_for",
]
