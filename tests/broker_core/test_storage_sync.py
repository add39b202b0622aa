"""D88: a producer's segment is written without its fsyncs, which run beside the commit's own
write; the commit waits for them before its link."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from log_helpers import TOPIC_DIR, open_topic, producer_table

from broker_core import Client
from broker_core.errors import BrokerPersistenceError, DirectoryGone
from broker_core.storage import LocalFileIO
from broker_core.topic.appends import SegmentSync


def _record(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[tuple[str, str]]:
    """Record segment syncs, directory fsyncs and hard links, in order (paths relative to ``root``)."""
    events: list[tuple[str, str]] = []
    real_sync, real_link = LocalFileIO.sync, os.link

    def sync(self: LocalFileIO, paths: list[str]) -> None:
        real_sync(self, paths)
        events.extend(("sync", os.path.relpath(self.abs_path(p), root)) for p in paths)

    def dir_sync(path: str) -> None:
        events.append(("dir", os.path.relpath(path, root)))

    def link(src: str, dst: str) -> None:
        real_link(src, dst)
        events.append(("link", os.path.relpath(dst, root)))

    monkeypatch.setattr(LocalFileIO, "sync", sync)
    monkeypatch.setattr(LocalFileIO, "_fsync_dir", staticmethod(dir_sync))
    monkeypatch.setattr(os, "link", link)
    return events


def _durable_before_link(events: list[tuple[str, str]], segment: str, commit: str) -> None:
    link = events.index(("link", commit))
    assert ("sync", segment) in events[:link]
    assert ("dir", os.path.dirname(segment)) in events[:link]  # the segment's directory entry too


def test_an_appended_segment_and_its_directory_are_durable_before_the_commit_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = open_topic(tmp_path, fsync=True)
    events = _record(monkeypatch, tmp_path)
    result = topic.append(producer_table("p", range(3)), layout=[3])
    assert result.segment is not None
    commit = f"{TOPIC_DIR}/_delta_log/{result.version:020d}.json"
    _durable_before_link(events, f"{TOPIC_DIR}/{result.segment.path}", commit)
    assert events[-1] == ("dir", f"{TOPIC_DIR}/_delta_log")  # the link itself, before returning


def test_a_producers_segment_is_durable_before_its_commit_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _record(monkeypatch, tmp_path)
    client = Client(str(tmp_path))
    try:
        producer = client.create_producer("persistent://public/default/t", batching_enabled=True)
        for i in range(3):
            producer.send(f"m{i}".encode())
    finally:
        client.close()
    segments = [path for kind, path in events if kind == "sync" and path.startswith("public/default/")]
    assert len(segments) == 3  # one per send: each waits for its commit
    commits = [path for kind, path in events if kind == "link" and "/_delta_log/" in path
               and path.startswith(os.path.dirname(segments[0]))]
    for segment, commit in zip(segments, commits[-3:], strict=True):
        _durable_before_link(events, segment, commit)


def test_write_new_unsynced_leaves_the_file_and_its_entry_to_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    io = LocalFileIO(str(tmp_path))
    (tmp_path / "t").mkdir()
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    io.write_new("t/seg", b"rows", anchor="t", sync=False)
    assert fsyncs == []
    io.sync(["t/seg"])
    assert len(fsyncs) == 2  # the file, then its directory
    assert (tmp_path / "t" / "seg").read_bytes() == b"rows"
    fsyncs.clear()
    LocalFileIO(str(tmp_path), fsync=False).sync(["t/seg"])
    assert fsyncs == []
    with pytest.raises(DirectoryGone, match="t/missing"):
        io.sync(["t/missing"])


def test_put_if_absent_calls_ready_before_the_link_and_a_failing_ready_leaves_nothing(tmp_path: Path) -> None:
    io = LocalFileIO(str(tmp_path))
    seen: list[list[str]] = []
    assert io.put_if_absent("log/1", b"one", ready=lambda: seen.append(os.listdir(tmp_path / "log")))
    assert len(seen) == 1 and seen[0][0].endswith(".tmp")  # written, not linked yet

    def fail() -> None:
        raise BrokerPersistenceError("segment sync failed")

    with pytest.raises(BrokerPersistenceError, match="segment sync failed"):
        io.put_if_absent("log/2", b"two", ready=fail)
    assert os.listdir(tmp_path / "log") == ["1"]  # neither the commit nor its temp file


class _CountingIO:
    def __init__(self, error: BaseException | None = None) -> None:
        self.calls = 0
        self.error = error

    def sync(self, paths: list[str]) -> None:
        self.calls += 1
        if self.error is not None:
            raise self.error


def test_segment_sync_runs_once_and_every_caller_gets_its_error() -> None:
    io = _CountingIO()
    sync = SegmentSync(io, ["t/seg"])  # type: ignore[arg-type]
    threads = [threading.Thread(target=sync.ensure) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sync.ensure()
    assert io.calls == 1
    failing = SegmentSync(_CountingIO(BrokerPersistenceError("disk gone")), ["t/seg"])  # type: ignore[arg-type]
    for _ in range(2):
        with pytest.raises(BrokerPersistenceError, match="disk gone"):
            failing.ensure()
