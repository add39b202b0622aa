"""Delta Lake log actions, as frozen pydantic models with the protocol's field names as aliases.

Only the actions and fields this library writes are modelled; readers ignore unknown actions and
fields, as the Delta protocol requires.  Our own facts about a segment (its base offset, entry
layout, publish-time bounds) travel in ``add.tags`` with the ``pubsub.`` prefix, so the table stays
at protocol (1, 2) and any Delta reader sees plain Parquet files (``docs/PROTOCOL.md``).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from broker_core.errors import LogCorrupted

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# Every integer of an action is stored as an int64 (checkpoints, segment columns, message ids): a
# value outside that range in a hand-edited commit is refused where it is decoded, naming the field,
# instead of overflowing later in a reader (an ``OverflowError`` per poll).
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]


class _Action(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")


class Protocol(_Action):
    min_reader_version: int = Field(1, alias="minReaderVersion")
    min_writer_version: int = Field(2, alias="minWriterVersion")


class Format(_Action):
    provider: str = "parquet"
    options: dict[str, str] = Field(default_factory=dict)


class Metadata(_Action):
    id: str
    name: str | None = None
    description: str | None = None
    format: Format = Field(default_factory=Format)
    schema_string: str = Field(alias="schemaString")
    partition_columns: list[str] = Field(default_factory=list, alias="partitionColumns")
    configuration: dict[str, str] = Field(default_factory=dict)
    created_time: Int64 | None = Field(None, alias="createdTime")


class Add(_Action):
    path: str
    partition_values: dict[str, str] = Field(default_factory=dict, alias="partitionValues")
    size: Count
    modification_time: Int64 = Field(alias="modificationTime")
    data_change: bool = Field(True, alias="dataChange")
    stats: str | None = None
    tags: dict[str, str] | None = None


class Remove(_Action):
    path: str
    data_change: bool = Field(True, alias="dataChange")
    deletion_timestamp: Int64 | None = Field(None, alias="deletionTimestamp")
    extended_file_metadata: bool | None = Field(None, alias="extendedFileMetadata")
    partition_values: dict[str, str] | None = Field(None, alias="partitionValues")
    size: Count | None = None
    tags: dict[str, str] | None = None


class Txn(_Action):
    app_id: str = Field(alias="appId")
    version: Int64
    last_updated: Int64 | None = Field(None, alias="lastUpdated")


class CommitInfo(_Action):
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="allow")
    timestamp: Int64 | None = None
    operation: str | None = None
    operation_parameters: dict[str, Any] | None = Field(None, alias="operationParameters")
    read_version: Int64 | None = Field(None, alias="readVersion")
    is_blind_append: bool | None = Field(None, alias="isBlindAppend")
    engine_info: str | None = Field(None, alias="engineInfo")


Action = Protocol | Metadata | Add | Remove | Txn | CommitInfo

_KEYS: dict[str, type[_Action]] = {
    "protocol": Protocol,
    "metaData": Metadata,
    "add": Add,
    "remove": Remove,
    "txn": Txn,
    "commitInfo": CommitInfo,
}
_NAMES: dict[type[_Action], str] = {cls: key for key, cls in _KEYS.items()}


def encode_actions(actions: list[Action]) -> bytes:
    """Render actions as one newline-delimited JSON commit file."""
    lines = []
    for action in actions:
        body = action.model_dump(mode="json", by_alias=True, exclude_none=True)
        lines.append(json.dumps({_NAMES[type(action)]: body}, separators=(",", ":")))
    return ("\n".join(lines) + "\n").encode("utf-8")


def decode_actions(data: bytes, *, version: int) -> list[Action]:
    """Parse a commit file; unknown actions are skipped, malformed ones raise ``LogCorrupted``.

    A commit with no action at all (a zero-byte or blank file: a torn write, or a hand edit) is
    corrupt too, never an empty version: every writer's commit holds at least its ``commitInfo``.
    """
    if not data.strip():
        raise LogCorrupted(
            f"log version {version} is empty ({len(data)} bytes): the commit was truncated or blanked; "
            "restore it from a backup, or run `pubsub topics check` to see the damage",
            version=version,
        )
    actions: list[Action] = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LogCorrupted(
            f"log version {version} is not UTF-8 (byte {exc.start}); the log was edited by hand or "
            "written by a broken writer",
            version=version,
        ) from exc
    # split on "\n" only: str.splitlines() also splits on U+2028, U+2029 and U+0085, which JSON
    # allows unescaped inside strings (delta-rs writes them raw)
    for line_no, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LogCorrupted(
                f"log version {version} line {line_no} is not JSON ({exc.msg}); the log was edited by hand "
                "or written by a broken writer",
                version=version,
            ) from exc
        except RecursionError:  # arrays or objects nested deeper than the parser's stack allows
            raise LogCorrupted(
                f"log version {version} line {line_no} nests JSON deeper than any action does; the log was "
                "edited by hand or written by a broken writer",
                version=version,
            ) from None
        if not isinstance(obj, dict) or len(obj) != 1:
            raise LogCorrupted(
                f"log version {version} line {line_no} is not a single action", version=version
            )
        (key, body), = obj.items()
        cls = _KEYS.get(key)
        if cls is None:
            continue
        try:
            actions.append(cls.model_validate(body))  # type: ignore[arg-type]
        except ValueError as exc:
            raise LogCorrupted(
                f"log version {version} line {line_no}: malformed {key!r} action: {exc}", version=version
            ) from exc
    return actions


__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "Action",
    "Add",
    "CommitInfo",
    "Format",
    "Metadata",
    "Protocol",
    "Remove",
    "Txn",
    "decode_actions",
    "encode_actions",
]
