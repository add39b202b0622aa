"""The Spark entry points of retention, TTL, segment merging and vacuum (``spark_pubsub/jobs.py``): one task per
internal topic, the same decisions as the library (and the ``pubsub`` command) for the same "now",
dry runs unless ``--execute``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from broker_core import Client
from broker_core.cli import main as pubsub
from spark_pubsub.jobs import main

NS = "public/default"


def make_root(tmp_path: Path) -> str:
    root = tmp_path / "root"
    (root / "_pubsub").mkdir(parents=True)
    (root / "_pubsub" / "broker.toml").write_text("fsyncEnabled = false\n")
    return str(root)


def send(root: str, topic: str, count: int) -> None:
    client = Client(root)
    try:
        producer = client.create_producer(topic)
        for i in range(count):
            producer.send(f"m{i}".encode(), partition_key=f"k{i}")
        producer.close()
    finally:
        client.close()


def spark_job(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    capsys.readouterr()
    assert main(list(args)) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def cli(capsys: pytest.CaptureFixture[str], root: str, *args: str) -> dict[str, Any]:
    capsys.readouterr()
    assert pubsub(["--root", root, *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def comparable(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in ("version",)} for r in results]


def test_retention_ttl_and_vacuum_run_per_internal_topic(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_root(tmp_path)
    cli(capsys, root, "topics", "create", "p", "--partitions", "3")
    cli(capsys, root, "topics", "create", "t")
    cli(capsys, root, "subscriptions", "create", "p", "s")
    send(root, "p", 6)
    send(root, "t", 3)
    now = str(int(time.time() * 1000) + 120_000)
    common = ("--root", root, "--now", now)

    ttl_dry = spark_job(capsys, "ttl", *common, "--namespace", NS, "--ttl", "1m", "--subscription", "s")
    assert ttl_dry["dryRun"] and not ttl_dry["changed"]
    assert [r["topic"] for r in ttl_dry["results"]] == [
        f"persistent://{NS}/p-partition-{i}" for i in range(3)
    ]
    assert sum(r["expiredMessages"] for r in ttl_dry["results"]) == 6
    assert cli(capsys, root, "topics", "stats", "p")["msgBacklog"] == {"s": 6}
    ttl = spark_job(capsys, "ttl", *common, "--topic", "p", "--ttl", "1m", "--execute")
    assert ttl["changed"] and cli(capsys, root, "topics", "stats", "p")["msgBacklog"] == {"s": 0}

    retention_args = ("--time", "0", "--size", "0")
    dry = spark_job(capsys, "retention", *common, "--namespace", NS, *retention_args)
    local = cli(capsys, root, "retention", "--namespace", NS, "--now", now, *retention_args)
    assert comparable(dry["results"]) == comparable(local["results"])
    assert sum(r["removedMessages"] for r in dry["results"]) == 9 and not dry["changed"]
    done = spark_job(capsys, "retention", *common, "--namespace", NS, *retention_args, "--execute")
    assert done["changed"] and all(r["version"] is not None for r in done["results"])
    assert cli(capsys, root, "topics", "stats", "p")["msgCount"] == 0

    later = str(int(time.time() * 1000) + 3 * 3_600_000)
    vacuum = ("vacuum", "--root", root, "--now", later, "--namespace", NS, "--min-age", "1h")
    planned = spark_job(capsys, *vacuum)
    assert sum(len(r["deletedRemoved"]) for r in planned["results"]) == 9
    assert len(list(Path(root).rglob("part-*.parquet"))) == 9
    spark_job(capsys, *vacuum, "--execute")
    assert list(Path(root).rglob("part-*.parquet")) == []


def test_bad_arguments_are_refused_before_any_task(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_root(tmp_path)
    cli(capsys, root, "topics", "create", "t")
    with pytest.raises(SystemExit):
        main(["vacuum", "--root", root, "--topic", "t"])  # --min-age is required
    with pytest.raises(SystemExit):
        main(["retention", "--root", root, "--topic", "t", "--namespace", NS])
    from broker_core.errors import InvalidConfiguration, SubscriptionNotFound, TopicNotFound

    with pytest.raises(TopicNotFound):
        main(["retention", "--root", root, "--topic", "ghost"])
    with pytest.raises(SubscriptionNotFound):
        main(["ttl", "--root", root, "--topic", "t", "--subscription", "ghost"])
    with pytest.raises(InvalidConfiguration, match="safe minimum"):
        main(["vacuum", "--root", root, "--topic", "t", "--min-age", "1m"])
    with pytest.raises(InvalidConfiguration, match="contradictory"):
        main(["retention", "--root", root, "--topic", "t", "--time", "0", "--size", "-1"])


def test_merge_segments_runs_per_internal_topic(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_root(tmp_path)
    cli(capsys, root, "topics", "create", "m", "--partitions", "2")
    send(root, "m", 10)  # one segment per message
    peek = ("topics", "peek", "m-partition-0", "--earliest", "-n", "20")
    before = cli(capsys, root, *peek)["messages"]
    common = ("--root", root, "--topic", "m", "--min-age", "0s")
    dry = spark_job(capsys, "merge-segments", *common)
    local = cli(capsys, root, "merge-segments", "m", "--min-age", "0s")
    assert comparable(dry["results"]) == comparable(local["results"]) and not dry["changed"]
    assert sum(r["segmentsBefore"] for r in dry["results"]) == 10
    done = spark_job(capsys, "merge-segments", *common, "--execute")
    assert done["changed"] and [r["segmentsAfter"] for r in done["results"]] == [1, 1]
    assert cli(capsys, root, *peek)["messages"] == before  # same messages, offsets and ids
    from broker_core.errors import InvalidConfiguration

    with pytest.raises(InvalidConfiguration, match="min_segments"):
        main(["merge-segments", *common, "--min-segments", "1"])
