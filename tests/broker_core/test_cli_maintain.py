"""``pubsub maintain``: one pass or ``--every`` N passes, one JSON line per pass, typed usage errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jobs_worker import append, make_broker

from broker_core.cli import maintain as maintain_cli
from broker_core.cli.app import main

T = "persistent://public/default/t"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "root"
    append(make_broker(path), topic=T)
    (path / "_pubsub").mkdir(exist_ok=True)
    (path / "_pubsub" / "broker.toml").write_text("fsyncEnabled = false\n")
    return path


def run(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["--root", str(root), "maintain", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_one_dry_run_pass_prints_its_summary_and_changes_nothing(root: Path, capsys: Any) -> None:
    code, out, err = run(root, capsys, "--json")
    assert code == 0, err
    (summary,) = [json.loads(line) for line in out.splitlines()]
    assert summary["status"] == "done" and summary["execute"] is False
    assert summary["topics"][0]["topic"] == T and summary["topics"][0]["jobs"]["retention"]["changed"] is False
    code, out, _ = run(root, capsys, "--namespace", "public/default")
    assert code == 0 and "dry run: nothing was changed" in out and f"{T}: ran retention" in out


def test_every_runs_the_given_number_of_passes(root: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr(maintain_cli, "_sleep", waits.append)
    code, out, err = run(root, capsys, "--all", "--every", "1m", "--passes", "3", "--execute", "--json")
    assert code == 0, err
    passes = [json.loads(line) for line in out.splitlines()]
    assert [p["status"] for p in passes] == ["done"] * 3 and len(waits) == 2 and all(0 < w <= 60 for w in waits)
    assert passes[0]["topics"][0]["jobs"]["retention"]["changed"] is True
    assert passes[1]["topics"] == []  # nothing due a moment later


def test_every_outlives_a_failed_pass(root: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(maintain_cli, "_sleep", lambda s: None)
    real, calls = maintain_cli.run_maintenance_pass, []

    def flaky(*a: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("storage unreachable")
        return real(*a, **kw)

    monkeypatch.setattr(maintain_cli, "run_maintenance_pass", flaky)
    code, out, err = run(root, capsys, "--every", "1m", "--passes", "2", "--json")
    assert code == 0, err
    first, second = (json.loads(line) for line in out.splitlines())
    assert first["status"] == "error" and "storage unreachable" in first["error"] and second["status"] == "done"
    monkeypatch.setattr(maintain_cli, "run_maintenance_pass", lambda *a, **kw: (_ for _ in ()).throw(OSError("x")))
    assert run(root, capsys)[0] == 1  # a single pass reports its failure


def test_the_log_ages_can_be_chosen(root: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    real = maintain_cli.run_maintenance_pass
    monkeypatch.setattr(maintain_cli, "run_maintenance_pass",
                        lambda *a, **kw: seen.append(kw["schedule"]) or real(*a, **kw))
    code, _, err = run(root, capsys, "--vacuum-min-age", "1h", "--log-retention", "2d")
    assert code == 0, err
    assert seen[0].vacuum_min_age_ms == 3_600_000 and seen[0].log_retention_ms == 2 * 86_400_000
    code, _, err = run(root, capsys, "--vacuum-min-age", "2m", "--log-retention", "1m")  # under the 1 h guard
    assert code == 0, err
    assert seen[1].vacuum_min_age_ms == 120_000 and seen[1].log_retention_ms == 60_000
    assert seen[1].orphan_min_age_ms == 3_600_000  # files no commit names keep the one-hour floor
    code, _, err = run(root, capsys)  # the defaults: the broker settings (10 minutes each)
    assert code == 0, err
    assert seen[2].vacuum_min_age_ms == 600_000 and seen[2].log_retention_ms == 600_000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--every", "soon"], "invalid duration 'soon'"),
        (["--every", "0s"], "above zero"),
        (["--namespace", "public/default", "--all"], "not allowed with argument"),
        (["--passes", "2"], "--passes goes with --every"),
        (["--namespace", "public/nope"], "namespace public/nope does not exist"),
        (["--namespace", "public/nope", "--every", "1m"], "namespace public/nope does not exist"),
        (["--vacuum-min-age", "59s"], "--vacuum-min-age is under the minimum of 60 seconds"),
        (["--vacuum-min-age", "0s"], "--vacuum-min-age is under the minimum"),
        (["--vacuum-min-age=-5m"], "invalid duration '-5m'"),
        (["--vacuum-min-age", "ten"], "invalid duration 'ten'"),
        (["--log-retention", "30s"], "--log-retention is under the minimum"),
        (["--log-retention", "0m"], "--log-retention is under the minimum"),
    ],
)
def test_bad_input_is_refused(root: Path, capsys: Any, args: list[str], message: str) -> None:
    code, out, err = run(root, capsys, *args)
    assert code in (1, 2) and message in err and out == ""
