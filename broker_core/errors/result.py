"""Result codes: the official client's numbering of errors, for ``send_async`` callbacks.

``result_for`` maps an exception to its code by class name up the class tree, so this module needs
none of the exception classes (they import it, for ``PulsarException.error()``).

A code prints as its name (``Result.Timeout``), as the official client's does: since Python 3.11 an
``IntEnum`` prints as its bare number, and a callback logging ``f"send failed: {result}"`` would
read ``send failed: 3``.  The number stays one ``int(result)`` (or ``result.value``) away, and a
numeric format (``f"{result:d}"``) still formats the number.
"""

from __future__ import annotations

import enum


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

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, format_spec: str) -> str:
        if format_spec and format_spec[-1] in _NUMERIC_FORMATS:
            return int.__format__(self, format_spec)
        return format(str(self), format_spec)


_NUMERIC_FORMATS = frozenset("bcdoxXneEfFgG%")
"""Format types that ask for the number (``f"{result:d}"``); any other spec formats the name."""


def result_for(exc: BaseException | None) -> Result:
    """The result code of an exception (``Ok`` for None), walking up the class tree."""
    if exc is None:
        return Result.Ok
    for cls in type(exc).__mro__:
        if cls.__name__ in Result.__members__:
            return Result[cls.__name__]
    return Result.UnknownError
