"""When a batch cut by the publish delay goes: at once, at the last moment it can still ride the
partition's next group commit, or after the partial batch uploading ahead of it (D79).

Pure state: a ``PartitionQueue`` with its timings set by hand, no store, no threads.
"""

from __future__ import annotations

from typing import Any

import pytest

from broker_core.client.partition_queue import (
    RIDE_MARGIN_FRACTION,
    RIDE_MARGIN_MIN_S,
    UPLOADED,
    UPLOADING,
    InFlight,
    PartitionQueue,
    delay_cut_s,
)


def _queue(*, committing: bool = False, started_s: float = 100.0, commit_s: float = 0.0,
           upload_s: float = 0.0, stages: tuple[int, ...] = (), partial: bool = True) -> PartitionQueue:
    q = PartitionQueue(log=None, registry=None)  # type: ignore[arg-type]  # neither is touched here
    q.committing = committing
    q.commit_started_s = started_s
    q.commit_s = commit_s
    q.upload_s = upload_s
    for stage in stages:
        item: Any = InFlight([], [], [], 0, False, None, partial)
        item.stage = stage
        q.in_flight.append(item)
    return q


def test_with_nothing_in_flight_a_due_batch_goes_at_once() -> None:
    assert delay_cut_s(_queue(), 5.0) == 5.0


def test_with_no_commit_in_flight_a_due_batch_waits_for_the_partial_batch_uploading_ahead() -> None:
    assert delay_cut_s(_queue(stages=(UPLOADING,)), 5.0) is None
    # a batch cut by size, or one already uploaded, holds nobody back
    assert delay_cut_s(_queue(stages=(UPLOADING,), partial=False), 5.0) == 5.0
    assert delay_cut_s(_queue(stages=(UPLOADED,)), 5.0) == 5.0


def test_before_any_commit_was_timed_the_hold_is_as_before() -> None:
    q = _queue(committing=True, commit_s=0.0, upload_s=0.08, stages=(UPLOADING,))
    assert delay_cut_s(q, 100.01) is None


def test_while_a_commit_is_in_flight_a_batch_goes_at_the_last_moment_it_can_ride_the_next_group() -> None:
    # a "standard" store: the commit in flight (PUT + HEAD) takes 110 ms, an upload 80 ms
    q = _queue(committing=True, started_s=100.0, commit_s=0.110, upload_s=0.080)
    margin_s = max(RIDE_MARGIN_MIN_S, RIDE_MARGIN_FRACTION * 0.080)
    ride_s = 100.0 + 0.110 - 0.080 - margin_s
    # due early: it waits until then, gathering what arrives meanwhile into the same upload
    assert delay_cut_s(q, 100.005) == pytest.approx(ride_s)
    # due (or woken) within the margin: it goes at once
    assert delay_cut_s(q, ride_s + margin_s / 2) == pytest.approx(ride_s + margin_s / 2)
    # too late to ride that group commit: at once, as with nothing in flight
    assert delay_cut_s(q, 100.05) == 100.05


def test_a_partial_batch_uploading_does_not_hold_back_one_that_can_still_ride_the_next_group() -> None:
    """The regression: the old hold made such a batch upload after the one ahead, missing the group
    commit that follows the one in flight, and so wait a whole commit more."""
    q = _queue(committing=True, started_s=100.0, commit_s=0.110, upload_s=0.080, stages=(UPLOADING,))
    assert delay_cut_s(q, 100.005) == pytest.approx(100.0 + 0.110 - 0.080 * (1 + RIDE_MARGIN_FRACTION))
    # past the moment it could ride, it waits for the upload ahead (and goes with what arrives meanwhile)
    assert delay_cut_s(q, 100.05) is None


def test_a_commit_shorter_than_an_upload_leaves_no_moment_to_ride() -> None:
    q = _queue(committing=True, started_s=100.0, commit_s=0.002, upload_s=0.003, stages=(UPLOADING,))
    assert delay_cut_s(q, 100.0) is None
    assert delay_cut_s(_queue(committing=True, started_s=100.0, commit_s=0.002, upload_s=0.003), 100.0) == 100.0
