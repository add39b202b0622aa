"""Read an internal topic directory with ``deltalake`` (delta-rs) and print what it sees as JSON.

Run as a subprocess (``python delta_probe.py '<json args>'``) because delta-rs intermittently aborts
at interpreter exit (delta-rs #2184, ``reference/delta-log-notes.md`` section 6): the result is
printed and flushed, then the process leaves with ``os._exit(0)`` before that can happen.

Args (JSON): ``path`` (the table directory), ``app_ids`` (txn app ids to look up), ``rows``
(include every row, not only the summary), ``version`` (time-travel to a version); and, before
reading, ``append_foreign`` (append a row with ``write_deltalake``) and ``create_checkpoint``
(let deltalake write a checkpoint of the latest version); ``storage_options`` for a table on an
object store (the same dict the client takes).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any

import pyarrow as pa


def canonical_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows in a JSON-comparable form (bytes as hex, times as int microseconds, maps as pairs)."""
    columns = {}
    for name in ("value", "key", "ordering_key", "properties", "producer_name", "sequence_id"):
        columns[name] = table.column(name).to_pylist()
    for name in ("publish_time", "event_time", "deliver_at"):
        columns[name] = table.column(name).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()
    out = []
    for i in range(table.num_rows):
        row = {name: values[i] for name, values in columns.items()}
        for name in ("value", "ordering_key"):
            row[name] = None if row[name] is None else row[name].hex()
        if row["properties"] is not None:
            row["properties"] = sorted([k, v] for k, v in row["properties"])
        out.append(row)
    return out


def sorted_rows(table: pa.Table) -> list[dict[str, Any]]:
    """``canonical_rows`` in a total order: a Delta reader promises no row order across files."""
    return sorted(canonical_rows(table), key=lambda r: json.dumps(r, sort_keys=True))


def values_digest(table: pa.Table) -> str:
    """An order-independent digest of the value column (nulls distinct from empty values)."""
    values = sorted("-" if v is None else "=" + v.hex() for v in table.column("value").to_pylist())
    return hashlib.sha256("\n".join(values).encode()).hexdigest()


def main() -> None:
    from deltalake import DeltaTable

    args = json.loads(sys.argv[1])
    if args.get("append_foreign"):  # a foreign writer appends one row (its add has no pubsub tags)
        from deltalake import write_deltalake

        from broker_core.log.segment import SEGMENT_SCHEMA

        row = {name: None for name in SEGMENT_SCHEMA.names}
        row.update(value=b"foreign", sticky_key_hash=0, publish_time=0)
        write_deltalake(args["path"], pa.Table.from_pylist([row], schema=SEGMENT_SCHEMA), mode="append",
                        storage_options=args.get("storage_options"))
    if args.get("create_checkpoint"):
        DeltaTable(args["path"], storage_options=args.get("storage_options")).create_checkpoint()
    dt = DeltaTable(args["path"], version=args.get("version"), storage_options=args.get("storage_options"))
    table = dt.to_pyarrow_table()
    out: dict[str, Any] = {
        "version": dt.version(),
        "num_rows": table.num_rows,
        "num_files": len(dt.file_uris()),
        "digest": values_digest(table),
        "txns": {app_id: dt.transaction_version(app_id) for app_id in args.get("app_ids", [])},
        "protocol": [dt.protocol().min_reader_version, dt.protocol().min_writer_version],
    }
    if args.get("rows"):
        out["rows"] = sorted_rows(table)
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
