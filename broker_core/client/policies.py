"""Consumer policy objects with the official client's names (dead letters, Key_Shared, batch receive)."""

from __future__ import annotations

import enum

from broker_core.client.args import check_type, check_type_or_none
from broker_core.errors import InvalidConfiguration
from broker_core.subscription.key_shared import HASH_RANGE_SIZE, KeySharedMode


class InitialPosition(enum.IntEnum):
    """Where a new subscription starts (the official numbering)."""

    Latest = 0
    Earliest = 1


class RegexSubscriptionMode(enum.IntEnum):
    """Which topics a pattern subscription matches."""

    PersistentOnly = 0
    NonPersistentOnly = 1
    AllTopics = 2


class SubscriptionMode(enum.IntEnum):
    """Durable subscriptions keep their cursor on storage; non-durable ones only in memory."""

    Durable = 0
    NonDurable = 1


class ConsumerDeadLetterPolicy:
    """Where messages go after ``max_redeliver_count`` redeliveries (and the retry letter topic).

    Args:
        max_redeliver_count: redeliveries allowed before a message is dead-lettered (>= 1).
        dead_letter_topic: defaults to ``<topic>-<subscription>-DLQ``.
        initial_subscription_name: a subscription created on the DLQ when it is first used, so no
            dead letter is lost before someone subscribes.
        retry_letter_topic: defaults to ``<topic>-<subscription>-RETRY`` (used with ``retry_enable``).
    """

    def __init__(
        self,
        max_redeliver_count: int,
        dead_letter_topic: str | None = None,
        initial_subscription_name: str | None = None,
        *,
        retry_letter_topic: str | None = None,
    ) -> None:
        check_type(int, max_redeliver_count, "max_redeliver_count")
        if max_redeliver_count < 1:
            raise InvalidConfiguration(f"max_redeliver_count must be greater than 0, got {max_redeliver_count}")
        check_type_or_none(str, dead_letter_topic, "dead_letter_topic")
        check_type_or_none(str, initial_subscription_name, "initial_subscription_name")
        check_type_or_none(str, retry_letter_topic, "retry_letter_topic")
        self._max = max_redeliver_count
        self._dlq = dead_letter_topic
        self._initial = initial_subscription_name
        self._retry = retry_letter_topic

    @property
    def max_redeliver_count(self) -> int:
        return self._max

    # Unset names read as "" (not None), as the official policy's properties answer.

    @property
    def dead_letter_topic(self) -> str:
        return self._dlq or ""

    @property
    def initial_subscription_name(self) -> str:
        return self._initial or ""

    @property
    def retry_letter_topic(self) -> str:
        return self._retry or ""


class ConsumerKeySharedPolicy:
    """Key_Shared settings: the mapping mode, out-of-order delivery, and STICKY ranges.

    Args:
        key_shared_mode: ``KeySharedMode.AutoSplit`` (hash ranges, or consistent hashing when the
            broker enables it) or ``KeySharedMode.Sticky`` (the ranges given here).
        allow_out_of_order_delivery: deliver a key to its new consumer without waiting for the old
            consumer to acknowledge it (no draining).
        sticky_ranges: inclusive ``(start, end)`` hash-slot ranges in [0, 65535], for Sticky.
    """

    def __init__(
        self,
        key_shared_mode: KeySharedMode = KeySharedMode.AutoSplit,
        allow_out_of_order_delivery: bool = False,
        sticky_ranges: list[tuple[int, int]] | None = None,
    ) -> None:
        check_type(KeySharedMode, key_shared_mode, "key_shared_mode")
        check_type(bool, allow_out_of_order_delivery, "allow_out_of_order_delivery")
        ranges: list[tuple[int, int]] = []
        for item in sticky_ranges or []:
            if (not isinstance(item, tuple | list) or len(item) != 2
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in item)):
                raise InvalidConfiguration(f"sticky_ranges entries must be (start, end) int pairs, got {item!r}")
            start, end = item
            if not 0 <= start <= end < HASH_RANGE_SIZE:
                raise InvalidConfiguration(
                    f"sticky range {item!r} must satisfy 0 <= start <= end <= {HASH_RANGE_SIZE - 1}"
                )
            ranges.append((start, end))
        if key_shared_mode == KeySharedMode.Sticky and not ranges:
            raise InvalidConfiguration("KeySharedMode.Sticky needs sticky_ranges")
        if key_shared_mode == KeySharedMode.AutoSplit and ranges:
            raise InvalidConfiguration("sticky_ranges only apply to KeySharedMode.Sticky")
        self._mode = key_shared_mode
        self._out_of_order = allow_out_of_order_delivery
        self._ranges = ranges

    @property
    def key_shared_mode(self) -> KeySharedMode:
        return self._mode

    @property
    def allow_out_of_order_delivery(self) -> bool:
        return self._out_of_order

    @property
    def sticky_ranges(self) -> list[tuple[int, int]]:
        return list(self._ranges)


class ConsumerBatchReceivePolicy:
    """Limits of one ``batch_receive`` call: messages, bytes, and how long to wait (ms)."""

    def __init__(self, max_num_message: int = -1, max_num_bytes: int = 10 * 1024 * 1024, timeout_ms: int = 100) -> None:
        check_type(int, max_num_message, "max_num_message")
        check_type(int, max_num_bytes, "max_num_bytes")
        check_type(int, timeout_ms, "timeout_ms")
        if max_num_message <= 0 and max_num_bytes <= 0 and timeout_ms <= 0:
            raise InvalidConfiguration("a batch receive policy needs at least one positive limit")
        self.max_num_message = max_num_message
        self.max_num_bytes = max_num_bytes
        self.timeout_ms = timeout_ms


__all__ = [
    "ConsumerBatchReceivePolicy",
    "ConsumerDeadLetterPolicy",
    "ConsumerKeySharedPolicy",
    "InitialPosition",
    "RegexSubscriptionMode",
    "SubscriptionMode",
]
