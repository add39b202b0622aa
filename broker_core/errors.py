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


# --- producer and consumer state -------------------------------------------------------------------


class IncompatibleSchema(PulsarException):
    """A producer's or consumer's schema does not fit the topic's under its compatibility strategy.

    Carries ``topic``, ``strategy``, ``version`` (the registered version it was checked against, or
    None) and ``offered`` (a short description of the schema offered).  Nothing was written.
    """


class SchemaNotFound(NotFound):
    """A topic has no schema (or not the version asked for)."""


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


class ConsumerAssignError(ConsumerBusy):
    """A Key_Shared subscription cannot assign hash ranges to this consumer: its STICKY ranges
    overlap another consumer's, or no AUTO_SPLIT range is left to split.  Pulsar's broker answers
    these with ``ConsumerAssignError``; it is a ``ConsumerBusy`` so older handlers still catch it."""


# Pulsar's Java broker names the same condition ConsumerAssignException (issue 16's wording).
ConsumerAssignException = ConsumerAssignError


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
    """The transaction log is unreadable (a gap, a malformed action, a missing file), or another file
    of a topic or of the root's metadata is damaged; the message names the file and what to do."""


class SegmentCorrupted(LogCorrupted):
    """A segment file a commit names is unreadable (truncated, overwritten); ``path`` names it.

    Readers deliver every message before it and then raise this; ``pubsub topics check --repair``
    sets the file aside with a data-loss record (``docs/PROTOCOL.md``).
    """


class PathOutsideRoot(BrokerPersistenceError):
    """A path would resolve outside the storage root; the storage layer refuses to touch it.

    The second line of defence: paths read from storage are validated where they are decoded, so
    this firing means a path slipped past that check.
    """


class DataLoss(BrokerPersistenceError):
    """Messages a caller asked for were removed (retention) before they were read."""


class ConnectError(BrokerPersistenceError):
    """The storage root cannot be reached or created (the folder's mount is gone, a file is in the
    way).  The official client raises it when it cannot connect to a broker; the root is what a
    client connects to here."""


class ReadError(BrokerPersistenceError):
    """Reading a file of the storage root failed with an OS error (the network client's name for a
    failed read from its connection)."""


class AuthorizationError(BrokerPersistenceError, PermissionError):
    """The storage refused access (filesystem permissions, object-store credentials).

    Access control is the storage's here, not a broker's: this is what a client lacking rights on
    the root gets.  Also a ``PermissionError``.
    """


class ChecksumError(LogCorrupted):
    """A file of the log (a segment or checkpoint) is unreadable as what it claims to be: its bytes
    were damaged.  A ``LogCorrupted`` as well."""


class BrokerMetadataError(BrokerPersistenceError):
    """Official name for broken broker metadata.  Not raised yet: an unreadable metadata file of the
    root (policies, partition metadata, broker configuration) raises ``InvalidConfiguration`` or
    ``LogCorrupted``, naming the file."""


# --- the official client's remaining names -----------------------------------------------------------
# Every exception name ``pulsar-client`` exports exists here (tests/broker_core/data/pulsar_exception_names.txt
# is the list; a test checks it).  Those below name conditions that need a broker, a network connection,
# or a feature this library does not have, so nothing raises them; they exist so ``except`` clauses
# of ported code keep working.  ``docs/CLIENT.md`` lists them.


class UnknownError(PulsarException):
    """The official catch-all.  Not raised here: an unexpected failure propagates as itself (a bug
    to report); ``result_for`` maps it to ``Result.UnknownError`` for ``send_async`` callbacks."""


class AuthenticationError(PulsarException):
    """Never raised: no server authenticates clients (see ``broker_core.authentication``)."""


class ErrorGettingAuthenticationData(AuthenticationError):
    """Never raised: authentication data is never fetched (see ``broker_core.authentication``)."""


class NotConnected(AlreadyClosed):
    """Never raised: there is no connection to lose; a closed handle raises ``AlreadyClosed``."""


class ConsumerNotInitialized(AlreadyClosed):
    """Never raised: a consumer exists only once ``subscribe`` has returned it."""


class ProducerNotInitialized(AlreadyClosed):
    """Never raised: a producer exists only once ``create_producer`` has returned it."""


class TooManyLookupRequestException(PulsarException):
    """Never raised: lookups are reads of the storage root, not requests to a broker."""


class ServiceUnitNotReady(PulsarException):
    """Never raised: there are no broker-owned bundles to be unloaded or moved."""


class ConsumerNotFound(NotFound):
    """Never raised: consumers are not looked up by id."""


class UnsupportedVersionError(PulsarException):
    """Never raised yet: the log's protocol versions are not checked against this library's."""


class TopicTerminated(PulsarException):
    """Never raised: topics cannot be terminated here."""


class CryptoError(PulsarException):
    """End-to-end encryption failed: a key cannot be read or is not an RSA key (at
    ``create_producer``), or a reader cannot decrypt a message and its failure action is FAIL."""


class TransactionCoordinatorNotFoundError(PulsarException):
    """Never raised: transactions are not supported."""


class InvalidTxnStatusError(PulsarException):
    """Never raised: transactions are not supported."""


class TransactionConflict(PulsarException):
    """Never raised: transactions are not supported."""


class TransactionNotFound(NotFound):
    """Never raised: transactions are not supported."""


class MemoryBufferIsFull(ProducerQueueIsFull):
    """Never raised: there is no client-wide memory limit; a full producer queue raises
    ``ProducerQueueIsFull``."""


class Interrupted(PulsarException):
    """Never raised: a blocked call interrupted by a signal raises the signal's exception
    (``KeyboardInterrupt``)."""


class Result(enum.IntEnum):
    """Result codes handed to ``send_async`` callbacks (the official client's numbering)."""

    Ok = 0
    UnknownError = 1
    InvalidConfiguration = 2
    Timeout = 3
    LookupError = 4
    ConnectError = 5
    ReadError = 6
    AuthenticationError = 7
    AuthorizationError = 8
    ErrorGettingAuthenticationData = 9
    BrokerMetadataError = 10
    BrokerPersistenceError = 11
    ChecksumError = 12
    ConsumerBusy = 13
    NotConnected = 14
    AlreadyClosed = 15
    InvalidMessage = 16
    ConsumerNotInitialized = 17
    ProducerNotInitialized = 18
    ProducerBusy = 19
    TooManyLookupRequestException = 20
    InvalidTopicName = 21
    InvalidUrl = 22
    ServiceUnitNotReady = 23
    OperationNotSupported = 24
    ProducerBlockedQuotaExceededError = 25
    ProducerBlockedQuotaExceededException = 26
    ProducerQueueIsFull = 27
    MessageTooBig = 28
    TopicNotFound = 29
    SubscriptionNotFound = 30
    ConsumerNotFound = 31
    UnsupportedVersionError = 32
    TopicTerminated = 33
    CryptoError = 34
    IncompatibleSchema = 35
    ConsumerAssignError = 36
    CumulativeAcknowledgementNotAllowedError = 37
    TransactionCoordinatorNotFoundError = 38
    InvalidTxnStatusError = 39
    NotAllowedError = 40
    TransactionConflict = 41
    TransactionNotFound = 42
    ProducerFenced = 43
    MemoryBufferIsFull = 44
    Interrupted = 45


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
    "AuthenticationError",
    "AuthorizationError",
    "BrokerMetadataError",
    "BrokerPersistenceError",
    "ChecksumError",
    "CommitConflict",
    "ConnectError",
    "ConsumerAssignError",
    "ConsumerAssignException",
    "ConsumerBusy",
    "ConsumerNotFound",
    "ConsumerNotInitialized",
    "CryptoError",
    "CumulativeAcknowledgementNotAllowedError",
    "DataLoss",
    "DirectoryGone",
    "ErrorGettingAuthenticationData",
    "IncompatibleSchema",
    "Interrupted",
    "InvalidConfiguration",
    "InvalidMessage",
    "InvalidTopicName",
    "InvalidTxnStatusError",
    "InvalidUrl",
    "LogCorrupted",
    "LookupError",
    "MemoryBufferIsFull",
    "MessageTooBig",
    "NamespaceNotFound",
    "NotAllowedError",
    "NotConnected",
    "NotFound",
    "OperationNotSupported",
    "PathOutsideRoot",
    "PayloadTypeError",
    "ProducerBlockedQuotaExceededError",
    "ProducerBlockedQuotaExceededException",
    "ProducerBusy",
    "ProducerFenced",
    "ProducerNotInitialized",
    "ProducerQueueIsFull",
    "PulsarException",
    "ReadError",
    "Result",
    "SchemaDefinitionError",
    "SchemaNotFound",
    "SegmentCorrupted",
    "ServiceUnitNotReady",
    "StorageAccessDenied",
    "StorageUnavailable",
    "SubscriptionNotFound",
    "TenantNotFound",
    "Timeout",
    "TooManyLookupRequestException",
    "TopicDeleted",
    "TopicNotFound",
    "TopicTerminated",
    "TransactionConflict",
    "TransactionCoordinatorNotFoundError",
    "TransactionNotFound",
    "UnknownError",
    "UnsafeStore",
    "UnsupportedVersionError",
    "result_for",
]
