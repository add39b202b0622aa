"""The one SparkSession of the test run (local[2], UI off, UTC) with the pubsub source registered.

The same JVM also serves Spark Connect (``SparkConnectPlugin`` on an ephemeral port), so the
``connect`` fixture is a Spark Connect session of that very Spark at no extra start-up cost: tests
show that an entry point works through both kinds of session.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from pyspark.sql import SparkSession

    import spark_pubsub

    session = (
        SparkSession.builder.master("local[2]")
        .appName("spark-pubsub-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
        .config("spark.connect.grpc.binding.address", "127.0.0.1")
        .config("spark.connect.grpc.binding.port", "0")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    spark_pubsub.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect(spark: object) -> Iterator[object]:
    """A Spark Connect session (DataFrame API only: no SparkContext, no RDD) of the test Spark."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    service = getattr(spark._jvm.org.apache.spark.sql.connect.service, "SparkConnectService$")  # type: ignore[attr-defined]
    port = getattr(service, "MODULE$").localPort()
    session = ConnectSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
    yield session
    session.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "spark_pubsub" in str(item.fspath):
            item.add_marker(pytest.mark.spark)
