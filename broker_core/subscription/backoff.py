"""Redelivery backoff: how long to wait before redelivering a message that keeps failing.

A message that is negatively acknowledged (or whose ack timeout expires) again and again should
come back less and less often, so a poison message does not hog the consumer.  Pulsar's
``MultiplierRedeliveryBackoff`` grows the delay geometrically from a minimum up to a cap; this is
its 4.x rule, defaults and constructor checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from broker_core.errors import InvalidConfiguration

DEFAULT_MIN_DELAY_MS = 10_000
DEFAULT_MAX_DELAY_MS = 600_000
DEFAULT_MULTIPLIER = 2.0


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class MultiplierRedeliveryBackoff:
    """Pulsar 4.x's ``MultiplierRedeliveryBackoff``.

    ``next_delay_ms(count)`` is ``min_delay_ms`` when ``count <= 0`` or ``min_delay_ms <= 0``;
    ``max_delay_ms`` once ``count`` exceeds ``int(ln(max / min) / ln(multiplier)) + 1`` (the power
    could only overshoot the cap from there on); otherwise ``min(min * multiplier ** count, max)``.
    Defaults (Pulsar's builder): 10 s, 600 s, x2.  Ack-timeout redelivery adds the same delay on top
    of the ack timeout itself.

    Attributes:
        min_delay_ms: delay of the first redelivery; must be >= 0.
        max_delay_ms: cap on the delay; must be >= ``min_delay_ms``.
        multiplier: growth per redelivery; must be > 1.
    """

    min_delay_ms: int = DEFAULT_MIN_DELAY_MS
    max_delay_ms: int = DEFAULT_MAX_DELAY_MS
    multiplier: float = DEFAULT_MULTIPLIER

    def __post_init__(self) -> None:
        if not _is_int(self.min_delay_ms) or self.min_delay_ms < 0:
            raise InvalidConfiguration(f"min_delay_ms must be an int >= 0, got {self.min_delay_ms!r}")
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
            or multiplier <= 1
        ):
            raise InvalidConfiguration(f"multiplier must be a finite number > 1, got {multiplier!r}")

    @property
    def _max_shift(self) -> int:
        """The largest count whose power may still be below the cap (Pulsar's ``maxBitShift``)."""
        return int(math.log(self.max_delay_ms / self.min_delay_ms) / math.log(self.multiplier)) + 1

    def next_delay_ms(self, redelivery_count: int) -> int:
        """Milliseconds to wait before redelivering a message that was redelivered this many times.

        Raises:
            InvalidConfiguration: ``redelivery_count`` is not an int.
        """
        if not _is_int(redelivery_count):
            raise InvalidConfiguration(f"redelivery_count must be an int, got {redelivery_count!r}")
        if redelivery_count <= 0 or self.min_delay_ms <= 0:
            return self.min_delay_ms
        if redelivery_count > self._max_shift:
            return self.max_delay_ms
        return int(min(self.min_delay_ms * float(self.multiplier) ** redelivery_count, self.max_delay_ms))


__all__ = ["DEFAULT_MAX_DELAY_MS", "DEFAULT_MIN_DELAY_MS", "DEFAULT_MULTIPLIER", "MultiplierRedeliveryBackoff"]
