from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.clock import SYSTEM_CLOCK, Clock, ManualClock, SystemClock
from broker_core.errors import InvalidConfiguration


def test_both_clocks_satisfy_the_protocol() -> None:
    assert isinstance(SystemClock(), Clock)
    assert isinstance(ManualClock(), Clock)
    assert isinstance(SYSTEM_CLOCK, SystemClock)


def test_system_clock_reads_wall_time_in_ms() -> None:
    before_ms = time.time_ns() // 1_000_000
    now_ms = SYSTEM_CLOCK.now_ms()
    after_ms = time.time_ns() // 1_000_000
    assert isinstance(now_ms, int)
    assert before_ms <= now_ms <= after_ms


def test_system_clock_monotonic_never_decreases() -> None:
    readings = [SYSTEM_CLOCK.monotonic_s() for _ in range(1000)]
    assert readings == sorted(readings)


def test_manual_clock_starts_where_told() -> None:
    clock = ManualClock(1_700_000_000_000)
    assert clock.now_ms() == 1_700_000_000_000
    assert clock.monotonic_s() == pytest.approx(1_700_000_000.0)
    assert ManualClock().now_ms() == 0


def test_manual_clock_advance_moves_both_readings() -> None:
    clock = ManualClock(1_000)
    start_s = clock.monotonic_s()
    assert clock.advance(250) == 1_250
    assert clock.now_ms() == 1_250
    assert clock.monotonic_s() - start_s == pytest.approx(0.25)
    clock.advance(0)
    assert clock.now_ms() == 1_250


def test_manual_clock_set_jumps_forward_and_allows_same_time() -> None:
    clock = ManualClock(10)
    clock.set(10)
    clock.set(5_000)
    assert clock.now_ms() == 5_000
    assert clock.monotonic_s() == pytest.approx(5.0)


def test_manual_clock_refuses_to_move_backwards() -> None:
    clock = ManualClock(1_000)
    with pytest.raises(InvalidConfiguration, match="backwards"):
        clock.set(999)
    with pytest.raises(InvalidConfiguration, match="backwards"):
        clock.advance(-1)
    assert clock.now_ms() == 1_000


@pytest.mark.parametrize("bad", [1.5, "10", None, True])
def test_manual_clock_refuses_non_int_milliseconds(bad: object) -> None:
    clock = ManualClock()
    with pytest.raises(InvalidConfiguration, match="int number of milliseconds"):
        clock.advance(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfiguration, match="int number of milliseconds"):
        clock.set(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfiguration):
        ManualClock(bad)  # type: ignore[arg-type]


def test_manual_clock_refuses_negative_start() -> None:
    with pytest.raises(InvalidConfiguration, match=">= 0"):
        ManualClock(-1)


def test_invalid_configuration_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        ManualClock(5).set(1)


@given(st.lists(st.integers(min_value=0, max_value=10**9), max_size=50))
def test_manual_clock_readings_never_decrease(steps_ms: list[int]) -> None:
    clock = ManualClock()
    last_ms, last_s = clock.now_ms(), clock.monotonic_s()
    for step_ms in steps_ms:
        clock.advance(step_ms)
        assert clock.now_ms() == last_ms + step_ms
        assert clock.monotonic_s() >= last_s
        last_ms, last_s = clock.now_ms(), clock.monotonic_s()
    assert clock.now_ms() == sum(steps_ms)


def test_manual_clock_concurrent_advances_are_not_lost() -> None:
    clock = ManualClock()

    def work() -> None:
        for _ in range(1000):
            clock.advance(1)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert clock.now_ms() == 8000


def test_repr_shows_time() -> None:
    assert repr(ManualClock(42)) == "ManualClock(now_ms=42)"
    assert repr(SYSTEM_CLOCK) == "SystemClock()"
