"""Child processes of the tests: the environment they run in, running a Python one-off or probe, and
killing a job with everything it started.

One place for what the multi-process tests used to repeat: the repository first on ``PYTHONPATH``
(the child imports this checkout), Spark's workers pointed at this interpreter, output captured as
text with a bounded wait, and a crash simulated by SIGKILLing a job's whole process tree (a PySpark
daemon puts its workers in process groups of their own, so killing the job's group is not enough).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def child_env(*, path: Sequence[str | Path] = (), **extra: str) -> dict[str, str]:
    """This process's environment for a child: ``path`` then the repository first on ``PYTHONPATH``,
    ``PYSPARK_PYTHON``/``PYSPARK_DRIVER_PYTHON`` set to this interpreter, then ``extra``."""
    entries = [*map(str, path), str(REPO), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(e for e in entries if e)
    env.update(extra)
    return env


def run_python(*args: str | Path, timeout_s: float = 120, env: Mapping[str, str] | None = None,
               ok: bool = True) -> subprocess.CompletedProcess[str]:
    """Run this interpreter with ``args`` (``"-c", code, ...`` or a script and its arguments),
    capturing stdout and stderr as text; with ``ok``, fail the test unless it exited 0, showing its
    stderr."""
    done = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=timeout_s,
                          env=dict(env) if env is not None else child_env(), check=False)
    if ok:
        assert done.returncode == 0, done.stderr[-4000:]
    return done


def run_probe(script: Path, *args: str, payload: Mapping[str, Any], timeout_s: float = 120) -> dict[str, Any]:
    """Run a probe script with ``args`` and ``payload`` as JSON; return the JSON of its last output line."""
    done = run_python(script, *args, json.dumps(payload), timeout_s=timeout_s)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def process_groups(proc: subprocess.Popen[Any]) -> list[int]:
    """The process groups of a job started with ``start_new_session=True``: its own and those its
    descendants lead (PySpark's daemon gives its workers their own), the job's own last."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    tree, todo = set(), [proc.pid]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo += children.get(pid, [])
    groups = set()
    for pid in tree:
        with contextlib.suppress(OSError):
            groups.add(os.getpgid(pid))
    return sorted((g for g in groups if g in tree), key=lambda g: g == proc.pid)


def signal_groups(groups: Sequence[int], sig: signal.Signals) -> None:
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)


def kill_job(proc: subprocess.Popen[Any], groups: Sequence[int] = (), *, timeout_s: float = 30) -> None:
    """Crash a job: SIGSTOP then SIGKILL every process group of it (so none runs on while the others
    die), plus ``groups`` found earlier; wait for the job's own process."""
    found = set(groups) | (set(process_groups(proc)) if proc.poll() is None else set())
    ordered = sorted(found, key=lambda g: g == proc.pid)
    signal_groups(ordered, signal.SIGSTOP)
    signal_groups(ordered, signal.SIGKILL)
    proc.wait(timeout=timeout_s)


__all__ = ["REPO", "child_env", "kill_job", "process_groups", "run_probe", "run_python", "signal_groups"]
