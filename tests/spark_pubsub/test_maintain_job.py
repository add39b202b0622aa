"""``spark_pubsub.jobs maintain``: the maintenance pass with the topics spread over Spark tasks; the
driver holds the lease and records the last-run times, on a folder and on S3 (the tasks reach the
emulator through the ``AWS_*`` environment, the driver through ``--storage-option`` as well)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from moto_s3 import Root

from broker_core import Client
from broker_core.broker.broker import Broker
from broker_core.jobs.maintain import JOBS, read_last_pass, read_last_runs, state_store
from broker_core.jobs.maintenance_lease import MaintenanceLease
from spark_pubsub.jobs import main

TOPICS = [f"persistent://public/default/m{i}" for i in range(3)]


def make_root(root: Root) -> Root:
    if not root.is_s3:  # fsync off, as every Spark test root (on S3 there is no fsync to turn off)
        (Path(root.url) / "_pubsub").mkdir()
        (Path(root.url) / "_pubsub" / "broker.toml").write_text("fsyncEnabled = false\n")
    client = Client(root.url, storage_options=root.storage_options)
    try:
        for topic in TOPICS:
            producer = client.create_producer(topic)
            producer.send(b"x")
            producer.close()
    finally:
        client.close()
    return root


def broker(root: Root) -> Broker:
    return Broker.for_url(root.url, storage_options=root.storage_options)


def options(root: Root) -> list[str]:
    return [arg for key, value in root.storage_options.items() for arg in ("--storage-option", f"{key}={value}")]


def spark_job(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    capsys.readouterr()
    assert main(list(args)) == 0
    return dict(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))


def test_maintain_runs_every_due_job_in_tasks_and_records_last_runs(
    spark: Any, any_root: Root, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_root(any_root)
    dry = spark_job(capsys, "maintain", "--root", root.url, *options(root), "--all", "--parallelism", "2")
    assert dry["status"] == "done" and dry["execute"] is False
    assert read_last_runs(state_store(broker(root))) == {}  # a dry run records nothing

    summary = spark_job(capsys, "maintain", "--root", root.url, *options(root), "--namespace", "public/default",
                        "--execute")
    assert summary["status"] == "done"
    assert {t["topic"]: sorted(t["jobs"]) for t in summary["topics"]} == {t: sorted(JOBS) for t in TOPICS}
    assert all(t["jobs"]["retention"]["changed"] for t in summary["topics"])  # no subscription holds them
    assert set(read_last_runs(state_store(broker(root)))) == set(TOPICS)
    last = read_last_pass(state_store(broker(root)))  # what the exporter publishes
    assert last is not None
    assert (last["status"], last["topics"], last["jobsRun"], last["errors"]) == (
        "done", len(TOPICS), len(TOPICS) * len(JOBS), 0)
    again = spark_job(capsys, "maintain", "--root", root.url, *options(root), "--execute")
    assert again["topics"] == []  # nothing due yet


def test_maintain_stands_by_while_another_runner_leads(
    spark: Any, any_root: Root, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_root(any_root)
    assert MaintenanceLease(broker(root).io, holder="elsewhere").acquire()
    summary = spark_job(capsys, "maintain", "--root", root.url, *options(root), "--execute")
    assert summary["status"] == "standby" and summary["leader"] == "elsewhere" and summary["topics"] == []
