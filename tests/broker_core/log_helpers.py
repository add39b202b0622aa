"""Helpers for tests that drive ``TopicLog`` directly: build segment tables from Python values.

Test modules import it as ``from log_helpers import ...``: ``tests/broker_core`` has no
``__init__.py``, so pytest's default import mode puts that directory on ``sys.path``.  The
subprocess scripts of the durability tests import it the same way, so it depends on nothing but
``broker_core``, numpy and pyarrow.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from broker_core.hashing import sticky_key_hash
from broker_core.log.segment import SEGMENT_SCHEMA, TIMESTAMP
from broker_core.storage import file_io_for
from broker_core.topic.topic_log import TopicLog

TOPIC_DIR = "public/default/persistent/t"
"""A plausible internal-topic directory relative to the storage root."""

_TIME_COLUMNS = ("publish_time", "event_time", "deliver_at")
_COLUMNS = tuple(SEGMENT_SCHEMA.names)


def segment_table(rows: Iterable[Mapping[str, Any]]) -> pa.Table:
    """A ``SEGMENT_SCHEMA`` table from dicts of Python values.

    Keys are the column names.  Differences from the raw schema, for convenience:

    - time columns (``publish_time``, ``event_time``, ``deliver_at``) take **milliseconds** since the
      epoch as ints (``publish_time`` defaults to 0, the others to null);
    - ``properties`` takes a dict (or None);
    - ``sticky_key_hash`` is computed from ``ordering_key`` / ``key`` when absent.

    Unknown keys raise ``KeyError`` so a typo cannot silently drop a column.
    """
    rows = list(rows)
    for row in rows:
        unknown = set(row) - set(_COLUMNS)
        if unknown:
            raise KeyError(f"unknown segment columns {sorted(unknown)}")
    columns: dict[str, list[Any]] = {name: [] for name in _COLUMNS}
    for row in rows:
        for name in _COLUMNS:
            value = row.get(name)
            if name == "publish_time" and value is None:
                value = 0
            elif name == "sticky_key_hash" and value is None:
                value = sticky_key_hash(row.get("ordering_key"), row.get("key"))
            elif name == "properties" and value is not None:
                value = list(value.items())
            columns[name].append(value)
    arrays = []
    for field in SEGMENT_SCHEMA:
        values = columns[field.name]
        if field.name in _TIME_COLUMNS:
            micros = [None if v is None else int(v) * 1000 for v in values]
            arrays.append(pa.array(micros, type=pa.int64()).cast(TIMESTAMP))
        else:
            arrays.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(arrays, schema=SEGMENT_SCHEMA)


def producer_table(
    producer: str | None,
    sequence_ids: Sequence[int] | np.ndarray,
    *,
    publish_ms: int | Sequence[int] = 1_700_000_000_000,
    key: str | None = None,
) -> pa.Table:
    """Rows of one producer with the given sequence ids; the value encodes ``producer:seq``.

    Built column-wise (fast enough for tens of thousands of rows per call).
    """
    seqs = np.asarray(sequence_ids, dtype=np.int64)
    n = len(seqs)
    name = producer or "anon"
    values = pa.array([f"{name}:{s}".encode() for s in seqs.tolist()], type=pa.binary())
    if isinstance(publish_ms, int):
        publish = np.full(n, publish_ms, dtype=np.int64)
    else:
        publish = np.asarray(publish_ms, dtype=np.int64)
    hash_value = sticky_key_hash(None, key)
    arrays = {
        "value": values,
        "key": pa.array([key] * n, type=pa.string()),
        "ordering_key": pa.nulls(n, type=pa.binary()),
        "sticky_key_hash": pa.array(np.full(n, hash_value, dtype=np.int32)),
        "properties": pa.nulls(n, type=SEGMENT_SCHEMA.field("properties").type),
        "producer_name": pa.array([producer] * n, type=pa.string()),
        "sequence_id": pa.array(seqs, type=pa.int64()),
        "publish_time": pa.array(publish * 1000, type=pa.int64()).cast(TIMESTAMP),
    }
    return pa.Table.from_arrays(
        [arrays.get(f.name, pa.nulls(n, type=f.type)) for f in SEGMENT_SCHEMA], schema=SEGMENT_SCHEMA
    )


def open_topic(
    root: Any,
    path: str = TOPIC_DIR,
    *,
    checkpoint_interval: int = 100,
    fsync: bool = True,
    create: bool = True,
) -> TopicLog:
    """A ``TopicLog`` on ``root`` (a ``tmp_path``, a folder or an ``s3://`` URL reached through the
    ``AWS_*`` environment), created unless ``create`` is False."""
    topic = TopicLog(file_io_for(str(root), fsync=fsync), path, checkpoint_interval=checkpoint_interval)
    if create:
        topic.create(name=f"persistent://public/default/{path.rsplit('/', 1)[-1]}")
    return topic


def read_all(topic: TopicLog) -> tuple[pa.Table, np.ndarray]:
    """Every live message of the topic at its latest version, and the offsets."""
    snap = topic.snapshot()
    return topic.read(snap.first_offset, snap.next_offset, snapshot=snap)


def decoded_values(table: pa.Table) -> list[bytes | None]:
    return table.column("value").to_pylist()




def kill_after_events(proc: subprocess.Popen[str], wanted: str, count: int, rng: random.Random) -> list[str]:
    """SIGKILL a worker once it has printed ``count`` lines starting with ``wanted``, plus a random few
    ms (to land inside its next operation); return every line it printed.

    Kill points counted in the worker's own events do not depend on the machine's load, which a
    wall-clock window does.
    """
    assert proc.stdout is not None
    seen: list[str] = []
    while sum(line.startswith(wanted) for line in seen) < count:
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else "the worker exited"
        seen.append(line.strip())
    time.sleep(rng.uniform(0.0, 0.02))  # the random moment of the kill, not synchronisation
    os.kill(proc.pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err
    return seen + out.splitlines()


__all__ = [
    "TOPIC_DIR",
    "decoded_values",
    "kill_after_events",
    "open_topic",
    "producer_table",
    "read_all",
    "segment_table",
]
