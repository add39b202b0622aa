"""Redelivery backoff: how long to wait before redelivering a message that keeps failing.

A message that is negatively acknowledged (or whose ack timeout expires) again and again should
come back less and less often, so a poison message does not hog the consumer.  Pulsar's
``MultiplierRedeliveryBackoff`` grows the delay geometrically from a minimum up to a cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from broker_core.errors import InvalidConfiguration


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class MultiplierRedeliveryBackoff:
    """Delay ``min(max_delay_ms, min_delay_ms * multiplier ** redelivery_count)``.

    ``redelivery_count`` is the message's redelivery count when it fails, so the first failure
    (count 0) waits ``min_delay_ms``: with the defaults 1 s, 2 s, 4 s, ... capped at 60 s.
    Ack-timeout redelivery adds the same delay on top of the ack timeout itself.

    Attributes:
        min_delay_ms: delay of the first redelivery; must be > 0.
        max_delay_ms: cap on the delay; must be >= ``min_delay_ms``.
        multiplier: growth per redelivery; must be >= 1 (1 means a constant delay).
    """

    min_delay_ms: int = 1000
    max_delay_ms: int = 60_000
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if not _is_int(self.min_delay_ms) or self.min_delay_ms <= 0:
            raise InvalidConfiguration(f"min_delay_ms must be an int > 0, got {self.min_delay_ms!r}")
        if not _is_int(self.max_delay_ms) or self.max_delay_ms < self.min_delay_ms:
            raise InvalidConfiguration(
                f"max_delay_ms must be an int >= min_delay_ms ({self.min_delay_ms}), "
                f"got {self.max_delay_ms!r}"
            )
        multiplier = self.multiplier
        if (
            isinstance(multiplier, bool)
            or not isinstance(multiplier, int | float)
            or not math.isfinite(multiplier)
            or multiplier < 1
        ):
            raise InvalidConfiguration(f"multiplier must be a finite number >= 1, got {multiplier!r}")

    def next_delay_ms(self, redelivery_count: int) -> int:
        """Milliseconds to wait before redelivering a message that was redelivered this many times.

        Raises:
            InvalidConfiguration: ``redelivery_count`` is negative or not an int.
        """
        if not _is_int(redelivery_count) or redelivery_count < 0:
            raise InvalidConfiguration(f"redelivery_count must be an int >= 0, got {redelivery_count!r}")
        try:
            delay = self.min_delay_ms * float(self.multiplier) ** redelivery_count
        except OverflowError:  # the power is beyond any float, so certainly beyond the cap
            return self.max_delay_ms
        return int(min(delay, self.max_delay_ms))


__all__ = ["MultiplierRedeliveryBackoff"]
