"""Issue 26: ``pubsub topics check`` examines the records beside the segments too: the log's metaData,
the compacted-view pointer and the policy records; each bad one is reported with what is wrong and
where, and the exit code is nonzero."""

from __future__ import annotations

import json
from contextlib import closing
from typing import Any

import pytest
from moto_s3 import Root

from broker_core import Client
from broker_core.cli import main
from broker_core.storage import file_io_for

T = "persistent://public/default/t"
TOPIC_DIR = "public/default/persistent/t"
LOG = f"{TOPIC_DIR}/_delta_log"


def _io(root: Root) -> Any:
    return file_io_for(root.url, storage_options=root.storage_options or None, fsync=False)


def _versions(io: Any, directory: str) -> list[int]:
    return sorted(int(n[:20]) for n in io.list_dir(directory) if n.endswith(".json") and n[:20].isdigit())


def _check(root: Root, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[Any]]:
    """``pubsub topics check t --json`` on ``root`` (an S3 root is reached through the ``AWS_*``
    environment the emulator's fixture exports)."""
    monkeypatch.delenv("PUBSUB_ROOT", raising=False)
    capsys.readouterr()
    code = main(["--root", root.url, "topics", "check", "t", "--json"])
    out = capsys.readouterr()
    assert out.out, out.err
    return code, json.loads(out.out)


@pytest.fixture
def topic(any_root: Root) -> Any:
    with closing(Client(any_root.url, storage_options=any_root.storage_options or None)) as client:
        client.create_producer(T).send(b"a")
    return _io(any_root)


def _append_metadata(io: Any, change: dict[str, Any]) -> int:
    first = [json.loads(line) for line in io.read_bytes(f"{LOG}/{0:020d}.json").decode().splitlines() if line]
    meta = next(a for a in first if "metaData" in a)
    meta["metaData"].update(change)
    version = _versions(io, LOG)[-1] + 1
    io.put_if_absent(f"{LOG}/{version:020d}.json",
                     (json.dumps(meta) + '\n{"commitInfo":{"operation":"HAND EDIT"}}\n').encode())
    return version


@pytest.mark.parametrize(("change", "expected"), [
    ({"configuration": {"pubsub.ledgerId": "zz", "pubsub.formatVersion": "1"}}, "pubsub.ledgerId = 'zz'"),
    ({"schemaString": "not json"}, "schemaString is not JSON"),
    ({"format": {"provider": "orc", "options": {}}}, "'orc'"),
    ({"partitionColumns": ["key"]}, "partitions by ['key']"),
])
def test_check_reports_a_bad_metadata(any_root: Root, topic: Any, change: dict[str, Any], expected: str,
                                      capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    version = _append_metadata(topic, change)
    code, [result] = _check(any_root, capsys, monkeypatch)
    assert code != 0
    details = [f["detail"] for f in result["findings"]]
    assert any(expected in d and str(version) in d for d in details), details


@pytest.mark.parametrize(("pointer", "expected"), [
    (b"{", "not JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "nests deeper"),
    (json.dumps({"horizon": 1, "file": "_compacted/" + "a" * 32 + ".parquet", "rows": 1}).encode(),
     "does not exist"),
    (json.dumps({"horizon": 1, "file": "../../x.parquet", "rows": 1}).encode(), "not a view file"),
    (json.dumps({"horizon": 1, "file": "_compacted/" + "b" * 32 + ".parquet", "rows": 5}).encode(),
     "not 0 <= rows <= horizon"),
    (json.dumps({"horizon": 2**63, "file": "_compacted/" + "c" * 32 + ".parquet", "rows": 1}).encode(),
     "outside 0..2**63-1"),
])
def test_check_reports_a_bad_compacted_view_pointer(any_root: Root, topic: Any, pointer: bytes, expected: str,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    topic.put_if_absent(f"{TOPIC_DIR}/_compacted/state/{0:020d}.json", pointer)
    code, [result] = _check(any_root, capsys, monkeypatch)
    assert code != 0
    [finding] = [f for f in result["findings"] if expected in f["detail"]]
    assert finding["kind"] == "view pointer" and "_compacted/state" in finding["file"]
    assert {f["kind"] for f in result["findings"]} == {"view pointer"}


@pytest.mark.parametrize("record", ["public/default/_namespace", "public/default/persistent/_policies/t"])
def test_check_reports_a_damaged_policy_record(any_root: Root, topic: Any, record: str,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    versions = _versions(topic, record)
    newest = (versions[-1] + 1) if versions else 0
    topic.put_if_absent(f"{record}/{newest:020d}.json", b'{"policies": {"retention_time_in_minutes": "x"}}')
    code, [result] = _check(any_root, capsys, monkeypatch)
    assert code != 0
    [finding] = result["findings"]
    assert finding["kind"] == "policies" and f"{newest:020d}.json" in finding["detail"]
