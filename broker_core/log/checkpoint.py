"""Classic Delta checkpoints: the whole state at a version in one Parquet file.

A checkpoint bounds replay: opening a topic reads ``_last_checkpoint``, the checkpoint it names and
only the commits after it.  The file is written completely (put-if-absent) before the hint is
updated, because a Delta reader fails on a hint that names a missing checkpoint.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from broker_core.errors import LogCorrupted
from broker_core.log.actions import Action, Add, Format, Metadata, Protocol, Remove, Txn
from broker_core.log.snapshot import Snapshot
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
    """One row per action of the snapshot, in the classic checkpoint layout."""
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
    for seg in snapshot.segments:
        stats = json.dumps({"numRecords": seg.num_records}, separators=(",", ":"))
        rows.append(
            _row(
                "add",
                {
                    "path": seg.path,
                    "partitionValues": [],
                    "size": seg.size_bytes,
                    "modificationTime": seg.modification_time_ms,
                    "dataChange": False,
                    "stats": stats,
                    "tags": list(seg.tags().items()),
                },
            )
        )
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


def write_checkpoint(io_: FileIO, table_path: str, snapshot: Snapshot) -> bool:
    """Write the checkpoint of ``snapshot`` and then the ``_last_checkpoint`` hint.

    Returns False when another writer already wrote this version's checkpoint (that is fine: both
    describe the same state).
    """
    rows = checkpoint_rows(snapshot)
    table = pa.Table.from_pylist(rows, schema=CHECKPOINT_SCHEMA)
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="snappy")
    data = sink.getvalue()
    created = io_.put_if_absent(checkpoint_path(table_path, snapshot.version), data)
    hint = {
        "version": snapshot.version,
        "size": len(rows),
        "sizeInBytes": len(data),
        "numOfAddFiles": len(snapshot.segments),
    }
    current = read_last_checkpoint(io_, table_path)
    if current is None or current < snapshot.version:
        io_.replace(f"{table_path}/{LOG_DIR}/{LAST_CHECKPOINT}", json.dumps(hint).encode())
    return created


def read_last_checkpoint(io_: FileIO, table_path: str) -> int | None:
    """The version the hint names, or None when there is no usable hint (then replay from 0)."""
    data = io_.read_bytes(f"{table_path}/{LOG_DIR}/{LAST_CHECKPOINT}")
    if data is None:
        return None
    try:
        hint = json.loads(data)
        return int(hint["version"])
    except (ValueError, KeyError, TypeError):
        return None


def read_checkpoint(io_: FileIO, table_path: str, version: int) -> Snapshot | None:
    """Load the snapshot stored in a checkpoint, or None if that checkpoint does not exist."""
    path = checkpoint_path(table_path, version)
    if not io_.exists(path):
        return None
    try:
        table = pq.read_table(io_.open_input(path))
    except (OSError, pa.ArrowInvalid) as exc:
        raise LogCorrupted(f"checkpoint {path!r} is unreadable: {exc}", version=version) from exc
    actions: list[Action] = []
    for row in table.to_pylist():
        if row.get("add"):
            a = row["add"]
            actions.append(
                Add(
                    path=a["path"],
                    partitionValues=dict(a["partitionValues"] or []),
                    size=a["size"],
                    modificationTime=a["modificationTime"],
                    dataChange=a["dataChange"],
                    stats=a.get("stats"),
                    tags=dict(a["tags"] or []),
                )
            )
        elif row.get("remove"):
            r = row["remove"]
            actions.append(
                Remove(
                    path=r["path"],
                    dataChange=r["dataChange"],
                    deletionTimestamp=r.get("deletionTimestamp"),
                    extendedFileMetadata=r.get("extendedFileMetadata"),
                    partitionValues=None if r.get("partitionValues") is None else dict(r["partitionValues"]),
                    size=r.get("size"),
                    tags=None if r.get("tags") is None else dict(r["tags"]),
                )
            )
        elif row.get("txn"):
            t = row["txn"]
            actions.append(Txn(appId=t["appId"], version=t["version"], lastUpdated=t.get("lastUpdated")))
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
                    schemaString=m["schemaString"],
                    partitionColumns=list(m["partitionColumns"] or []),
                    configuration=dict(m["configuration"] or []),
                    createdTime=m.get("createdTime"),
                )
            )
        elif row.get("protocol"):
            p = row["protocol"]
            actions.append(
                Protocol(minReaderVersion=p["minReaderVersion"], minWriterVersion=p["minWriterVersion"])
            )
    return Snapshot.from_actions(version, actions)


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
