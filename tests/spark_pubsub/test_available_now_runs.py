"""Scheduled ``Trigger.AvailableNow`` runs on one Shared/Key_Shared subscription drain it (issue 28).

Each run is a new consumer (the default ``consumerName`` is generated).  A claim-mode run used to stay
a member of the subscription until its lease lapsed, so on Key_Shared the next run got only its share
of the key ranges and left the rest of the backlog for later.  A run that ends holding no claims now
leaves at ``stop()``.  Driven through the stream reader's calls, in the order Spark makes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable
from source_job import make_root, names, produce

from spark_pubsub.options import SourceOptions, parse_options
from spark_pubsub.stream_reader import PubSubStreamReader


def available_now_run(root: str, kind: str) -> int:
    """One AvailableNow run as Spark drives it; returns how many messages its batches claimed."""
    reader = PubSubStreamReader(parse_options(SourceOptions, {
        "path": root, "topic": "ks", "subscription": "s", "subscriptiontype": kind,
        "subscriptioninitialposition": "Earliest"}))
    start: dict[str, Any] = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    claimed = 0
    try:
        while True:
            end = reader.latestOffset(start, ReadAllAvailable())
            if end == start or not any(end.get("claims", {}).values()):
                break  # nothing more up to the target: the run ends
            claimed += sum(b - a for ranges in end["claims"].values() for a, b in ranges)
            reader.commit(end)
            start = end
    finally:
        reader.stop()
    return claimed


@pytest.mark.parametrize("kind", ["Key_Shared", "Shared"])
def test_each_scheduled_available_now_run_drains_the_backlog(tmp_path: Path, kind: str) -> None:
    root = make_root(tmp_path / "root")
    produce(root, "ks", names("a", 60), keys=lambda i: f"k{i % 12}")
    assert available_now_run(root, kind) == 60
    produce(root, "ks", names("b", 60), keys=lambda i: f"k{i % 12}")
    assert available_now_run(root, kind) == 60  # the previous run's member no longer holds key ranges
    assert available_now_run(root, kind) == 0
