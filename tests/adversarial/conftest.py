"""Helpers of the adversarial probes: a root with one topic, hand-written commits, a CLI runner.

Each probe damages a temporary root the way an attacker or a bad day would (a hand-edited commit,
a truncated file, an odd value) and checks that nothing outside the root is touched, nothing
acknowledged vanishes silently, and every error is a typed subclass of ``PulsarException``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core import Client
from broker_core.cli import main

T = "persistent://public/default/t"
TOPIC_DIR = "public/default/persistent/t"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A root (fsync off) inside ``tmp_path``, so files "beside the root" are in ``tmp_path``."""
    path = tmp_path / "root"
    (path / "_pubsub").mkdir(parents=True)
    (path / "_pubsub" / "broker.toml").write_text("fsyncEnabled = false\n")
    return path


@pytest.fixture
def client(root: Path) -> Iterator[Client]:
    c = Client(str(root))
    yield c
    c.close()


def produce(client: Client, values: list[bytes], *, topic: str = T, batches: int = 1) -> None:
    """Send ``values`` in ``batches`` flushes, each flush one commit (one segment)."""
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=10_000)
    size = max(1, len(values) // batches)
    for start in range(0, len(values), size):
        for value in values[start:start + size]:
            producer.send_async(value, None)
        producer.flush()
    producer.close()


def log_dir(root: Path) -> Path:
    return root / TOPIC_DIR / "_delta_log"


def commit_file(root: Path, version: int) -> Path:
    return log_dir(root) / f"{version:020d}.json"


def newest_version(root: Path) -> int:
    return max(int(p.name[:20]) for p in log_dir(root).glob("*.json"))


def write_commit(root: Path, actions: list[dict[str, Any]]) -> int:
    """Hand-write the next commit (as anyone able to write one object under the root could)."""
    version = newest_version(root) + 1
    commit_file(root, version).write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    return version


@pytest.fixture
def cli(root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``cli(*args)`` -> (exit code, stdout, stderr) of ``pubsub --root <root> *args``."""
    monkeypatch.delenv("PUBSUB_ROOT", raising=False)

    def run(*args: str) -> tuple[int, str, str]:
        code = main(["--root", str(root), *args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.fixture
def new_process(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``new_process()`` forgets the process's shared brokers, logs and cursor handles, so what opens
    next sees storage as a freshly started process would (the old handles stay valid, unshared)."""
    from broker_core import broker as broker_module

    def forget() -> None:
        for name in ("_BROKERS", "_TOPIC_LOGS", "_CURSOR_STORES"):
            monkeypatch.setattr(broker_module, name, {})

    return forget
