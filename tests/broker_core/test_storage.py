"""LocalFileIO: the put-if-absent commit primitive, fresh-file writes, hints, listing, URL handling."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from broker_core.broker.root_check import open_root
from broker_core.errors import BrokerPersistenceError, DirectoryGone, InvalidUrl, PulsarException, RootNotFound
from broker_core.storage import LocalFileIO, file_io_for


@pytest.fixture
def io(tmp_path: Path) -> LocalFileIO:
    (tmp_path / "root").mkdir()
    return LocalFileIO(str(tmp_path / "root"))


def _tree(root: Path) -> list[str]:
    """Every file under ``root`` (relative paths, sorted), hidden temp files included."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


# --- put_if_absent ---------------------------------------------------------------------------------


def test_put_if_absent_creates_then_refuses_and_keeps_the_first_content(io: LocalFileIO) -> None:
    assert io.put_if_absent("t/_delta_log/00000000000000000000.json", b"first") is True
    assert io.put_if_absent("t/_delta_log/00000000000000000000.json", b"second") is False
    assert io.read_bytes("t/_delta_log/00000000000000000000.json") == b"first"
    # no temp file survives, neither from the win nor from the loss
    assert _tree(Path(io.root)) == ["t/_delta_log/00000000000000000000.json"]


def test_put_if_absent_of_empty_data_is_a_real_file(io: LocalFileIO) -> None:
    assert io.put_if_absent("a/empty", b"") is True
    assert io.read_bytes("a/empty") == b""
    assert io.put_if_absent("a/empty", b"x") is False
    assert io.read_bytes("a/empty") == b""


@pytest.mark.parametrize("fsync", [True, False])
def test_threads_racing_for_one_name_exactly_one_wins(tmp_path: Path, fsync: bool) -> None:
    io = LocalFileIO(str(tmp_path), fsync=fsync)
    contenders = 16
    barrier = threading.Barrier(contenders)
    results: dict[int, bool] = {}
    errors: list[BaseException] = []

    def race(i: int) -> None:
        try:
            barrier.wait()
            results[i] = io.put_if_absent("log/00000000000000000007.json", f"writer-{i}".encode() * 1000)
        except BaseException as exc:  # surfaced below; a thread's exception would be lost
            errors.append(exc)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    winners = [i for i, won in results.items() if won]
    assert len(results) == contenders
    assert len(winners) == 1
    # the file holds the winner's complete payload, never a mix or a loser's
    assert io.read_bytes("log/00000000000000000007.json") == f"writer-{winners[0]}".encode() * 1000
    assert _tree(tmp_path) == ["log/00000000000000000007.json"]


def test_many_names_raced_by_threads_each_have_one_winner(io: LocalFileIO) -> None:
    """Writers racing version after version (like log committers) never lose or double a version."""
    names = [f"log/{v:020d}.json" for v in range(50)]
    contenders = 4
    barrier = threading.Barrier(contenders)
    won: list[list[str]] = [[] for _ in range(contenders)]

    def race(i: int) -> None:
        barrier.wait()
        for name in names:
            if io.put_if_absent(name, f"{i}".encode()):
                won[i].append(name)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    all_won = sorted(n for w in won for n in w)
    assert all_won == names
    for i, names_won in enumerate(won):
        for name in names_won:
            assert io.read_bytes(name) == f"{i}".encode()


# --- write_new, replace, read, list, delete ---------------------------------------------------------


def test_write_new_writes_and_refuses_to_overwrite(io: LocalFileIO) -> None:
    io.write_new("t/part-1.parquet", b"segment bytes")
    assert io.read_bytes("t/part-1.parquet") == b"segment bytes"
    with pytest.raises(BrokerPersistenceError, match=r"part-1\.parquet") as info:
        io.write_new("t/part-1.parquet", b"other")
    assert isinstance(info.value, PulsarException)
    assert info.value.context["path"] == "t/part-1.parquet"
    assert io.read_bytes("t/part-1.parquet") == b"segment bytes"


def test_write_new_creates_parent_directories(io: LocalFileIO) -> None:
    io.write_new("a/b/c/part.parquet", b"x" * 100_000)
    assert io.read_bytes("a/b/c/part.parquet") == b"x" * 100_000
    stat = io.stat("a/b/c/part.parquet")
    assert stat is not None
    assert stat.size_bytes == 100_000
    assert stat.path == "a/b/c/part.parquet"


@pytest.mark.parametrize("method", ["write_new", "put_if_absent", "replace"])
def test_new_directories_and_entries_are_fsynced_into_their_parents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    """A power loss must not keep a file yet lose the directory path leading to it."""
    synced: list[str] = []
    monkeypatch.setattr(LocalFileIO, "_fsync_dir", staticmethod(lambda d: synced.append(os.path.relpath(d, tmp_path))))
    io = LocalFileIO(str(tmp_path / "root"))
    (tmp_path / "root" / "a").mkdir(parents=True)
    getattr(io, method)("a/b/c/file", b"data")
    # a/b and a/b/c were created: each is fsynced into its parent, then the file into a/b/c
    assert synced == ["root/a", "root/a/b", "root/a/b/c"]
    synced.clear()
    getattr(io, method)("a/b/c/file2", b"data")  # nothing new to create: only the entry itself
    assert synced == ["root/a/b/c"]


def test_no_directory_fsync_when_fsync_is_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    monkeypatch.setattr(LocalFileIO, "_fsync_dir", staticmethod(lambda d: synced.append(d)))
    io = LocalFileIO(str(tmp_path / "root"), fsync=False)
    io.write_new("a/b/file", b"x")
    io.put_if_absent("a/c/file", b"x")
    io.replace("a/d/file", b"x")
    assert synced == []


def test_a_directory_that_cannot_be_created_is_a_typed_error(io: LocalFileIO) -> None:
    io.write_new("blocker", b"a file where a directory should go")
    with pytest.raises(BrokerPersistenceError, match="blocker"):
        io.write_new("blocker/seg.parquet", b"x")


def test_replace_creates_and_overwrites_a_hint_without_leftovers(io: LocalFileIO) -> None:
    io.replace("t/_delta_log/_last_checkpoint", b'{"version":10}')
    assert io.read_bytes("t/_delta_log/_last_checkpoint") == b'{"version":10}'
    io.replace("t/_delta_log/_last_checkpoint", b'{"version":20}')
    assert io.read_bytes("t/_delta_log/_last_checkpoint") == b'{"version":20}'
    assert _tree(Path(io.root)) == ["t/_delta_log/_last_checkpoint"]


# --- anchored writes: what a deleted topic's late writers may not re-create ----------------------------


def test_anchored_writes_create_directories_below_the_anchor_only(io: LocalFileIO) -> None:
    (Path(io.root) / "ns" / "t").mkdir(parents=True)
    assert io.put_if_absent("ns/t/_cursors/s/00000000000000000000.json", b"{}", anchor="ns/t")
    io.write_new("ns/t/part-1.parquet", b"seg", anchor="ns/t")
    io.replace("ns/t/_delta_log/_last_checkpoint", b"{}", anchor="ns/t")
    assert _tree(Path(io.root)) == [
        "ns/t/_cursors/s/00000000000000000000.json", "ns/t/_delta_log/_last_checkpoint", "ns/t/part-1.parquet",
    ]


@pytest.mark.parametrize("write", ["put_if_absent", "write_new", "replace"])
@pytest.mark.parametrize("target", ["ns/t/x.json", "ns/t/_producers/00000000000000000001.json"])
def test_an_anchored_write_never_re_creates_a_removed_anchor(io: LocalFileIO, write: str, target: str) -> None:
    (Path(io.root) / "ns").mkdir()
    with pytest.raises(DirectoryGone, match="ns/t") as info:
        getattr(io, write)(target, b"late", anchor="ns/t")
    assert isinstance(info.value, BrokerPersistenceError)
    assert _tree(Path(io.root)) == []
    assert os.listdir(Path(io.root) / "ns") == []


@pytest.mark.parametrize("write", ["put_if_absent", "write_new", "replace"])
def test_a_write_whose_directory_vanishes_mid_way_is_directory_gone(
    io: LocalFileIO, write: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directory is renamed away (a deletion) just before the file is opened: nothing is re-created."""
    (Path(io.root) / "t").mkdir()
    real_open = os.open

    def rename_first(path: str, *args: Any, **kwargs: Any) -> int:
        if "late" in str(path) and os.path.isdir(Path(io.root) / "t"):
            os.rename(Path(io.root) / "t", Path(io.root) / "gone")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", rename_first)
    with pytest.raises(DirectoryGone):
        getattr(io, write)("t/late.json", b"x", anchor="t")
    monkeypatch.undo()
    assert not (Path(io.root) / "t").exists()
    assert _tree(Path(io.root) / "gone") == []


def test_read_bytes_exists_and_stat_of_a_missing_file(io: LocalFileIO) -> None:
    assert io.read_bytes("nope/00000000000000000000.json") is None
    assert io.exists("nope/00000000000000000000.json") is False
    assert io.stat("nope") is None


def test_list_dir_returns_sorted_names_and_empty_for_missing_or_file(io: LocalFileIO) -> None:
    for name in ["b.json", "a.json", "00000000000000000002.json", "00000000000000000010.json"]:
        assert io.put_if_absent(f"d/{name}", b"{}")
    io.write_new("d/sub/x", b"")
    assert io.list_dir("d") == [
        "00000000000000000002.json",
        "00000000000000000010.json",
        "a.json",
        "b.json",
        "sub",
    ]
    assert io.list_dir("missing") == []
    assert io.list_dir("d/a.json") == []


def test_delete_reports_whether_the_file_was_there(io: LocalFileIO) -> None:
    io.write_new("x", b"1")
    assert io.delete("x") is True
    assert io.delete("x") is False
    assert io.exists("x") is False


def test_open_input_reads_and_names_a_missing_segment(io: LocalFileIO) -> None:
    io.write_new("t/seg", b"0123456789")
    with io.open_input("t/seg") as handle:
        assert handle.read() == b"0123456789"
    with pytest.raises(BrokerPersistenceError, match="'t/gone'"):
        io.open_input("t/gone")


def test_root_uri_and_abs_path(tmp_path: Path) -> None:
    io = LocalFileIO(str(tmp_path / "r"))
    assert io.root == str(tmp_path / "r")
    assert io.root_uri == "file://" + str(tmp_path / "r")
    assert io.abs_path("a/b") == os.path.join(str(tmp_path / "r"), "a/b")
    assert not (tmp_path / "r").exists()  # a FileIO never creates its root: open_root decides


def test_a_missing_root_is_an_error_naming_it_unless_creating_it_was_asked(tmp_path: Path) -> None:
    missing = str(tmp_path / "typo")
    io = LocalFileIO(missing)
    with pytest.raises(RootNotFound, match=r"typo.*does not exist") as info:
        open_root(io, missing, create_root=False)
    assert info.value.root == missing
    assert not (tmp_path / "typo").exists()
    open_root(io, missing, create_root=True)
    assert (tmp_path / "typo").is_dir()
    open_root(io, missing, create_root=False)  # now it exists


def test_a_root_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(RootNotFound, match="not a directory"):
        open_root(LocalFileIO(str(tmp_path / "f")), str(tmp_path / "f"), create_root=True)
    with pytest.raises(BrokerPersistenceError, match="storage root"):
        open_root(LocalFileIO(str(tmp_path / "f" / "sub")), str(tmp_path / "f" / "sub"), create_root=True)


# --- file_io_for ------------------------------------------------------------------------------------


def test_file_io_for_a_plain_path(tmp_path: Path) -> None:
    io = file_io_for(str(tmp_path / "plain"))
    assert io.root == str(tmp_path / "plain")
    assert not (tmp_path / "plain").exists()


def test_file_io_for_a_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    io = file_io_for("rel/root")
    assert io.root == str(tmp_path / "rel" / "root")


@pytest.mark.parametrize("prefix", ["file://", "file://localhost", "FILE://"])
def test_file_io_for_a_file_url(tmp_path: Path, prefix: str) -> None:
    io = file_io_for(prefix + str(tmp_path / "u"))
    assert io.root == str(tmp_path / "u")
    assert io.root_uri == "file://" + str(tmp_path / "u")


def test_file_io_for_a_percent_encoded_file_url(tmp_path: Path) -> None:
    io = file_io_for("file://" + str(tmp_path).replace(" ", "%20") + "/with%20space")
    assert io.root == str(tmp_path / "with space")


def test_file_io_for_a_file_url_naming_a_remote_host_is_refused() -> None:
    with pytest.raises(InvalidUrl, match="somehost"):
        file_io_for("file://somehost/data")


@pytest.mark.parametrize(
    "url",
    [
        "pulsar://localhost:6650",
        "pulsar+ssl://broker.example.com:6651",
        "http://localhost:8080",
        "https://broker.example.com:8443/",
        "PULSAR://localhost:6650",
        "hdfs://namenode/path",
        "ftp://host/path",
    ],
)
def test_file_io_for_refuses_broker_and_unknown_scheme_urls_naming_the_url(url: str) -> None:
    with pytest.raises(InvalidUrl) as info:
        file_io_for(url)
    assert url in str(info.value)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, PulsarException)


@pytest.mark.parametrize("url", ["", "   ", "\t\n"])
def test_file_io_for_refuses_an_empty_or_blank_string(url: str) -> None:
    with pytest.raises(InvalidUrl, match="non-empty"):
        file_io_for(url)


def test_file_io_for_refuses_surrounding_whitespace(tmp_path: Path) -> None:
    with pytest.raises(InvalidUrl, match="whitespace"):
        file_io_for(f" {tmp_path} ")
    assert not (tmp_path / " ").exists()


@pytest.mark.parametrize("url", [None, b"/tmp/x", 42])
def test_file_io_for_refuses_non_strings(url: object) -> None:
    with pytest.raises(InvalidUrl):
        file_io_for(url)  # type: ignore[arg-type]


def test_file_io_for_passes_fsync_through(tmp_path: Path) -> None:
    io = file_io_for(str(tmp_path), fsync=False)
    assert io.put_if_absent("x", b"1") is True
    assert io.put_if_absent("x", b"2") is False
    assert io.read_bytes("x") == b"1"
