"""Fuzz: random bytes or random JSON actions in one file of a topic, then every reader and job.

Whatever lands in the file, (1) nothing outside the root is opened or deleted, (2) every committed
("acknowledged") message is either still read back exactly, or a reader that must not lose data
(the scan with ``failOnDataLoss``) raises, and (3) every error raised is a ``PulsarException``.
Bounded: a modest number of examples on a three-commit topic, no deadline (shared CI cores).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_core import PulsarException
from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig
from broker_core.jobs import cleanup_logs, vacuum
from broker_core.jobs.check import check_topic
from broker_core.log.segment import SEGMENT_SCHEMA
from broker_core.storage import LocalFileIO
from broker_core.storage import local as storage_module
from broker_core.subscription.cursor_store import CursorStore
from broker_core.topic.scan import ScanTask, scan
from broker_core.topic.topic_log import TopicLog

T = "persistent://public/default/t"
TOPIC_DIR = "public/default/persistent/t"
VALUES = [f"m{i}".encode() for i in range(6)]
FAR_FUTURE_MS = 4_000_000_000_000


def _rows(values: list[bytes]) -> pa.Table:
    columns: dict[str, list[Any]] = {name: [None] * len(values) for name in SEGMENT_SCHEMA.names}
    columns.update(value=values, sticky_key_hash=[0] * len(values), publish_time=[0] * len(values))
    return pa.Table.from_pydict(columns, schema=SEGMENT_SCHEMA)


def _topic(root: Path) -> tuple[Broker, list[str]]:
    """Three commits of two messages, a checkpoint, a cursor; returns the broker and segment names."""
    broker = Broker(LocalFileIO(str(root), fsync=False), BrokerConfig(fsync_enabled=False))
    log = TopicLog(broker.io, TOPIC_DIR, checkpoint_interval=1 << 40)
    log.create(name=T)
    for i in range(0, 6, 2):
        log.append(_rows(VALUES[i:i + 2]), layout=[2])
    log.log.checkpoint()
    from broker_core.subscription.cursor import ConsumerType, new_cursor

    CursorStore(broker.io, TOPIC_DIR, "s").update(lambda _: new_cursor("s", ConsumerType.Shared, 2))
    return broker, [s.path for s in log.snapshot().segments]


def _json_action(names: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    paths = st.sampled_from([*names, "../../../../victim.txt", "/etc/hostname", "../outside.parquet",
                             "part-" + "0" * 32 + ".parquet", "x/../../y", ""]) | st.text(max_size=12)
    scalars = st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.text(max_size=8)
    tags = st.dictionaries(st.sampled_from(["pubsub.baseOffset", "pubsub.numRecords", "pubsub.baseEntryId",
                                            "pubsub.entryLayout", "pubsub.minPublishTimeMs",
                                            "pubsub.maxPublishTimeMs"]),
                           st.sampled_from(["0", "2", "-1", "1,1", "x", "99999999999999999999"]))
    body = st.fixed_dictionaries({"path": paths}, optional={
        "size": scalars, "modificationTime": scalars, "dataChange": scalars, "deletionTimestamp": scalars,
        "tags": tags | scalars, "partitionValues": st.just({})})
    txn = st.fixed_dictionaries({"appId": st.sampled_from(["pubsub.nextOffset", "pubsub.nextEntryId", "p",
                                                           "pubsub.deleted"]), "version": scalars})
    return (st.builds(lambda b: {"add": b}, body) | st.builds(lambda b: {"remove": b}, body)
            | st.builds(lambda b: {"txn": b}, txn) | st.dictionaries(st.text(max_size=6), scalars, max_size=2))


@st.composite
def damage(draw: st.DrawFn) -> tuple[str, str, bytes]:
    """(which file, how, the bytes): a commit, the checkpoint, the hint, the cursor or a segment."""
    target = draw(st.sampled_from(["commit1", "commit2", "commit3", "next-commit", "checkpoint", "hint",
                                   "cursor", "segment"]))
    how = draw(st.sampled_from(["replace", "truncate", "append"]))
    if draw(st.booleans()):
        data = draw(st.binary(max_size=200))
    else:
        names = ["part-" + "a" * 32 + ".parquet"]  # replaced below by the real segment names
        lines = draw(st.lists(_json_action(names), min_size=1, max_size=4))
        data = ("\n".join(json.dumps(line) for line in lines) + "\n").encode()
    return target, how, data


def _file_of(root: Path, target: str, segments: list[str]) -> Path:
    log = root / TOPIC_DIR / "_delta_log"
    return {
        "commit1": log / f"{1:020d}.json", "commit2": log / f"{2:020d}.json", "commit3": log / f"{3:020d}.json",
        "next-commit": log / f"{4:020d}.json", "checkpoint": log / f"{3:020d}.checkpoint.parquet",
        "hint": log / "_last_checkpoint", "segment": root / TOPIC_DIR / segments[1],
        "cursor": max((root / TOPIC_DIR / "_cursors" / "s").glob("*.json")),
    }[target]


def _guard(root: Path, touched: list[str]) -> list[Any]:
    """Patches recording every path the storage layer opens, maps or deletes (a name relative to a
    ``dir_fd``, as ``LocalFileIO`` uses since issue 26, is resolved through that descriptor)."""
    real_open, real_map, real_unlink, real_os_open = open, pa.memory_map, os.unlink, os.open

    def record(fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(path: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(path, (str, os.PathLike)):
                where = os.fspath(path)
                if kwargs.get("dir_fd") is not None and not os.path.isabs(where):
                    where = os.path.join(os.readlink(f"/proc/self/fd/{kwargs['dir_fd']}"), where)
                touched.append(os.path.realpath(where))
            return fn(path, *args, **kwargs)
        return call

    return [mock.patch.object(storage_module, "open", record(real_open), create=True),
            mock.patch.object(storage_module.pa, "memory_map", record(real_map)),
            mock.patch.object(storage_module.os, "unlink", record(real_unlink)),
            mock.patch.object(storage_module.os, "open", record(real_os_open))]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damage())
def test_damage_in_one_file_is_refused_or_reported_never_silent(case: tuple[str, str, bytes]) -> None:
    target, how, data = case
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        root = base / "root"
        broker, segments = _topic(root)
        victims = {base / "victim.txt": b"precious", base / "outside.parquet": b"PAR1 not yours"}
        for path, content in victims.items():
            path.write_bytes(content)
        data = data.replace(b"part-" + b"a" * 32 + b".parquet", segments[0].encode())
        file = _file_of(root, target, segments)
        if how == "truncate" and file.exists():
            file.write_bytes(file.read_bytes()[: len(data) % max(1, file.stat().st_size)])
        elif how == "append" and file.exists():
            file.write_bytes(file.read_bytes() + data)
        else:
            file.write_bytes(data)

        touched: list[str] = []
        patches = _guard(root, touched)
        for patch in patches:
            patch.start()
        try:
            outcome = _exercise(broker, root)
        finally:
            for patch in patches:
                patch.stop()
        inside = os.path.realpath(root) + os.sep
        outside = [p for p in touched if not p.startswith(inside) and p != inside[:-1]]  # the root's own walk
        assert not outside, outside
        for path, content in victims.items():
            assert path.read_bytes() == content
        if outcome is not None:  # read back without an error: every acknowledged message, exactly
            assert outcome == VALUES


def _exercise(broker: Broker, root: Path) -> list[bytes] | None:
    """Run the readers and the jobs; every error must be a PulsarException.  Returns what a scan that
    must not lose data read after all of them (None: it raised, which is allowed)."""
    steps: list[Callable[[], object]] = [
        lambda: TopicLog(broker.io, TOPIC_DIR).read(0, 6),
        lambda: CursorStore(broker.io, TOPIC_DIR, "s").load(),
        lambda: check_topic(broker, T),
        lambda: vacuum(broker, T, min_age_ms=0, dry_run=False, enforce_min_age=False, now_ms=FAR_FUTURE_MS),
        lambda: cleanup_logs(broker, T, retention_ms=0, dry_run=False, enforce_min_age=False,
                             now_ms=FAR_FUTURE_MS),
        lambda: check_topic(broker, T, repair=True, dry_run=False),
    ]
    for step in steps:
        try:
            step()
        except PulsarException:
            continue
    task = ScanTask(root=str(root), topic_path=TOPIC_DIR, topic=T, partition=-1, ranges=((0, 6),))
    try:
        chunks = list(scan(task))
    except PulsarException:
        return None
    values = [v for chunk in chunks for v in chunk.rows.column("value").to_pylist()]
    offsets = [int(o) for chunk in chunks for o in chunk.offsets]
    assert offsets == list(range(len(values)))
    return values
