"""The exactly-once sink's default identity: a hash of the checkpoint location and of the query id
Spark keeps in ``<checkpoint>/metadata``, read on every file system (local, object stores through
obstore, anything else through Spark's Hadoop file system)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping

from broker_core.errors import InvalidConfiguration
from broker_core.storage import file_io_for
from broker_core.storage.urls import OBJECT_STORE_SCHEMES


def default_sink_id(checkpoint_location: str, storage_options: Mapping[str, str] | None = None) -> str:
    """A stable id for the streaming query of a checkpoint: a hash of its location and of the query id
    Spark keeps in ``<checkpoint>/metadata`` (so a reset checkpoint is a new sink).

    The metadata file is read for every scheme: local paths directly, object stores (``s3a://``,
    ``s3://``, ``gs://``, ``abfss://``) through a FileIO with the sink's storage options, anything
    else (``dbfs:``, ``hdfs://``) through Spark's own Hadoop file system.  A checkpoint whose metadata
    cannot be read is an error, not an empty id: an id without the query's would survive a reset
    checkpoint, and the new query's batches would be skipped as replays.
    """
    location = checkpoint_location
    local = location.removeprefix("file://") if location.startswith("file://") else location
    local = local.removeprefix("file:")
    if "://" not in local and not _has_scheme(local):
        location = local = os.path.abspath(local)
        try:
            with open(os.path.join(local, "metadata"), encoding="utf-8") as handle:
                first_line = handle.readline()
        except OSError:
            first_line = ""
    else:
        first_line = _remote_metadata_line(location.rstrip("/"), storage_options)
    try:
        query_id = str(json.loads(first_line).get("id", "")) if first_line else ""
    except (ValueError, AttributeError):
        query_id = ""
    digest = hashlib.sha256(f"{location}\n{query_id}".encode()).hexdigest()
    return f"ckpt-{digest[:24]}"


def _has_scheme(location: str) -> bool:
    scheme, sep, _ = location.partition(":")
    return bool(sep) and len(scheme) > 1 and scheme.isalnum()


def _remote_metadata_line(location: str, storage_options: Mapping[str, str] | None) -> str:
    """The first line of ``<location>/metadata`` on a remote file system ("" if it does not exist)."""
    scheme = location.partition(":")[0].lower()
    if scheme in OBJECT_STORE_SCHEMES:
        data = file_io_for(location, storage_options=storage_options).read_bytes("metadata")
        return data.decode("utf-8", errors="replace").split("\n", 1)[0] if data else ""
    return _hadoop_metadata_line(location)


def _hadoop_metadata_line(location: str) -> str:
    """Read through the active SparkSession's Hadoop file system (the driver has one: Spark wrote
    this checkpoint through it)."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is None:
        raise InvalidConfiguration(
            f"cannot read the checkpoint metadata under {location!r}: no active SparkSession to reach that file "
            "system; set .option('sinkId', ...) explicitly", option="checkpointLocation",
        )
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        path = jvm.org.apache.hadoop.fs.Path(location + "/metadata")
        fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
        if not fs.exists(path):
            return ""
        stream = fs.open(path)
        try:
            reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(stream, "UTF-8"))
            return str(reader.readLine() or "")
        finally:
            stream.close()
    except Exception as exc:
        raise InvalidConfiguration(
            f"cannot read the checkpoint metadata under {location!r} ({type(exc).__name__}); without the query "
            "id a reset checkpoint would be taken for the old query: fix access or set .option('sinkId', ...)",
            option="checkpointLocation",
        ) from None


__all__ = ["default_sink_id"]
