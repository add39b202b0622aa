"""Progress of long jobs on a terminal, and ``pubsub topics stats --chart``.

Progress is drawn on stderr only when it is a terminal and ``--json`` was not given; the library
jobs themselves never write to stderr.  A fake terminal (a StringIO that says it is a tty) stands
in for stderr in-process; one test runs the real command with stderr on a pseudo-terminal.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import pty
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from broker_core import BrokerConfig, Client
from broker_core.broker.broker import Broker
from broker_core.cli import main
from broker_core.cli.chart import bar_chart, can_draw_blocks
from broker_core.cli.progress import TerminalProgress, terminal_progress
from broker_core.jobs import merge_segments, reporting_progress, run_retention
from broker_core.jobs.progress import JobProgress

T = "persistent://public/default/t"


class FakeTerminal(io.StringIO):
    """A stderr that claims to be a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "root"
    (path / "_pubsub").mkdir(parents=True)
    (path / "_pubsub" / "broker.toml").write_text("fsyncEnabled = false\n")
    return path


@pytest.fixture
def topic(root: Path) -> Iterator[Path]:
    """A partitioned topic (3 partitions) with 4 small segments per partition and two subscriptions:
    'behind' acknowledged nothing, 'caught-up' everything."""
    client = Client(str(root))
    client._broker.admin.create_partitioned_topic(T, 3)
    client._broker.create_subscription(T, "behind")
    producer = client.create_producer(T)
    for _ in range(4):
        producer.send_table(pa.table({"value": [b"x" * 10] * 30, "key": [f"k{i}" for i in range(30)]}))
    producer.close()
    client._broker.create_subscription(T, "caught-up", earliest=False)
    client.close()
    yield root


def terminal_stderr(monkeypatch: pytest.MonkeyPatch) -> FakeTerminal:
    """Make stderr a terminal.  Called in the test body: pytest's capture swaps sys.stderr again when
    the call phase starts, after any fixture could have set it."""
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    return terminal


def run(root: Path, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["--root", str(root), *args])
    return code, capsys.readouterr().out


# --- progress ---------------------------------------------------------------------------------------


def test_a_job_draws_progress_on_a_terminal_and_clears_it(
    topic: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_stderr = terminal_stderr(monkeypatch)
    code, out = run(topic, "merge-segments", T, "--min-age", "0s", "--execute", capsys=capsys)
    assert code == 0
    drawn = fake_stderr.getvalue()
    for index in (1, 2, 3):
        assert f"[merge-segments] {index}/3 {T}-partition-{index - 1}" in drawn, drawn
    assert "run 1/1 (4 segments)" in drawn  # the step inside a partition
    assert drawn.endswith("\r\x1b[K")  # the line is gone before the summary prints
    assert "merged 4 segment(s)" in out


def test_json_output_draws_no_progress(
    topic: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_stderr = terminal_stderr(monkeypatch)
    code, out = run(topic, "merge-segments", T, "--min-age", "0s", "--json", capsys=capsys)
    assert code == 0
    assert fake_stderr.getvalue() == ""
    assert json.loads(out)["job"] == "merge-segments"


def test_no_progress_when_stderr_is_not_a_terminal(topic: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run(topic, "retention", T, capsys=capsys)
    assert code == 0
    assert capsys.readouterr().err == ""


def test_compaction_reports_progress_too(
    topic: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_stderr = terminal_stderr(monkeypatch)
    code, _ = run(topic, "compact", T, capsys=capsys)
    assert code == 0
    assert f"[compaction] 3/3 {T}-partition-2" in fake_stderr.getvalue()
    assert fake_stderr.getvalue().endswith("\r\x1b[K")


def test_a_failing_command_clears_the_line_before_the_error(
    topic: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_stderr = terminal_stderr(monkeypatch)
    merge_module = importlib.import_module("broker_core.jobs.merge_segments")  # the package re-exports a
    # function of the same name, so attribute access would find that

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(merge_module, "merge_run", broken)
    code, _ = run(topic, "merge-segments", T, "--min-age", "0s", "--execute", capsys=capsys)
    assert code == 1
    err = fake_stderr.getvalue()
    assert err.index("\r\x1b[K") < err.index("pubsub: error: storage error: No space left on device")


def test_the_library_never_writes_to_stderr(topic: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_stderr = terminal_stderr(monkeypatch)
    """A job called from Python (a notebook, spark-submit) prints nothing, even on a terminal."""
    broker = Broker.for_url(str(topic), BrokerConfig(fsync_enabled=False))
    merge_segments(broker, T, min_age_ms=0, dry_run=False)
    assert fake_stderr.getvalue() == ""


def test_a_listener_receives_topics_and_steps(topic: Path) -> None:
    events: list[tuple[Any, ...]] = []

    class Recorder:
        def topic_started(self, job: str, index: int, total: int, topic: str) -> None:
            events.append(("topic", job, index, total, topic))

        def step(self, job: str, detail: str) -> None:
            events.append(("step", job, detail))

        def job_finished(self, job: str) -> None:
            events.append(("done", job))

    broker = Broker.for_url(str(topic), BrokerConfig(fsync_enabled=False))
    with reporting_progress(Recorder()):
        run_retention(broker, T, dry_run=True)
    run_retention(broker, T, dry_run=True)  # outside the block: nobody is told
    assert events == [
        ("topic", "retention", 0, 3, f"{T}-partition-0"),
        ("topic", "retention", 1, 3, f"{T}-partition-1"),
        ("topic", "retention", 2, 3, f"{T}-partition-2"),
        ("done", "retention"),
    ]


def test_the_ticker_redraws_the_elapsed_time() -> None:
    terminal = FakeTerminal()
    listener = TerminalProgress(terminal, tick_s=0.01)
    progress: JobProgress[Any] = JobProgress("vacuum", "x", total=1, dry_run=True, listener=listener)
    progress.start("persistent://public/default/x")
    drawn_once = terminal.getvalue().count("[vacuum]")
    deadline_polls = 0
    while terminal.getvalue().count("[vacuum]") == drawn_once and deadline_polls < 500:
        select.select([], [], [], 0.01)  # let the ticker run (bounded: 5 s at most)
        deadline_polls += 1
    listener.close()
    assert terminal.getvalue().count("[vacuum]") > drawn_once
    assert terminal.getvalue().endswith("\r\x1b[K")


def test_terminal_progress_is_off_for_json_and_pipes() -> None:
    with terminal_progress(json_output=True, stream=FakeTerminal()) as listener:
        assert listener is None
    with terminal_progress(json_output=False, stream=io.StringIO()) as listener:
        assert listener is None
    with terminal_progress(json_output=False, stream=FakeTerminal()) as listener:
        assert listener is not None


def test_progress_on_a_real_pseudo_terminal(topic: Path) -> None:
    """The installed command, stderr on a pty: the progress line reaches the terminal."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "broker_core.cli", "--root", str(topic), "retention", T],
            stderr=follower, stdout=subprocess.PIPE, timeout=60, check=False,
        )
        os.close(follower)
        follower = -1
        chunks = []
        while select.select([leader], [], [], 0.5)[0]:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the writer side is closed and drained
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    assert proc.returncode == 0, proc
    drawn = b"".join(chunks).decode()
    assert f"[retention] 3/3 {T}-partition-2" in drawn, drawn
    assert "retention of" in proc.stdout.decode()


# --- topics stats --chart ---------------------------------------------------------------------------


def test_stats_chart_draws_backlog_per_subscription(topic: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(topic, "topics", "stats", T, "--chart", capsys=capsys)
    assert code == 0
    lines = out.splitlines()
    start = lines.index("backlog per subscription:")
    behind, caught_up = lines[start + 1], lines[start + 2]
    assert behind.split()[0] == "behind" and behind.endswith("120 msg")
    assert caught_up.split()[0] == "caught-up" and caught_up.endswith("0 msg")
    assert behind.count("█") == 40 or behind.count("#") == 40  # the largest backlog fills the width
    assert "█" not in caught_up and "#" not in caught_up


def test_stats_chart_without_subscriptions_says_why(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--root", str(root), "topics", "create", "lonely"]) == 0
    capsys.readouterr()
    code, out = run(root, "topics", "stats", "lonely", "--chart", capsys=capsys)
    assert code == 0
    assert "no subscriptions, nothing to chart" in out


def test_stats_chart_leaves_json_unchanged(topic: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, plain = run(topic, "topics", "stats", T, "--json", capsys=capsys)
    _, charted = run(topic, "topics", "stats", T, "--json", "--chart", capsys=capsys)
    assert json.loads(charted)["msgBacklog"] == json.loads(plain)["msgBacklog"] == {"behind": 120, "caught-up": 0}


def test_bar_chart_scales_to_the_largest_value() -> None:
    lines = bar_chart({"a": 80, "b": 40, "c": 1, "d": 0}, unit="msg", width=8)
    assert lines[0] == "a  ████████  80 msg"
    assert lines[1] == "b  ████      40 msg"
    assert lines[2].startswith("c  ▏")  # a small value is a sliver, not nothing
    assert lines[3] == "d            0 msg"
    assert bar_chart({"a": 3, "b": 0}, unit="msg", width=4, blocks=False) == ["a  ####  3 msg", "b        0 msg"]
    assert bar_chart({"a": 0}, unit="msg", width=3) == ["a       0 msg"]


def test_bar_chart_refuses_what_it_cannot_draw() -> None:
    with pytest.raises(ValueError, match="values >= 0"):
        bar_chart({"a": -1}, unit="msg")
    with pytest.raises(ValueError, match="width must be >= 1"):
        bar_chart({"a": 1}, unit="msg", width=0)


def test_blocks_only_where_the_encoding_has_them() -> None:
    assert can_draw_blocks("utf-8")
    assert not can_draw_blocks("ascii")
    assert not can_draw_blocks("no-such-codec")
    assert not can_draw_blocks(None)
