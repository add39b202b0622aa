"""``spark_pubsub.jobs maintain``: the maintenance pass with the topics spread over Spark tasks; the
driver holds the lease and records the last-run times."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from broker_core import Client
from broker_core.broker.broker import Broker
from broker_core.jobs.maintain import JOBS, read_last_pass, read_last_runs, state_store
from broker_core.jobs.maintenance_lease import MaintenanceLease
from spark_pubsub.jobs import main

TOPICS = [f"persistent://public/default/m{i}" for i in range(3)]


def make_root(tmp_path: Path) -> str:
    root = tmp_path / "root"
    (root / "_pubsub").mkdir(parents=True)
    (root / "_pubsub" / "broker.toml").write_text("fsyncEnabled = false\n")
    client = Client(str(root))
    try:
        for topic in TOPICS:
            producer = client.create_producer(topic)
            producer.send(b"x")
            producer.close()
    finally:
        client.close()
    return str(root)


def spark_job(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    capsys.readouterr()
    assert main(list(args)) == 0
    return dict(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))


def test_maintain_runs_every_due_job_in_tasks_and_records_last_runs(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_root(tmp_path)
    dry = spark_job(capsys, "maintain", "--root", root, "--all", "--parallelism", "2")
    assert dry["status"] == "done" and dry["execute"] is False
    assert read_last_runs(state_store(Broker.for_url(root))) == {}  # a dry run records nothing

    summary = spark_job(capsys, "maintain", "--root", root, "--namespace", "public/default", "--execute")
    assert summary["status"] == "done"
    assert {t["topic"]: sorted(t["jobs"]) for t in summary["topics"]} == {t: sorted(JOBS) for t in TOPICS}
    assert all(t["jobs"]["retention"]["changed"] for t in summary["topics"])  # no subscription holds them
    assert set(read_last_runs(state_store(Broker.for_url(root)))) == set(TOPICS)
    last = read_last_pass(state_store(Broker.for_url(root)))  # what the exporter publishes
    assert last is not None
    assert (last["status"], last["topics"], last["jobsRun"], last["errors"]) == (
        "done", len(TOPICS), len(TOPICS) * len(JOBS), 0)
    assert spark_job(capsys, "maintain", "--root", root, "--execute")["topics"] == []  # nothing due yet


def test_maintain_stands_by_while_another_runner_leads(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_root(tmp_path)
    assert MaintenanceLease(Broker.for_url(root).io, holder="elsewhere").acquire()
    summary = spark_job(capsys, "maintain", "--root", root, "--execute")
    assert summary["status"] == "standby" and summary["leader"] == "elsewhere" and summary["topics"] == []
