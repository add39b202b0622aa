"""``format("pubsub")`` is found without ``register()``: Spark scans top-level ``pyspark_*`` modules.

Checked with pyspark's own lookup code in a fresh interpreter whose working directory is outside the
repository, for the editable install the README uses and for a wheel.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("lookup_probe.py")


def _lookup(tmp_path: Path, env_extra: dict[str, str] | None = None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(env_extra or {})
    done = subprocess.run(
        [sys.executable, str(PROBE)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_editable_install_is_discovered_from_outside_the_repo(tmp_path: Path) -> None:
    assert "pubsub" in _lookup(tmp_path)


def test_wheel_is_discovered_from_outside_the_repo(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(wheels),
         str(REPO)],
        check=True, capture_output=True, timeout=300,
    )
    (wheel,) = wheels.glob("spark_pubsub-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "pyspark_pubsub/__init__.py" in names
    assert "spark_pubsub/jvm/src/sparkpubsub/scan/PubsubScan.java" in names  # read_topic's JVM scan builds from them
    assert not any(n.startswith(("tests/", "benchmarks/", "scripts/")) for n in names)
    target = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    # only the wheel's copy of the package is importable: a venv whose editable install were broken
    # would still find it here, which is what a wheel install gives
    probe_dir = tmp_path / "cwd"
    probe_dir.mkdir()
    found = _lookup(probe_dir, {"PYTHONPATH": str(target)})
    assert "pubsub" in found
