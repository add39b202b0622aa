"""Errors of producer and consumer state: schemas refused, access modes, closed handles, quotas."""

from __future__ import annotations

from broker_core.errors.base import NotFound, PulsarException


class IncompatibleSchema(PulsarException):
    """A producer's or consumer's schema does not fit the topic's under its compatibility strategy.

    Carries ``topic``, ``strategy``, ``version`` (the registered version it was checked against, or
    None) and ``offered`` (a short description of the schema offered).  Nothing was written.
    """


class SchemaNotFound(NotFound):
    """A topic has no schema (or not the version asked for)."""


class AlreadyClosed(PulsarException):
    """The client, producer, consumer or reader was closed."""


class CreatedBeforeFork(AlreadyClosed):
    """A client, producer, consumer, reader or storage handle was created before this process was
    forked: its threads and connections stayed in the parent.  Create the ``Client`` after the fork,
    or start workers with the ``spawn`` or ``forkserver`` method."""


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
