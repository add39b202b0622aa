"""When a batch cut by the publish delay goes: at once, at the last moment it can still ride the
partition's next group commit, or after the partial batch uploading ahead of it (D79).

Mostly pure state: a ``PartitionQueue`` with its timings set by hand; one test goes through a
producer on an in-memory store whose requests it holds.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from test_producer_pipeline import Recording, T, _client

from broker_core import MessageId, Result
from broker_core.client.builder import QueuedBatch
from broker_core.client.partition_queue import (
    RIDE_MARGIN_FRACTION,
    RIDE_MARGIN_MIN_S,
    UPLOADED,
    UPLOADING,
    InFlight,
    PartitionQueue,
    delay_cut_s,
)
from broker_core.storage import file_io_for


def _queue(*, committing: bool = False, started_s: float = 100.0, commit_s: float = 0.0,
           upload_s: float = 0.0, stages: tuple[int, ...] = (), partial: bool = True) -> PartitionQueue:
    q = PartitionQueue(log=None, registry=None)  # type: ignore[arg-type]  # neither is touched here
    q.committing = committing
    q.commit_started_s = started_s
    q.commit_s = commit_s
    q.upload_s = upload_s
    for stage in stages:
        item: Any = InFlight(QueuedBatch(0.0), None, [], 0, False, None, partial)
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


# --- the sender thread, on a store whose requests a test holds -------------------------------------------


@pytest.fixture
def memory() -> Iterator[tuple[str, Recording]]:
    url = f"memory://batchcut{uuid.uuid4().hex[:12]}/root"
    io = file_io_for(url)
    recording = Recording(io.ops)
    io.ops = recording
    yield url, recording


def test_while_a_commit_is_in_flight_a_due_batch_uploads_beside_the_partial_batch_ahead(
        memory: tuple[str, Recording]) -> None:
    """Through the producer: with a commit held in flight and a partial batch's upload held behind
    it, a batch that can still ride the next group commit uploads at once (the old hold kept it
    back until the upload ahead returned); callbacks still wait for their commit, in send order."""
    url, ops = memory
    client = _client(url)
    release = threading.Event()
    segment_puts: list[threading.Event] = [threading.Event() for _ in range(3)]
    try:
        producer = client.create_producer(T, batching_enabled=True, batching_max_publish_delay_ms=1,
                                          max_pending_messages=10_000, block_if_queue_full=True)
        producer.send(b"first")  # registration and a first commit, which times an upload and a commit
        seen = [0]

        def hold(key: str) -> None:
            if "/part-" in key:
                index = seen[0]
                seen[0] += 1
                if index < len(segment_puts):
                    segment_puts[index].set()
                if index == 1:  # the partial batch uploading ahead
                    assert release.wait(timeout=30)
            elif "/_delta_log/" in key:  # the commit in flight
                assert release.wait(timeout=30)

        ops.before_put = hold
        done: list[int] = []
        producer.send_async(b"m0", lambda res, _id: done.append(0) if res == Result.Ok else None)
        assert segment_puts[0].wait(timeout=30)  # its commit is then held in flight
        producer.send_async(b"m1", lambda res, _id: done.append(1) if res == Result.Ok else None)
        assert segment_puts[1].wait(timeout=30)  # its upload is held
        q = producer._queues[0]
        with producer._cond:  # timings that put the moment to ride the next group commit at now
            q.commit_s = 10.0
            q.upload_s = (q.commit_started_s + q.commit_s - time.monotonic()) / (1 + RIDE_MARGIN_FRACTION)
        producer.send_async(b"m2", lambda res, _id: done.append(2) if res == Result.Ok else None)
        assert segment_puts[2].wait(timeout=30), "the due batch waited for the upload ahead"
        assert done == []  # nothing is acknowledged before its commit
        release.set()
        producer.flush()
        assert done == [0, 1, 2]
        reader = client.create_reader(T, MessageId.earliest)
        assert [reader.read_next(5000).data() for _ in range(4)] == [b"first", b"m0", b"m1", b"m2"]
        producer.close()
    finally:
        release.set()
        client.close()
