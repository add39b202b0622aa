"""A Spark Python worker that cannot import spark-pubsub says so in one line, with the fix.

What Spark ships to workers (the data source class, readers, writers) is unpickled there first; an
interpreter without the package (here: ``python -S``, no site-packages) gets one line naming
PYSPARK_PYTHON / spark.pyspark.python and both interpreters instead of a bare ModuleNotFoundError.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark import cloudpickle

from spark_pubsub.batch_reader import PubSubBatchReader
from spark_pubsub.sink import PubSubBatchWriter, PubSubStreamWriter
from spark_pubsub.source import PubSubDataSource
from spark_pubsub.stream_reader import PubSubStreamReader

SHIPPED = [PubSubDataSource, PubSubBatchReader, PubSubStreamReader, PubSubBatchWriter, PubSubStreamWriter]


@pytest.mark.parametrize("cls", SHIPPED, ids=lambda c: c.__name__)
def test_classes_still_round_trip_where_the_package_is_installed(cls: type) -> None:
    assert cloudpickle.loads(cloudpickle.dumps(cls)) is cls
    assert pickle.loads(pickle.dumps(cls)) is cls


def test_a_worker_without_the_package_gets_one_line_naming_the_fix(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-S", "-c", "import pickle, sys; pickle.loads(sys.stdin.buffer.read())"],
        input=cloudpickle.dumps(PubSubDataSource), capture_output=True, cwd=tmp_path, timeout=60,
    )
    assert done.returncode != 0
    last = done.stderr.decode().strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: spark-pubsub cannot be imported by this Spark Python worker")
    assert "PYSPARK_PYTHON" in last and "spark.pyspark.python" in last and sys.executable in last
