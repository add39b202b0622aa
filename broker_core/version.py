"""The installed version of spark-pubsub, for ``broker_core.__version__`` and ``pubsub --version``.

The one place the number is written is ``pyproject.toml``; an install records it in the package
metadata, which ``importlib.metadata`` reads.  A source tree that was never installed (a checkout on
``PYTHONPATH``) has no metadata: the version is then read from the ``pyproject.toml`` beside the
package, and a copy with neither says ``0+unknown`` rather than failing.
"""

from __future__ import annotations

import functools
import tomllib
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "spark-pubsub"
"""The distribution name (``pip install spark-pubsub``), which the metadata is filed under."""

UNKNOWN = "0+unknown"


@functools.cache
def package_version() -> str:
    """The version installed (package metadata), else the source tree's ``pyproject.toml``."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return _source_tree_version(Path(__file__).resolve().parent.parent / "pyproject.toml")


def _source_tree_version(pyproject: Path) -> str:
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return UNKNOWN
    if project.get("name") != DISTRIBUTION or not isinstance(project.get("version"), str):
        return UNKNOWN
    return str(project["version"])


__all__ = ["DISTRIBUTION", "package_version"]
