"""Issue 26: raw errors where typed ones belong.

A read-only root, a malformed endpoint, JSON nested too deep and integers outside int64 each used to
escape as a foreign error (``OSError``, pyo3's ``PanicException``, ``RecursionError``,
``OverflowError``, ``ValueError``); each is now a subclass of ``PulsarException`` naming the value.
"""

from __future__ import annotations

import errno
import json
import os
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from moto_s3 import Root

from broker_core import (
    Client,
    ConsumerType,
    InitialPosition,
    InvalidConfiguration,
    LogCorrupted,
    MessageId,
    PulsarException,
    Timeout,
)
from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig
from broker_core.naming import TopicName
from broker_core.storage import LocalFileIO, file_io_for

T = "persistent://public/default/t"
TOPIC_DIR = "public/default/persistent/t"
LOG = f"{TOPIC_DIR}/_delta_log"
DEEP = b"[" * 100_000 + b"]" * 100_000


def _open(root: Root) -> Client:
    return Client(root.url, storage_options=root.storage_options or None)


def _io(root: Root) -> Any:
    return file_io_for(root.url, storage_options=root.storage_options or None, fsync=False)


def _versions(io: Any, directory: str) -> list[int]:
    return sorted(int(n[:20]) for n in io.list_dir(directory) if n.endswith(".json") and n[:20].isdigit())


def _actions(io: Any, version: int) -> list[dict[str, Any]]:
    data = io.read_bytes(f"{LOG}/{version:020d}.json")
    return [json.loads(line) for line in data.decode().splitlines() if line.strip()]


def _append(io: Any, lines: list[bytes]) -> int:
    version = _versions(io, LOG)[-1] + 1
    assert io.put_if_absent(f"{LOG}/{version:020d}.json", b"\n".join(lines) + b"\n")
    return version


# -- a read-only root -------------------------------------------------------------------------------


@pytest.fixture
def erofs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder whose writes fail as on a read-only mount.

    Tests run as root, whom ``chmod`` stops from nothing, so the mount is simulated at the ``os`` calls:
    creating a file fails with EROFS, and so does ``unlink`` *of a file that does not exist*, which is
    what Linux does on a read-only mount (checked on a ``mount -o ro`` tmpfs): the check of the
    filesystem comes before the look-up of the name.  That second EROFS is what masked the typed error.
    """
    root = tmp_path / "ro"
    root.mkdir()
    prefix = str(root)
    real_open, real_unlink = os.open, os.unlink

    def full(path: Any, dir_fd: int | None) -> str:  # the local storage acts through ``dir_fd`` (D120)
        where = os.fspath(path)
        return where if dir_fd is None else os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), where)

    def guarded_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if full(path, kwargs.get("dir_fd")).startswith(prefix) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, "Read-only file system", os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    def guarded_unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if full(path, kwargs.get("dir_fd")).startswith(prefix):
            raise OSError(errno.EROFS, "Read-only file system", os.fspath(path))
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded_open)
    monkeypatch.setattr(os, "unlink", guarded_unlink)
    return root


@pytest.mark.parametrize("write", ["put_if_absent", "write_new", "replace"])
def test_a_write_to_a_read_only_root_is_typed_and_names_the_file(erofs: Path, write: str) -> None:
    io = LocalFileIO(str(erofs), fsync=False)
    with pytest.raises(PulsarException) as info:
        getattr(io, write)("00000000000000000001.json", b"{}")
    message = str(info.value)
    assert "00000000000000000001.json" in message and "read-only" in message
    assert str(erofs) in message
    assert isinstance(info.value, PermissionError)  # AuthorizationError: also a PermissionError


# -- a malformed endpoint ---------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["http://[::1", "http://127.0.0.1:99999", "::", "http://", "not a url",
                                      "http://exa mple.com"])
def test_a_malformed_endpoint_is_invalid_configuration_not_a_panic(endpoint: str) -> None:
    options = {"aws_endpoint": endpoint, "aws_region": "us-east-1", "aws_access_key_id": "AKIAEXAMPLE",
               "aws_secret_access_key": "very-secret-value-1", "aws_allow_http": "true"}
    with pytest.raises(InvalidConfiguration) as info:  # obstore panics (a BaseException) on each of these
        Client("s3://bucket/prefix", storage_options=options)
    assert isinstance(info.value, PulsarException)
    assert "aws_endpoint" in str(info.value) and repr(endpoint) in str(info.value)
    assert "very-secret-value-1" not in str(info.value)


def test_a_malformed_endpoint_variable_is_named_and_userinfo_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT", "http://user:pass-word-9@127.0.0.1:70000")
    options = {"aws_region": "us-east-1", "aws_access_key_id": "AKIAEXAMPLE", "aws_secret_access_key": "s3cr3t-x"}
    with pytest.raises(InvalidConfiguration) as info:
        Client("s3://bucket/prefix", storage_options=options)
    assert "AWS_ENDPOINT" in str(info.value) and "127.0.0.1:70000" in str(info.value)
    assert "pass-word-9" not in str(info.value)


# -- JSON nested too deep ---------------------------------------------------------------------------


def test_a_commit_nested_too_deep_is_log_corrupted_naming_the_version(any_root: Root) -> None:
    with closing(_open(any_root)) as client:
        client.create_producer(T).send(b"a")
        version = _append(_io(any_root), [DEEP])
    with closing(_open(any_root)) as fresh:
        with pytest.raises(LogCorrupted, match=f"log version {version}") as info:
            fresh.create_reader(T, MessageId.earliest).read_next(1000)
        assert isinstance(info.value, PulsarException)


def test_a_policy_record_nested_too_deep_is_log_corrupted_naming_the_file(any_root: Root) -> None:
    with closing(_open(any_root)) as client:
        client.create_producer(T).send(b"a")
        io = _io(any_root)
        directory = "public/default/_namespace"
        newest = _versions(io, directory)[-1]
        io.replace(f"{directory}/{newest:020d}.json", DEEP)
        with pytest.raises(LogCorrupted, match=f"{newest:020d}.json"):
            Broker(io, BrokerConfig(fsync_enabled=False)).policies.effective(TopicName.parse(T))


def test_a_cursor_version_nested_too_deep_falls_back_like_any_damaged_one(any_root: Root) -> None:
    with closing(_open(any_root)) as client:
        consumer = client.subscribe(T, "s", initial_position=InitialPosition.Earliest)
        client.create_producer(T).send(b"a")
        consumer.acknowledge(consumer.receive(5000))
        consumer.close()
    io = _io(any_root)
    directory = f"{TOPIC_DIR}/_cursors/s"
    newest = _versions(io, directory)[-1]
    io.replace(f"{directory}/{newest:020d}.json", DEEP)
    from broker_core.subscription.cursor_store import CursorStore

    version, cursor = CursorStore(io, TOPIC_DIR, "s").load()
    assert cursor is not None and version == newest


# -- integers outside int64, a ledger id that is not a number ---------------------------------------


def _damage(io: Any, kind: str) -> tuple[int, str]:
    """Append one hand-written commit of ``kind``; returns its version and the field it damages."""
    info = b'{"commitInfo":{"operation":"HAND EDIT"}}'
    if kind in ("nextOffset-huge", "nextOffset-negative"):
        value = 2**63 if kind == "nextOffset-huge" else -5
        txn = json.dumps({"txn": {"appId": "pubsub.nextOffset", "version": value}}).encode()
        return _append(io, [txn, info]), str(value)
    if kind == "txn-huge":
        txn = json.dumps({"txn": {"appId": "some-producer", "version": 2**64}}).encode()
        return _append(io, [txn, info]), "version"
    if kind == "baseOffset-huge":
        add = next(a for v in reversed(_versions(io, LOG)) for a in _actions(io, v) if "add" in a)
        add["add"]["tags"]["pubsub.baseOffset"] = str(2**63)
        add["add"]["path"] = "part-" + "0" * 31 + "1.zstd.parquet"
        return _append(io, [json.dumps(add).encode(), info]), "pubsub.baseOffset"
    meta = next(a for a in _actions(io, 0) if "metaData" in a)
    meta["metaData"]["configuration"]["pubsub.ledgerId"] = "zz"
    return _append(io, [json.dumps(meta).encode(), info]), "'zz'"


KINDS = ["nextOffset-huge", "nextOffset-negative", "txn-huge", "baseOffset-huge", "ledgerId-zz"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_out_of_range_value_is_log_corrupted_naming_the_version_and_field(any_root: Root, kind: str) -> None:
    with closing(_open(any_root)) as client:
        client.create_producer(T).send(b"a")
        version, field = _damage(_io(any_root), kind)
    with closing(_open(any_root)) as fresh:
        with pytest.raises(LogCorrupted) as info:
            fresh.create_reader(T, MessageId.earliest).read_next(1000)
        assert f"log version {version}" in str(info.value) and field in str(info.value)


@pytest.mark.parametrize("kind", ["nextOffset-huge", "ledgerId-zz"])
def test_a_consumer_meets_the_damage_once_not_in_a_loop(any_root: Root, kind: str,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    with closing(_open(any_root)) as client:
        consumer = client.subscribe(T, "s", consumer_type=ConsumerType.Shared,
                                    initial_position=InitialPosition.Earliest)
        client.create_producer(T).send(b"a")
        consumer.acknowledge(consumer.receive(5000))
        version, _field = _damage(_io(any_root), kind)
        with pytest.raises(LogCorrupted, match=f"log version {version}"):
            consumer.receive(5000)
        with pytest.raises(Timeout):  # surfaced once, not again and again
            consumer.receive(300)
        assert len([r for r in caplog.records if r.exc_info]) <= 1  # no traceback per poll


def test_a_cursor_version_with_an_int64_overflowing_position_is_skipped_as_damaged(any_root: Root,
                                                                                     new_process: Any) -> None:
    with closing(_open(any_root)) as client:
        consumer = client.subscribe(T, "s", consumer_type=ConsumerType.Shared,
                                    initial_position=InitialPosition.Earliest)
        producer = client.create_producer(T)
        producer.send(b"a")
        producer.send(b"b")
        consumer.acknowledge(consumer.receive(5000))
        consumer.close()
    io = _io(any_root)
    directory = f"{TOPIC_DIR}/_cursors/s"
    newest = _versions(io, directory)[-1]
    doc = json.loads(io.read_bytes(f"{directory}/{newest:020d}.json"))
    doc["markDelete"] = 2**63
    io.put_if_absent(f"{directory}/{newest + 1:020d}.json", json.dumps(doc).encode())
    new_process()
    with closing(_open(any_root)) as fresh:
        consumer = fresh.subscribe(T, "s", consumer_type=ConsumerType.Shared)
        assert consumer.receive(5000).data() == b"b"  # from the newest readable version
        consumer.close()
