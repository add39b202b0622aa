"""The official client's remaining exception names.

Every exception name ``pulsar-client`` exports exists in ``broker_core.errors``
(tests/broker_core/data/pulsar_exception_names.txt is the list; a test checks it).  Those here name
conditions that need a broker, a network connection, or a feature this library does not have, so
nothing raises them (``CryptoError`` aside); they exist so ``except`` clauses of ported code keep
working.  ``docs/CLIENT.md`` lists them.
"""

from __future__ import annotations

from broker_core.errors.base import NotFound, PulsarException
from broker_core.errors.handles import AlreadyClosed, ProducerQueueIsFull


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
    """A topic's log needs a newer Delta reader or writer than this library (``log.protocol_versions``)."""


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
