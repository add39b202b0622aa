"""Shared fixtures: fresh storage roots; the SparkSession fixture joins with the connector."""

from __future__ import annotations

import os
import sys

# Spark workers must run this interpreter (see DESIGN.md section 6).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

sys.path.insert(0, os.path.dirname(__file__))

from moto_s3 import MotoS3, Root, start_moto, stop_moto

# Hypothesis's default 200 ms deadline per example is a timed assertion, which the suite does not make
# (a loaded 2-core machine ran an example of test_hashing.py in 266 ms); examples stay bounded by count.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[MotoS3]:
    """An S3 emulator on 127.0.0.1 for the whole session; its settings are also exported as the standard
    ``AWS_*`` variables, so worker processes reach it with no options (the way a deployment would)."""
    server = start_moto()
    saved = {key: os.environ.get(key) for key in server.environment}
    os.environ.update(server.environment)
    try:
        yield server
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        stop_moto(server)


@pytest.fixture(params=["local", "s3"])
def any_root(request: pytest.FixtureRequest, tmp_path: Path) -> Root:
    """One test, two backends: a fresh folder, and a fresh prefix on the S3 emulator (worker processes
    reach it through the ``AWS_*`` environment the ``moto_s3`` fixture exports, as a deployment would)."""
    if request.param == "local":
        (tmp_path / "root").mkdir()  # an existing root, as on S3 (a missing one is RootNotFound)
        return Root("local", str(tmp_path / "root"), {})
    server: MotoS3 = request.getfixturevalue("moto_s3")
    return Root("s3", server.fresh_root(), server.storage_options)

