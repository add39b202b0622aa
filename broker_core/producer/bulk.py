"""Append a whole ``pyarrow.Table`` of messages: one commit per partition (the Spark sink's path).

The input uses message columns (``value`` required; ``key``, ``ordering_key``, ``properties``,
``event_time``, ``deliver_at``, ``partition``, ``sequence_id``, ``producer_name`` optional).  Every
column is checked before anything is written; routing and the sticky key hash are computed
vectorised; each partition's rows become one segment and one entry (a batch) in one commit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_core.errors import BrokerPersistenceError, InvalidConfiguration, InvalidMessage, LogCorrupted, MessageTooBig
from broker_core.hashing import HashingScheme, sticky_key_hash_array
from broker_core.log.segment import SEGMENT_SCHEMA, TIMESTAMP, CompressionType, codec_of
from broker_core.log.segment_bounds import metadata_bytes, value_bytes
from broker_core.producer.routing import RoundRobinRouter, partitions_for_keys
from broker_core.storage import FileIO
from broker_core.topic.topic_log import AppendResult, StagedSegment, TopicLog

_TEXT = (pa.string(), pa.large_string())
_BYTES = (pa.binary(), pa.large_binary())

INPUT_COLUMNS = (
    "value", "key", "ordering_key", "properties", "event_time", "deliver_at",
    "partition", "sequence_id", "producer_name",
)


@dataclass(frozen=True, slots=True)
class PartitionAppend:
    """What one partition's commit of a bulk append wrote."""

    partition: int
    rows: int
    result: AppendResult


def _fail(column: str, problem: str) -> InvalidMessage:
    return InvalidMessage(f"column {column!r} {problem}", column=column)


def _time_column(table: pa.Table, name: str) -> pa.Array:
    col = table.column(name).combine_chunks()
    if pa.types.is_timestamp(col.type):
        return col.cast(pa.timestamp(col.type.unit, tz="UTC")).cast(TIMESTAMP)
    if pa.types.is_integer(col.type):
        return pc.multiply(col.cast(pa.int64()), 1000).cast(TIMESTAMP)
    raise _fail(name, f"must be a timestamp or an int64 of ms since the epoch, not {col.type}")


def to_segment_rows(
    table: pa.Table, *, publish_time_ms: int, max_message_size: int, default_producer: str | None = None
) -> tuple[pa.Table, np.ndarray | None]:
    """Validate a user table and convert it to ``SEGMENT_SCHEMA`` rows plus explicit partitions.

    Raises:
        InvalidMessage: a missing ``value`` column, an unknown column or a column of the wrong type.
        MessageTooBig: a message (value, key, ordering key and properties) above ``max_message_size``
            (bulk appends do not chunk).
    """
    unknown = [c for c in table.column_names if c not in INPUT_COLUMNS]
    if unknown:
        raise _fail(unknown[0], f"is not a message column; allowed columns: {', '.join(INPUT_COLUMNS)}")
    if "value" not in table.column_names:
        raise _fail("value", "is required (binary; null for a tombstone)")
    n = table.num_rows

    def get(name: str, allowed: tuple[pa.DataType, ...], target: pa.DataType, what: str) -> pa.Array:
        if name not in table.column_names:
            return pa.nulls(n, target)
        col = table.column(name).combine_chunks()
        if col.type not in allowed and not pa.types.is_null(col.type):
            raise _fail(name, f"must be {what}, not {col.type}")
        return col.cast(target)

    value = get("value", _BYTES + _TEXT, pa.binary(), "binary (or string)")
    key = get("key", _TEXT, pa.string(), "string")
    ordering = get("ordering_key", _BYTES + _TEXT, pa.binary(), "binary or string")
    if "properties" in table.column_names:
        props = table.column("properties").combine_chunks()
        if not (pa.types.is_map(props.type) and props.type.key_type in _TEXT and props.type.item_type in _TEXT):
            raise _fail("properties", f"must be map<string, string>, not {props.type}")
        props = props.cast(pa.map_(pa.string(), pa.string()))
    else:
        props = pa.nulls(n, pa.map_(pa.string(), pa.string()))
    seq = get("sequence_id", (pa.int64(), pa.int32(), pa.int16(), pa.int8()), pa.int64(), "an integer")
    if "producer_name" in table.column_names:
        producer = get("producer_name", _TEXT, pa.string(), "string")
    else:
        producer = pa.array([default_producer] * n, pa.string())
    event = _time_column(table, "event_time") if "event_time" in table.column_names else pa.nulls(n, TIMESTAMP)
    deliver = _time_column(table, "deliver_at") if "deliver_at" in table.column_names else pa.nulls(n, TIMESTAMP)
    partitions = None
    if "partition" in table.column_names:
        part = table.column("partition").combine_chunks()
        if not pa.types.is_integer(part.type):
            raise _fail("partition", f"must be an integer partition index, not {part.type}")
        partitions = part.cast(pa.int32()).fill_null(-1).to_numpy(zero_copy_only=False)
    rows = pa.Table.from_arrays(
        [
            value, key, ordering,
            sticky_key_hash_array(ordering, key).cast(pa.int32()),
            props, producer, seq,
            pa.array(np.full(n, publish_time_ms * 1000, dtype=np.int64)).cast(TIMESTAMP),
            event, deliver,
            pa.nulls(n, pa.binary()), pa.nulls(n, pa.string()), pa.nulls(n, pa.int32()),
            pa.nulls(n, pa.int32()), pa.nulls(n, pa.int64()),
        ],
        schema=SEGMENT_SCHEMA,
    )
    if n and max_message_size:
        _check_sizes(rows, max_message_size)
    return rows, partitions


def _check_sizes(rows: pa.Table, max_message_size: int) -> None:
    """``MessageTooBig`` naming the first row whose value, key, ordering key and properties together
    exceed ``max_message_size`` (D126); bulk appends do not chunk."""
    value, meta = value_bytes(rows), metadata_bytes(rows)
    over = np.nonzero(value + meta > max_message_size)[0]
    if len(over):
        row = int(over[0])
        size = int(value[row] + meta[row])
        fix = ("send smaller properties or key" if meta[row] >= max_message_size else
               "bulk appends do not chunk: send it through a producer with chunking_enabled=True")
        raise MessageTooBig(
            f"row {row}: a message of {size} bytes ({int(value[row])} value, {int(meta[row])} key, ordering key "
            f"and properties) exceeds maxMessageSize={max_message_size}; {fix}; nothing was written",
            row=row, size=size, max_message_size=max_message_size,
        )


def route_rows(
    rows: pa.Table,
    explicit: np.ndarray | None,
    num_partitions: int,
    *,
    hashing_scheme: HashingScheme = HashingScheme.JavaStringHash,
    router: Callable[[pa.Table, int], np.ndarray] | None = None,
) -> np.ndarray:
    """Partition of each row: explicit ``partition`` > custom router > key hash > round robin."""
    n = rows.num_rows
    if num_partitions == 1:
        chosen = np.zeros(n, dtype=np.int32)
    elif router is not None:
        chosen = np.asarray(router(rows, num_partitions), dtype=np.int32)
    else:
        chosen = partitions_for_keys(rows.column("key"), num_partitions, hashing_scheme)
        keyless = chosen < 0
        if keyless.any():
            rr = RoundRobinRouter(num_partitions, scheme=hashing_scheme, batching_enabled=False)
            chosen[keyless] = rr.choose_many(pa.nulls(int(keyless.sum()), pa.string()))
    if explicit is not None:
        chosen = np.where(explicit >= 0, explicit, chosen).astype(np.int32)
    bad = (chosen < 0) | (chosen >= num_partitions)
    if bad.any():
        raise _fail("partition", f"holds {int(chosen[bad][0])}, outside [0, {num_partitions}) for this topic")
    return chosen


def append_partitioned(
    logs: list[TopicLog],
    rows: pa.Table,
    partitions: np.ndarray,
    *,
    compression: CompressionType = CompressionType.NONE,
    batched: bool = True,
    dedup: bool = False,
    txn: tuple[str, int] | None = None,
) -> list[PartitionAppend]:
    """Append each partition's rows (in input order) as one commit; partitions without rows
    commit only ``txn`` (so a replayed idempotent batch is recognised on every partition)."""
    out: list[PartitionAppend] = []
    for index, log in enumerate(logs):
        take = np.nonzero(partitions == index)[0]
        if not len(take) and txn is None:
            continue
        part_rows = rows if len(take) == rows.num_rows else rows.take(pa.array(take))
        layout = ([len(take)] if batched else [-len(take)]) if len(take) else []
        result = log.append(part_rows, layout=layout, compression=compression, dedup=dedup, txn=txn)
        out.append(PartitionAppend(partition=index, rows=len(take), result=result))
    return out


# --- distributed writes: staged segments committed exactly once per (app id, version) ---------------

STAGED_TXN_DIR = "_pubsub/txn"
_APP_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-.=]{0,199}")


def _staged_dir(app_id: str) -> str:
    if not _APP_ID_RE.fullmatch(app_id):
        raise InvalidConfiguration(
            f"app id {app_id!r} must be 1-200 characters of [A-Za-z0-9_-.=] starting with a letter or digit"
        )
    return f"{STAGED_TXN_DIR}/{app_id}"


def staged_manifest_path(app_id: str, version: int) -> str:
    """Where the intent of ``commit_staged_once(app_id, version)`` is recorded (relative to the root)."""
    return f"{_staged_dir(app_id)}/{version:020d}.json"


def _encode_manifest(app_id: str, version: int, staged: Mapping[str, Sequence[StagedSegment]],
                     owner: str | None) -> bytes:
    topics = {
        topic: [{"path": s.path, "size": s.size_bytes, "numRecords": s.num_records,
                 "minPublishMs": s.min_publish_ms, "maxPublishMs": s.max_publish_ms} for s in segs]
        for topic, segs in sorted(staged.items())
    }
    manifest = {"appId": app_id, "version": version, "owner": owner, "topics": topics}
    return json.dumps(manifest, sort_keys=True).encode()


def _decode_manifest(data: bytes, where: str) -> dict[str, list[StagedSegment]]:
    """The segments a manifest records; ``LogCorrupted`` naming ``where`` for anything but segment
    names (a manifest's paths are committed and deleted under a topic, so ``../`` must never pass)."""
    try:
        raw = json.loads(data)
        planned = {
            str(topic): [
                StagedSegment(path=s["path"], size_bytes=int(s["size"]), num_records=int(s["numRecords"]),
                              min_publish_ms=int(s["minPublishMs"]), max_publish_ms=int(s["maxPublishMs"]))
                for s in segs
            ]
            for topic, segs in raw["topics"].items()
        }
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise LogCorrupted(f"staged-write manifest {where!r} is malformed ({exc!r}); delete it if its write "
                           "was abandoned", path=where) from exc
    for segs in planned.values():
        for seg in segs:
            if not isinstance(seg.path, str) or codec_of(seg.path) is None:
                raise LogCorrupted(f"staged-write manifest {where!r} names {seg.path!r}, which is not a segment "
                                   "name; it was edited by hand: delete it", path=where)
    return planned


def _manifest_owner(data: bytes, where: str) -> object:
    try:
        raw = json.loads(data)
        return raw.get("owner") if isinstance(raw, dict) else None
    except (ValueError, RecursionError) as exc:
        raise LogCorrupted(f"staged-write manifest {where!r} is not JSON; delete it if its write was abandoned",
                           path=where) from exc


def commit_staged_once(
    io: FileIO,
    open_log: Callable[[str], TopicLog],
    staged: Mapping[str, Sequence[StagedSegment]],
    *,
    app_id: str,
    version: int,
    owner: str | None = None,
) -> dict[str, int | None]:
    """Commit segments staged on several internal topics as the one write ``(app_id, version)``.

    Each internal topic gets one commit carrying the ``txn`` action ``(app_id, version)``, so the
    write is atomic per internal topic.  Across topics, a manifest of the intent is put (if absent)
    under ``_pubsub/txn/<app_id>/`` before the first commit: a repeated call for the same version
    (a replayed Spark micro-batch, maybe with differently routed rows) completes the recorded intent
    with the *recorded* segments and deletes the ones it was handed, so every row lands exactly once
    even when an earlier attempt died between two topics' commits.  Manifests of older versions are
    removed once this one is complete; versions must increase (a lower version than one a topic
    already holds is an error: the app id was reused by another writer or its checkpoint was reset).

    Args:
        io: the storage root.
        open_log: internal topic name -> its ``TopicLog`` (created if needed).
        staged: internal topic name -> segments staged by ``TopicLog.stage``, in commit order.
        app_id, version: the idempotency key; ``version`` >= 0.  Calling version N means every
            earlier version is complete (as Spark commits micro-batches).
        owner: who may complete this app id's writes (e.g. a streaming query's identity); a recorded
            intent of another owner is an error instead of being completed with the wrong rows.

    Returns:
        internal topic -> the log version committed, or None where it was already committed.
    """
    manifest = staged_manifest_path(app_id, version)
    offered = {t: [s for s in segs if s.num_records > 0] for t, segs in staged.items()}
    offered = {t: segs for t, segs in offered.items() if segs}
    recorded = io.read_bytes(manifest)
    if recorded is None and offered:
        for topic in sorted(offered):
            prior = open_log(topic).snapshot().txn_version(app_id)
            if prior is not None and prior > version:
                raise InvalidConfiguration(
                    f"{topic} already holds write {prior} of {app_id!r}, after this write {version}: the "
                    "id is in use by another writer, or its checkpoint was reset; use a new sink id",
                    topic=topic, version=version,
                )
        if not io.put_if_absent(manifest, _encode_manifest(app_id, version, offered, owner)):
            recorded = io.read_bytes(manifest)
    if recorded is not None:
        recorded_owner = _manifest_owner(recorded, manifest)
        if owner is not None and recorded_owner is not None and recorded_owner != owner:
            raise InvalidConfiguration(
                f"write {version} of {app_id!r} was begun by {recorded_owner!r}, not by {owner!r}: the id "
                "is in use by another writer, or its checkpoint was reset; use a new sink id",
                version=version,
            )
        planned = _decode_manifest(recorded, manifest)
        keep = {(t, s.path) for t, segs in planned.items() for s in segs}
        for topic, segs in offered.items():
            duplicates = [s for s in segs if (topic, s.path) not in keep]
            if duplicates:
                discard_staged(open_log(topic), duplicates)
    else:
        planned = offered
    out: dict[str, int | None] = {}
    for topic in sorted(planned):
        log = open_log(topic)
        prior = log.snapshot().txn_version(app_id)
        if prior is not None and prior >= version:
            out[topic] = None
            continue
        missing = [s.path for s in planned[topic] if not io.exists(f"{log.path}/{s.path}")]
        if missing:
            raise BrokerPersistenceError(
                f"write {version} of {app_id!r} cannot be completed on {topic}: staged segment "
                f"{missing[0]!r} is gone (deleted outside the write protocol)", topic=topic, path=missing[0],
            )
        out[topic] = log.commit_staged(list(planned[topic]), txn=(app_id, version))
    for name in io.list_dir(_staged_dir(app_id)):
        stem = name.removesuffix(".json")
        if name.endswith(".json") and stem.isdigit() and int(stem) < version:
            io.delete(f"{_staged_dir(app_id)}/{name}")
    return out


def recorded_staged(io: FileIO, *, app_id: str, version: int) -> dict[str, list[StagedSegment]] | None:
    """The segments ``commit_staged_once(app_id, version)`` recorded it would commit, if it began."""
    where = staged_manifest_path(app_id, version)
    data = io.read_bytes(where)
    return None if data is None else _decode_manifest(data, where)


def discard_staged(log: TopicLog, staged: Sequence[StagedSegment], *, keep: Collection[str] = ()) -> int:
    """Delete staged segment files (best effort) unless the log references them or ``keep`` names them.

    Returns the number of files deleted.  Safe to call for segments whose commit may have happened:
    files named by a live or removed ``add`` of the log are left alone.
    """
    if not staged:
        return 0
    referenced = set(keep)
    if log.exists():
        snap = log.snapshot()
        referenced |= {s.path for s in snap.segments} | set(snap.tombstones)
    deleted = 0
    for seg in staged:
        if seg.path in referenced:
            continue
        try:
            deleted += bool(log.io.delete(f"{log.path}/{seg.path}"))
        except BrokerPersistenceError:
            continue
    return deleted


__all__ = [
    "INPUT_COLUMNS",
    "STAGED_TXN_DIR",
    "PartitionAppend",
    "append_partitioned",
    "commit_staged_once",
    "discard_staged",
    "recorded_staged",
    "route_rows",
    "staged_manifest_path",
    "to_segment_rows",
]
