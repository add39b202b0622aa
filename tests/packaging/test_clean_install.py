"""Installed from its wheel into an empty virtualenv, the package works (issue 28).

The editable install the suite runs under hides what a wheel leaves out: a module every test
environment happens to have (numpy came with pyarrow's test extras, pandas, pyspark) but the wheel
never declared, or a ``py.typed`` that ``package-data`` names and the source tree lacks.  So this
test builds the wheel from a copy of the sources and installs it into a virtualenv with no system
site-packages (dependencies come from the package index, as a user's ``pip install`` gets them).
From a folder outside the repository it runs what a user runs first: the client (produce,
consume), the ``pubsub`` command (``--help``, ``--version``, ``topics list``) and mypy on a small
script importing ``broker_core``.  Only then does it add the ``[spark]`` extra (pip's cache keeps
pyspark's built wheel, which the ``make`` install leaves there) and read the topic the client wrote
with ``spark.read.format("pubsub")``: the extra brings pandas and numpy, which would hide a module
the core imports and does not declare.

It takes about 40 s on a 2-core machine (venv 3 s, installs 15 s, Spark 16 s); one test, so a
parallel run builds one virtualenv.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.packaging, pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("broker_core", "spark_pubsub", "pyspark_pubsub", "pyproject.toml", "README.md", "LICENSE")
INSTALL_TIMEOUT_S = 600  # a cold pip cache downloads pyarrow and pyspark

PRODUCE = """\
import sys

from broker_core import Client, InitialPosition

client = Client(sys.argv[1], create_root=True)
producer = client.create_producer("orders")
for i in range(3):
    producer.send(f"order-{i}".encode(), partition_key=f"k{i}")
producer.flush()
consumer = client.subscribe("orders", "billing", initial_position=InitialPosition.Earliest)
received = []
for _ in range(3):
    message = consumer.receive(timeout_millis=10_000)
    received.append(message.data().decode())
    consumer.acknowledge(message)
client.close()
print(",".join(received))
"""

TYPED_USER = """\
import broker_core
from broker_core import Client, MessageId

client = Client("/nonexistent/root")
version: str = broker_core.__version__
wrong: int = MessageId.earliest  # the one error mypy must report: it reads broker_core's types
"""

SPARK_READ = """\
import sys

from pyspark.sql import SparkSession

spark = (SparkSession.builder.master("local[1]").appName("clean-install")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1").getOrCreate())
try:
    rows = spark.read.format("pubsub").option("topic", "orders").load(sys.argv[1]).collect()
    print(",".join(sorted(bytes(row.value).decode() for row in rows)))
finally:
    spark.stop()
"""


def _build_wheel(tmp_path: Path) -> Path:
    """The wheel, built without network from a copy of the sources (``pip wheel`` builds in the tree
    it is given, and tests/packaging/test_discovery.py builds from the repository at the same time)."""
    src = tmp_path / "src"
    for name in SOURCES:
        origin = REPO / name
        if origin.is_dir():
            shutil.copytree(origin, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(origin, src / name)
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(wheels),
          str(src)], cwd=tmp_path, timeout=300)
    (wheel,) = wheels.glob("spark_pubsub-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {"broker_core/py.typed", "spark_pubsub/py.typed"} <= names, "the typing markers are not in the wheel"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "the LICENSE is not in the wheel"
    return wheel


def _clean_env(python: Path) -> dict[str, str]:
    """This process's environment without anything pointing into the repository or its virtualenv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = str(python)
    return env


def _run(argv: list[str], *, cwd: Path, timeout: float, env: dict[str, str] | None = None,
         check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def test_the_wheel_works_in_a_clean_virtualenv(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False, clear=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    env = _clean_env(Path(python))
    user = tmp_path / "user"  # the working directory: nothing of the repository is importable from it
    user.mkdir()
    # the core first: the [spark] extra brings pandas, and with it numpy, which would hide a module
    # the core imports and does not declare
    _run([python, "-m", "pip", "install", "--quiet", str(wheel)], cwd=user, env=env, timeout=INSTALL_TIMEOUT_S)
    located = _run([python, "-c", "import broker_core; print(broker_core.__file__)"], cwd=user, env=env,
                   timeout=60)
    assert Path(located.stdout.strip()).is_relative_to(env_dir), located.stdout  # the wheel's copy, not the repo's

    root = tmp_path / "root"
    (user / "produce.py").write_text(PRODUCE)
    produced = _run([python, "produce.py", str(root)], cwd=user, env=env, timeout=120)
    assert produced.stdout.split() == ["order-0,order-1,order-2"]

    pubsub = str(env_dir / "bin" / "pubsub")
    assert "usage: pubsub" in _run([pubsub, "--help"], cwd=user, env=env, timeout=60).stdout
    version = _run([python, "-c", "import importlib.metadata as m; print(m.version('spark-pubsub'))"],
                   cwd=user, env=env, timeout=60).stdout.strip()
    assert _run([pubsub, "--version"], cwd=user, env=env, timeout=60).stdout.split() == ["pubsub", version]
    listed = _run([pubsub, "--root", str(root), "topics", "list", "public/default"], cwd=user, env=env, timeout=60)
    assert listed.stdout.split() == ["persistent://public/default/orders"]

    (user / "typed_user.py").write_text(TYPED_USER)
    checked = _run([sys.executable, "-m", "mypy", "--python-executable", python, "--no-incremental",
                    "--cache-dir", os.devnull, "--no-error-summary", "typed_user.py"],
                   cwd=user, env=env, timeout=300, check=False)
    assert "import-untyped" not in checked.stdout, checked.stdout
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "typed_user.py:6:" in errors[0] and "[assignment]" in errors[0], checked.stdout

    _run([python, "-m", "pip", "install", "--quiet", f"{wheel}[spark]"], cwd=user, env=env,
         timeout=INSTALL_TIMEOUT_S)
    (user / "spark_read.py").write_text(SPARK_READ)
    read = _run([python, "spark_read.py", str(root)], cwd=user, env=env, timeout=300)
    assert read.stdout.split()[-1:] == ["order-0,order-1,order-2"], read.stdout + read.stderr
