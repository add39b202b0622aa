"""One clear line when Spark's Python workers cannot import this package.

The classes Spark ships to its Python workers (the data source, its readers and writers) are pickled
by reference: a worker whose interpreter lacks spark-pubsub (``PYSPARK_PYTHON`` unset and a virtualenv
that is not activated, or a cluster node without the package) used to fail deep in a worker traceback
with ``ModuleNotFoundError``.  Classes with the ``WorkerImportable`` metaclass pickle instead as a
call of the built-in ``eval`` on a small expression that imports the class when it can and otherwise
raises ``ModuleNotFoundError`` naming both interpreters and the fix.  The expression uses only
built-ins, so it runs even where nothing of this project (or pyspark) can be imported.
"""

from __future__ import annotations

import copyreg
import sys
from abc import ABCMeta
from typing import Any

_NEEDED = ("spark_pubsub", "broker_core", "pyarrow", "pydantic", "mmh3")


def _expression(module: str, name: str) -> str:
    message = (
        "spark-pubsub cannot be imported by this Spark Python worker ({worker}); the driver runs "
        f"{sys.executable!r}. Point the workers at an interpreter with the package: set PYSPARK_PYTHON "
        f"(or spark.pyspark.python) to {sys.executable!r}, or install spark-pubsub there"
    )
    return (
        f"getattr(__import__({module!r}, fromlist=[{name!r}]), {name!r}) "
        f"if all(__import__('importlib.util').util.find_spec(m) for m in {_NEEDED!r}) "
        f"else (_ for _ in ()).throw(ModuleNotFoundError({message!r}.format("
        "worker=repr(__import__('sys').executable))))"
    )


class WorkerImportable(ABCMeta):
    """Metaclass of the classes Spark pickles to workers (see the module docstring)."""


def _reduce(cls: type) -> tuple[Any, tuple[str]]:
    return eval, (_expression(cls.__module__, cls.__qualname__),)


copyreg.pickle(WorkerImportable, _reduce)

__all__ = ["WorkerImportable"]
