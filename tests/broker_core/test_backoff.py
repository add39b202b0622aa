"""Redelivery backoff: the seeds' golden tables, the formula's edges and validation."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.backoff import MultiplierRedeliveryBackoff
from broker_core.errors import InvalidConfiguration

# The seeds' tables: the n-th redelivery waits this long (message redelivery count n - 1).
NACK_TABLE_SECONDS = {1: 1, 2: 2, 3: 4, 4: 8, 5: 16, 6: 32, 7: 60, 8: 60}


def test_negative_ack_backoff_golden_table() -> None:
    backoff = MultiplierRedeliveryBackoff(min_delay_ms=1000, max_delay_ms=60 * 1000, multiplier=2)
    assert backoff == MultiplierRedeliveryBackoff()
    for nth, seconds in NACK_TABLE_SECONDS.items():
        assert backoff.next_delay_ms(nth - 1) == seconds * 1000


def test_ack_timeout_backoff_golden_table() -> None:
    ack_timeout_ms = 10_000
    backoff = MultiplierRedeliveryBackoff()
    for nth, seconds in NACK_TABLE_SECONDS.items():
        assert ack_timeout_ms + backoff.next_delay_ms(nth - 1) == (10 + seconds) * 1000


def test_formula_edges() -> None:
    assert MultiplierRedeliveryBackoff(500, 500, 3.0).next_delay_ms(5) == 500
    assert [MultiplierRedeliveryBackoff(100, 10_000, 1).next_delay_ms(n) for n in (0, 9)] == [100, 100]
    assert [MultiplierRedeliveryBackoff(1000, 10_000, 1.5).next_delay_ms(n) for n in range(4)] == [
        1000,
        1500,
        2250,
        3375,
    ]
    assert MultiplierRedeliveryBackoff().next_delay_ms(10**6) == 60_000  # beyond any float: the cap


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_delay_ms": 0}, "min_delay_ms"),
        ({"min_delay_ms": -5}, "min_delay_ms"),
        ({"min_delay_ms": 1.5}, "min_delay_ms"),
        ({"min_delay_ms": 2000, "max_delay_ms": 1999}, "max_delay_ms"),
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


def test_invalid_redelivery_count() -> None:
    for bad in (-1, 1.0, None):
        with pytest.raises(InvalidConfiguration, match="redelivery_count"):
            MultiplierRedeliveryBackoff().next_delay_ms(bad)  # type: ignore[arg-type]


@given(
    st.integers(1, 10**6),
    st.integers(0, 10**7),
    st.floats(1, 10, allow_nan=False),
    st.integers(0, 200),
)
def test_delay_is_bounded_and_never_shrinks(min_ms: int, extra: int, multiplier: float, count: int) -> None:
    backoff = MultiplierRedeliveryBackoff(min_ms, min_ms + extra, multiplier)
    delay = backoff.next_delay_ms(count)
    assert min_ms <= delay <= min_ms + extra
    assert backoff.next_delay_ms(count + 1) >= delay
    assert backoff.next_delay_ms(0) == min_ms
