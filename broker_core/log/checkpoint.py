"""Classic Delta checkpoints: the whole state at a version in one Parquet file.

A checkpoint bounds replay: opening a topic reads ``_last_checkpoint``, the checkpoint it names and
only the commits after it.  The file is written completely (put-if-absent) before the hint is
updated, because a Delta reader fails on a hint that names a missing checkpoint.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from broker_core.errors import ChecksumError, LogCorrupted
from broker_core.log.actions import Action, Add, Format, Metadata, Protocol, Remove, Txn
from broker_core.log.checkpoint_summary import SUMMARY_KEY, check_checkpoint, summary_of
from broker_core.log.protocol_versions import check_writable
from broker_core.log.segment_ref import (
    TAG_BASE_ENTRY_ID,
    TAG_BASE_OFFSET,
    TAG_ENTRY_LAYOUT,
    TAG_MAX_PUBLISH_MS,
    TAG_MIN_PUBLISH_MS,
    TAG_NUM_RECORDS,
    SegmentRef,
    layout_to_str,
)
from broker_core.log.snapshot import Snapshot, assemble_snapshot, check_segment_path
from broker_core.storage import FileIO

LOG_DIR = "_delta_log"
LAST_CHECKPOINT = "_last_checkpoint"

_STR_MAP = pa.map_(pa.string(), pa.string())

CHECKPOINT_SCHEMA = pa.schema(
    [
        pa.field(
            "add",
            pa.struct(
                [
                    pa.field("path", pa.string(), nullable=False),
                    pa.field("partitionValues", _STR_MAP, nullable=False),
                    pa.field("size", pa.int64(), nullable=False),
                    pa.field("modificationTime", pa.int64(), nullable=False),
                    pa.field("dataChange", pa.bool_(), nullable=False),
                    pa.field("stats", pa.string()),
                    pa.field("tags", _STR_MAP),
                ]
            ),
        ),
        pa.field(
            "remove",
            pa.struct(
                [
                    pa.field("path", pa.string(), nullable=False),
                    pa.field("deletionTimestamp", pa.int64()),
                    pa.field("dataChange", pa.bool_(), nullable=False),
                    pa.field("extendedFileMetadata", pa.bool_()),
                    pa.field("partitionValues", _STR_MAP),
                    pa.field("size", pa.int64()),
                    pa.field("tags", _STR_MAP),
                ]
            ),
        ),
        pa.field(
            "metaData",
            pa.struct(
                [
                    pa.field("id", pa.string(), nullable=False),
                    pa.field("name", pa.string()),
                    pa.field("description", pa.string()),
                    pa.field(
                        "format",
                        pa.struct(
                            [
                                pa.field("provider", pa.string(), nullable=False),
                                pa.field("options", _STR_MAP, nullable=False),
                            ]
                        ),
                        nullable=False,
                    ),
                    pa.field("schemaString", pa.string(), nullable=False),
                    pa.field("partitionColumns", pa.list_(pa.string()), nullable=False),
                    pa.field("createdTime", pa.int64()),
                    pa.field("configuration", _STR_MAP, nullable=False),
                ]
            ),
        ),
        pa.field(
            "protocol",
            pa.struct(
                [
                    pa.field("minReaderVersion", pa.int32(), nullable=False),
                    pa.field("minWriterVersion", pa.int32(), nullable=False),
                ]
            ),
        ),
        pa.field(
            "txn",
            pa.struct(
                [
                    pa.field("appId", pa.string(), nullable=False),
                    pa.field("version", pa.int64(), nullable=False),
                    pa.field("lastUpdated", pa.int64()),
                ]
            ),
        ),
    ]
)


def checkpoint_path(table_path: str, version: int) -> str:
    return f"{table_path}/{LOG_DIR}/{version:020d}.checkpoint.parquet"


def _row(column: str, value: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {name: None for name in CHECKPOINT_SCHEMA.names}
    row[column] = value
    return row


def _items(mapping: dict[str, str] | None) -> list[tuple[str, str]] | None:
    return None if mapping is None else list(mapping.items())


def checkpoint_rows(snapshot: Snapshot) -> list[dict[str, Any]]:
    """One row per non-``add`` action of the snapshot (adds are built column-wise, see
    ``_add_rows``), in the classic checkpoint layout."""
    meta = snapshot.metadata
    rows = [
        _row(
            "protocol",
            {
                "minReaderVersion": snapshot.protocol.min_reader_version,
                "minWriterVersion": snapshot.protocol.min_writer_version,
            },
        ),
        _row(
            "metaData",
            {
                "id": meta.id,
                "name": meta.name,
                "description": meta.description,
                "format": {"provider": meta.format.provider, "options": list(meta.format.options.items())},
                "schemaString": meta.schema_string,
                "partitionColumns": list(meta.partition_columns),
                "createdTime": meta.created_time,
                "configuration": list(meta.configuration.items()),
            },
        ),
    ]
    for txn in snapshot.txns.values():
        body = {"appId": txn.app_id, "version": txn.version, "lastUpdated": txn.last_updated}
        rows.append(_row("txn", body))
    for rm in snapshot.tombstones.values():
        rows.append(
            _row(
                "remove",
                {
                    "path": rm.path,
                    "deletionTimestamp": rm.deletion_timestamp,
                    "dataChange": rm.data_change,
                    "extendedFileMetadata": rm.extended_file_metadata,
                    "partitionValues": _items(rm.partition_values),
                    "size": rm.size,
                    "tags": _items(rm.tags),
                },
            )
        )
    return rows


_TAG_KEYS = [TAG_BASE_OFFSET, TAG_NUM_RECORDS, TAG_BASE_ENTRY_ID, TAG_ENTRY_LAYOUT, TAG_MIN_PUBLISH_MS,
             TAG_MAX_PUBLISH_MS]


def _add_rows(snapshot: Snapshot) -> pa.Table:
    """The ``add`` rows of a checkpoint, built column-wise: a topic can have many live segments."""
    segs = snapshot.segments
    n = len(segs)
    add_type = CHECKPOINT_SCHEMA.field("add").type
    offsets = pa.array(np.arange(0, len(_TAG_KEYS) * n + 1, len(_TAG_KEYS), dtype=np.int32))
    values = [v for seg in segs for v in (str(seg.base_offset), str(seg.num_records), str(seg.base_entry_id),
                                          layout_to_str(seg.layout), str(seg.min_publish_ms),
                                          str(seg.max_publish_ms))]
    tags = pa.MapArray.from_arrays(offsets, pa.array(_TAG_KEYS * n, pa.string()), pa.array(values, pa.string()))
    empty = pa.MapArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], pa.string()),
                                    pa.array([], pa.string()))
    add = pa.StructArray.from_arrays(
        [
            pa.array([seg.path for seg in segs], pa.string()),
            empty.cast(add_type.field("partitionValues").type),
            pa.array([seg.size_bytes for seg in segs], pa.int64()),
            pa.array([seg.modification_time_ms for seg in segs], pa.int64()),
            pa.array(np.zeros(n, dtype=bool)),
            pa.array([f'{{"numRecords":{seg.num_records}}}' for seg in segs], pa.string()),
            tags.cast(add_type.field("tags").type),
        ],
        fields=list(add_type),
    )
    columns = [add if f.name == "add" else pa.array([None] * n, f.type) for f in CHECKPOINT_SCHEMA]
    return pa.Table.from_arrays(columns, schema=CHECKPOINT_SCHEMA)


def _segments_from(adds: pa.StructArray, where: str, version: int) -> list[SegmentRef]:
    paths = adds.field("path").to_pylist()
    for path in paths:
        check_segment_path(path, version=version, action="add", where=where)
    sizes = adds.field("size").to_pylist()
    mtimes = adds.field("modificationTime").to_pylist()
    tags = adds.field("tags")
    keys = tags.keys.to_pylist()
    items = tags.items.to_pylist()
    bounds = tags.offsets.to_pylist()
    out = []
    for i, path in enumerate(paths):
        lo, hi = bounds[i], bounds[i + 1]
        out.append(SegmentRef.from_add(path, sizes[i], mtimes[i], dict(zip(keys[lo:hi], items[lo:hi], strict=True))))
    return out


def write_checkpoint(io_: FileIO, table_path: str, snapshot: Snapshot) -> bool:
    """Write the checkpoint of ``snapshot`` and then the ``_last_checkpoint`` hint.

    Returns False when another writer already wrote this version's checkpoint (that is fine: both
    describe the same state).  A log at a newer protocol than this library writes is refused
    (``UnsupportedVersionError``, ``log.protocol_versions``).
    """
    check_writable(snapshot, table_path)
    rows = checkpoint_rows(snapshot)
    table = pa.concat_tables([pa.Table.from_pylist(rows, schema=CHECKPOINT_SCHEMA), _add_rows(snapshot)])
    table = table.replace_schema_metadata({SUMMARY_KEY: summary_of(snapshot)})  # (``checkpoint_summary``)
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="snappy")
    data = sink.getvalue()
    created = io_.put_if_absent(checkpoint_path(table_path, snapshot.version), data, anchor=table_path)
    hint = {
        "version": snapshot.version,
        "size": table.num_rows,
        "sizeInBytes": len(data),
        "numOfAddFiles": len(snapshot.segments),
    }
    current = read_last_checkpoint(io_, table_path)
    if current is None or current < snapshot.version:
        io_.replace(f"{table_path}/{LOG_DIR}/{LAST_CHECKPOINT}", json.dumps(hint).encode(), anchor=table_path)
    return created


def read_last_checkpoint(io_: FileIO, table_path: str) -> int | None:
    """The version the hint names, or None when there is no usable hint (then replay from 0)."""
    data = io_.read_bytes(f"{table_path}/{LOG_DIR}/{LAST_CHECKPOINT}")
    if data is None:
        return None
    try:
        hint = json.loads(data)
        return int(hint["version"])
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


def read_checkpoint(io_: FileIO, table_path: str, version: int, *, trust_holes: bool = False) -> Snapshot | None:
    """Load the snapshot stored in a checkpoint, or None if that checkpoint does not exist.

    A checkpoint that decodes but contradicts itself or the summary written with it is
    ``LogCorrupted`` (``checkpoint_summary.check_checkpoint``; ``trust_holes``: see there).
    """
    path = checkpoint_path(table_path, version)
    if not io_.exists(path):
        return None
    try:
        table = pq.read_table(io_.open_input(path))
    except (OSError, pa.ArrowInvalid) as exc:
        # damaged bytes are what the network client calls a checksum failure; a refused read is not
        error = LogCorrupted if isinstance(exc, PermissionError) else ChecksumError
        raise error(f"checkpoint {path!r} is unreadable: {exc}", version=version) from exc
    add_column = table.column("add").combine_chunks()
    add_valid = add_column.is_valid()
    try:
        segments = _segments_from(add_column.filter(add_valid), f"checkpoint {path!r}", version)
    except (KeyError, ValueError) as exc:  # e.g. deltalake's checkpoint after a foreign append
        raise LogCorrupted(
            f"checkpoint {path!r} adds a file without valid pubsub tags ({exc!r}): a foreign writer changed "
            "this topic; only spark-pubsub may write to a topic's table",
            version=version,
        ) from exc
    actions: list[Action] = []
    for row in table.filter(pc.invert(add_valid)).to_pylist():
        if row.get("remove"):
            r = row["remove"]
            check_segment_path(r["path"], version=version, action="remove", where=f"checkpoint {path!r}")
            actions.append(
                Remove(
                    path=r["path"],
                    data_change=r["dataChange"],
                    deletion_timestamp=r.get("deletionTimestamp"),
                    extended_file_metadata=r.get("extendedFileMetadata"),
                    partition_values=None if r.get("partitionValues") is None else dict(r["partitionValues"]),
                    size=r.get("size"),
                    tags=None if r.get("tags") is None else dict(r["tags"]),
                )
            )
        elif row.get("txn"):
            t = row["txn"]
            actions.append(Txn(app_id=t["appId"], version=t["version"], last_updated=t.get("lastUpdated")))
        elif row.get("metaData"):
            m = row["metaData"]
            actions.append(
                Metadata(
                    id=m["id"],
                    name=m.get("name"),
                    description=m.get("description"),
                    format=Format(
                        provider=m["format"]["provider"], options=dict(m["format"]["options"] or [])
                    ),
                    schema_string=m["schemaString"],
                    partition_columns=list(m["partitionColumns"] or []),
                    configuration=dict(m["configuration"] or []),
                    created_time=m.get("createdTime"),
                )
            )
        elif row.get("protocol"):
            p = row["protocol"]
            actions.append(
                Protocol(min_reader_version=p["minReaderVersion"], min_writer_version=p["minWriterVersion"])
            )
    shell = Snapshot.from_actions(version, actions)
    if any(isinstance(a, Add) for a in actions):
        raise LogCorrupted(f"checkpoint {path!r} has adds outside the add column", version=version)
    snapshot = assemble_snapshot(version, shell.protocol, shell.metadata, segments, dict(shell.txns),
                                 dict(shell.tombstones))
    summary = (table.schema.metadata or {}).get(SUMMARY_KEY)
    check_checkpoint(snapshot, summary, f"checkpoint {path!r}", trust_holes=trust_holes)
    return snapshot


__all__ = [
    "CHECKPOINT_SCHEMA",
    "LAST_CHECKPOINT",
    "LOG_DIR",
    "checkpoint_path",
    "checkpoint_rows",
    "read_checkpoint",
    "read_last_checkpoint",
    "write_checkpoint",
]
