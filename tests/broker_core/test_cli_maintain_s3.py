"""``pubsub maintain`` on an S3 root: the command reaches the store through ``--storage-option`` and runs and
records a pass there as on a folder (``test_cli_maintain.py`` covers the flags on a folder)."""

from __future__ import annotations

import json

import pytest
from jobs_worker import append, make_broker
from moto_s3 import MotoS3

from broker_core.broker.broker import Broker
from broker_core.cli.app import main
from broker_core.jobs.maintain import JOBS, read_last_runs, state_store

T = "persistent://public/default/t"


def test_a_pass_on_s3_runs_every_job_and_records_it(moto_s3: MotoS3, capsys: pytest.CaptureFixture[str]) -> None:
    root = moto_s3.fresh_root()
    append(make_broker(root), topic=T)
    options = [f"--storage-option={k}={v}" for k, v in moto_s3.storage_options.items()]
    capsys.readouterr()
    assert main(["--root", root, *options, "maintain", "--execute", "--json"]) == 0
    (summary,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert summary["status"] == "done" and summary["execute"] is True
    assert [t["topic"] for t in summary["topics"]] == [T] and sorted(summary["topics"][0]["jobs"]) == sorted(JOBS)
    assert not summary["topics"][0].get("errors")
    recorded = read_last_runs(state_store(Broker.for_url(root, storage_options=moto_s3.storage_options)))
    assert sorted(recorded[T]) == sorted(JOBS)
    assert main(["--root", root, *options, "maintain", "--namespace", "public/nope"]) == 1
    assert "namespace public/nope does not exist" in capsys.readouterr().err
