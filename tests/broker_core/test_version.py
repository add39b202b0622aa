"""``broker_core.__version__`` and ``pubsub --version``: the installed metadata, else the source tree's."""

from __future__ import annotations

from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

import broker_core
from broker_core import version


@pytest.fixture
def no_metadata(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As a checkout on ``PYTHONPATH`` that was never installed: no ``spark-pubsub`` metadata."""

    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(version.metadata, "version", missing)
    version.package_version.cache_clear()
    yield
    version.package_version.cache_clear()


def test_the_version_is_the_installed_distributions() -> None:
    assert broker_core.__version__ == metadata.version("spark-pubsub") == version.package_version()


@pytest.mark.usefixtures("no_metadata")
def test_a_source_tree_reads_its_pyproject() -> None:
    assert version.package_version() == broker_core.__version__


@pytest.mark.usefixtures("no_metadata")
def test_a_copy_with_neither_says_unknown(tmp_path: Path) -> None:
    assert version._source_tree_version(tmp_path / "pyproject.toml") == "0+unknown"
    other = tmp_path / "pyproject.toml"
    other.write_text('[project]\nname = "someone-else"\nversion = "9.9"\n')
    assert version._source_tree_version(other) == "0+unknown"  # not ours: a parent project's file
    other.write_text("[project\n")
    assert version._source_tree_version(other) == "0+unknown"
