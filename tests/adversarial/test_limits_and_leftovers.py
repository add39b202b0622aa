"""Defect 5 of issue 10: limits refused up front, crash leftovers vacuumed, a read-only root readable."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from adversarial_helpers import TOPIC_DIR, T, log_dir, produce

from broker_core import Client, InvalidConfiguration, InvalidTopicName, MessageId, PulsarException
from broker_core.broker.admin import Admin
from broker_core.config import BrokerConfig
from broker_core.storage import LocalFileIO


def test_a_huge_partition_count_is_refused_up_front(root: Path, cli: Any) -> None:
    code, _, err = cli("topics", "create", "p", "--partitions", "999999999")
    assert code != 0 and "maxNumPartitionsPerPartitionedTopic" in err
    assert not (root / "public/default/persistent/_partitioned/p").exists()
    assert BrokerConfig().max_num_partitions_per_partitioned_topic == 1024


def test_partition_names_over_the_name_limit_are_refused_up_front(root: Path) -> None:
    admin = Admin(LocalFileIO(str(root)), BrokerConfig(fsync_enabled=False))
    name = "x" * 250  # a valid name, but "<name>-partition-9" has 262 bytes
    with pytest.raises(InvalidTopicName, match="262 bytes long"):
        admin.create_partitioned_topic(f"persistent://public/default/{name}", 10)
    assert not (root / "public/default/persistent/_partitioned" / name).exists()
    admin.create_partitioned_topic("persistent://public/default/" + "y" * 240, 10)  # 254 bytes: fits
    with pytest.raises(InvalidConfiguration):
        admin.create_partitioned_topic("persistent://public/default/z", 10**9)


def _age(path: Path, seconds: float) -> None:
    when = time.time() - seconds
    os.utime(path, (when, when))


def test_vacuum_removes_old_crash_temp_files_and_keeps_young_ones(root: Path, client: Client, cli: Any) -> None:
    produce(client, [b"a"])
    consumer = client.subscribe(T, "s")
    consumer.close()
    old = [log_dir(root) / f".{0:020d}.json.{'a' * 32}.tmp",
           root / TOPIC_DIR / "_cursors" / "s" / f".{5:020d}.json.{'b' * 32}.tmp",
           root / TOPIC_DIR / "_producers" / f".{1:020d}.json.{'c' * 32}.tmp"]
    young = log_dir(root) / f".{9:020d}.json.{'d' * 32}.tmp"
    for path in [*old, young]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"partial")
    for path in old:
        _age(path, 7200)
    code, _, err = cli("vacuum", "t", "--min-age", "1h")  # a dry run deletes nothing
    assert code == 0, err
    assert all(p.exists() for p in old)
    code, _out, err = cli("vacuum", "t", "--min-age", "1h", "--execute")
    assert code == 0, err
    assert not any(p.exists() for p in old)
    assert young.exists()


@pytest.fixture
def read_only(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make ``root`` behave like a read-only mount: every write below it fails with EROFS.

    Tests run as root, where ``chmod`` stops nothing, so the refusal is simulated at the ``os``
    calls the local storage makes (and ``os.access`` reports the root as not writable)."""
    prefix = str(root.resolve())

    def under(path: Any, dir_fd: int | None = None) -> bool:
        """``path`` (relative to ``dir_fd`` when given, as the local storage walks since issue 26) is below the root."""
        if not isinstance(path, (str, os.PathLike)):
            return False
        where = os.fspath(path)
        if dir_fd is not None and not os.path.isabs(where):
            where = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), where)
        return os.path.abspath(where).startswith(prefix)

    def refuse(name: str) -> Any:
        real = getattr(os, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            fds = [kwargs.get("dir_fd", kwargs.get("src_dir_fd")), kwargs.get("dst_dir_fd")]
            paths = [a for a, fd in zip(args[:2], fds, strict=False) if under(a, fd)]
            if paths and name in ("unlink", "rmdir") and not (os.path.lexists(paths[0]) if fds[0] is None else
                                                              os.path.lexists(os.path.join(
                                                                  os.readlink(f"/proc/self/fd/{fds[0]}"), paths[0]))):
                raise FileNotFoundError(errno.ENOENT, "No such file or directory", os.fspath(paths[0]))
            if paths:
                raise OSError(errno.EROFS, "Read-only file system", os.fspath(paths[0]))
            return real(*args, **kwargs)

        return call

    real_open, real_access = os.open, os.access

    def guarded_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if under(path, kwargs.get("dir_fd")) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, "Read-only file system", os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    def guarded_access(path: Any, mode: int, *args: Any, **kwargs: Any) -> bool:
        return False if under(path) and mode & os.W_OK else real_access(path, mode, *args, **kwargs)

    for name in ("mkdir", "link", "replace", "rename", "unlink", "rmdir"):
        monkeypatch.setattr(os, name, refuse(name))
    monkeypatch.setattr(os, "open", guarded_open)
    monkeypatch.setattr(os, "access", guarded_access)
    yield


def test_a_read_only_root_opens_for_peek_stats_and_readers(root: Path, client: Client, cli: Any,
                                                           new_process: Any, request: Any) -> None:
    produce(client, [b"a", b"b"])
    client.subscribe(T, "s").close()
    client.close()
    new_process()
    request.getfixturevalue("read_only")
    fresh = Client(str(root))
    try:
        reader = fresh.create_reader(T, start_message_id=MessageId.earliest)
        assert [reader.read_next(1000).data() for _ in range(2)] == [b"a", b"b"]
        with pytest.raises(PulsarException) as info:  # a write fails, typed and named
            fresh.create_producer(T).send(b"c")
        assert "Read-only file system" in str(info.value)
    finally:
        fresh.close()
    code, _, err = cli("topics", "stats", "t")
    assert code == 0, err
    code, _out, err = cli("topics", "peek", "t", "-s", "s")
    assert code == 0, err
    assert not list(log_dir(root).glob(".*.tmp"))
