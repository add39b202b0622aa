"""Fixtures of the adversarial probes: a root, a client, a CLI runner, a "new process".

Each probe damages a temporary root the way an attacker or a bad day would (a hand-edited commit,
a truncated file, an odd value) and checks that nothing outside the root is touched, nothing
acknowledged vanishes silently, and every error is a typed subclass of ``PulsarException``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core import Client
from broker_core.cli import main


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
    from broker_core.broker import admin as admin_module
    from broker_core.broker import broker as broker_module
    from broker_core.broker import handles as handles_module

    def forget() -> None:
        monkeypatch.setattr(broker_module, "_BROKERS", {})
        monkeypatch.setattr(admin_module, "_ADMINS", {})
        for name in ("_TOPIC_LOGS", "_CURSOR_STORES"):
            monkeypatch.setattr(handles_module, name, {})

    return forget
