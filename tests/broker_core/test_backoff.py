"""Redelivery backoff: Pulsar 4.x's defaults, formula, worked example and constructor checks.

Expected delays are worked out by hand from the rule: ``min`` for count <= 0 (or min <= 0), ``max``
once count > int(ln(max/min)/ln(multiplier)) + 1, else ``min(min * multiplier**count, max)``.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.errors import InvalidConfiguration
from broker_core.subscription.backoff import MultiplierRedeliveryBackoff


def test_defaults_are_pulsars() -> None:
    assert MultiplierRedeliveryBackoff() == MultiplierRedeliveryBackoff(10_000, 600_000, 2.0)
    # 10 s, 20 s, 40 s, ... 320 s, then 640 s is capped at 600 s
    assert [MultiplierRedeliveryBackoff().next_delay_ms(n) for n in range(7)] == [
        10_000, 20_000, 40_000, 80_000, 160_000, 320_000, 600_000,
    ]


def test_pulsar_worked_example() -> None:
    backoff = MultiplierRedeliveryBackoff(min_delay_ms=1000, max_delay_ms=600_000, multiplier=2)
    assert [backoff.next_delay_ms(n) for n in (-1, 0, 1, 4, 100)] == [1000, 1000, 2000, 16000, 600_000]


def test_count_beyond_the_shift_limit_is_the_cap() -> None:
    # min 1000, max 10000, x3: int(ln(10)/ln(3)) + 1 = int(2.0959) + 1 = 3
    backoff = MultiplierRedeliveryBackoff(1000, 10_000, 3)
    assert [backoff.next_delay_ms(n) for n in range(1, 6)] == [3000, 9000, 10_000, 10_000, 10_000]
    assert backoff.next_delay_ms(10**6) == 10_000  # never computes the huge power


def test_zero_minimum_never_waits() -> None:
    assert [MultiplierRedeliveryBackoff(0, 5000, 2).next_delay_ms(n) for n in (0, 3, 50)] == [0, 0, 0]


def test_fractional_multiplier_truncates() -> None:
    assert [MultiplierRedeliveryBackoff(1000, 10_000, 1.5).next_delay_ms(n) for n in range(4)] == [
        1000, 1500, 2250, 3375,
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_delay_ms": -5}, "min_delay_ms"),
        ({"min_delay_ms": 1.5}, "min_delay_ms"),
        ({"min_delay_ms": 2000, "max_delay_ms": 1999}, "max_delay_ms"),
        ({"multiplier": 1}, "multiplier"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"multiplier": math.inf}, "multiplier"),
        ({"multiplier": math.nan}, "multiplier"),
        ({"multiplier": True}, "multiplier"),
        ({"multiplier": "2"}, "multiplier"),
    ],
)
def test_invalid_configuration(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidConfiguration, match=message):
        MultiplierRedeliveryBackoff(**kwargs)  # type: ignore[arg-type]


def test_equal_min_and_max_and_zero_min_are_allowed() -> None:
    assert MultiplierRedeliveryBackoff(500, 500, 3.0).next_delay_ms(5) == 500
    assert MultiplierRedeliveryBackoff(0, 0, 2).next_delay_ms(1) == 0


def test_invalid_redelivery_count() -> None:
    for bad in (1.0, None, True):
        with pytest.raises(InvalidConfiguration, match="redelivery_count"):
            MultiplierRedeliveryBackoff().next_delay_ms(bad)  # type: ignore[arg-type]


@given(
    st.integers(1, 10**6),
    st.integers(0, 10**7),
    st.floats(1.01, 10, allow_nan=False),
    st.integers(0, 200),
)
def test_delay_is_bounded_and_never_shrinks(min_ms: int, extra: int, multiplier: float, count: int) -> None:
    backoff = MultiplierRedeliveryBackoff(min_ms, min_ms + extra, multiplier)
    delay = backoff.next_delay_ms(count)
    assert min_ms <= delay <= min_ms + extra
    assert backoff.next_delay_ms(count + 1) >= delay
    assert backoff.next_delay_ms(0) == min_ms
