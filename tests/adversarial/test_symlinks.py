"""Issue 26: a local root follows no symbolic link below its folder (``docs/PROTOCOL.md``, "Symbolic links").

Whoever can write into the root plants a link; the library must neither read, write nor delete
anything outside the root through it, and says so with ``SymlinkRefused`` naming the path.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from adversarial_helpers import TOPIC_DIR, T, commit_file, log_dir, produce

from broker_core import Client, InitialPosition, PulsarException, SymlinkRefused
from broker_core.storage import LocalFileIO
from broker_core.topic.topic_log import TopicLog


def _outside(tmp_path: Path) -> Path:
    """A sentinel directory beside the root, with a private file and a subdirectory."""
    sentinel = tmp_path / "outside"
    (sentinel / "sub").mkdir(parents=True)
    (sentinel / "keep.txt").write_text("keep")
    (sentinel / "sub" / "deep.txt").write_text("deep")
    return sentinel


def _sentinel_intact(sentinel: Path) -> bool:
    return ((sentinel / "keep.txt").read_text() == "keep" and (sentinel / "sub" / "deep.txt").read_text() == "deep"
            and sorted(p.name for p in sentinel.iterdir()) == ["keep.txt", "sub"])


def _segments(root: Path) -> list[Path]:
    return [root / TOPIC_DIR / s.path for s in TopicLog(LocalFileIO(str(root)), TOPIC_DIR).snapshot().segments]


def test_a_linked_trash_makes_topic_delete_refuse_and_removes_nothing_outside(root: Path, tmp_path: Path,
                                                                             client: Client, cli: Any) -> None:
    produce(client, [b"a", b"b"])
    client.close()
    sentinel = _outside(tmp_path)
    os.symlink(sentinel, root / "_pubsub" / "trash")
    code, _, err = cli("topics", "delete", "t")
    assert code != 0
    assert "symbolic link" in err and "_pubsub/trash" in err
    assert _sentinel_intact(sentinel)
    assert (root / TOPIC_DIR / "_delta_log").is_dir()  # refused before anything moved


def test_a_linked_topic_directory_is_refused_and_its_deletion_removes_only_the_link(root: Path, tmp_path: Path,
                                                                                    client: Client) -> None:
    produce(client, [b"a"])
    client.close()
    elsewhere = tmp_path / "elsewhere"
    os.rename(root / TOPIC_DIR, elsewhere)
    os.symlink(elsewhere, root / TOPIC_DIR)
    io = LocalFileIO(str(root))
    with pytest.raises(SymlinkRefused, match="symbolic link"):
        io.list_dir(f"{TOPIC_DIR}/_delta_log")
    with pytest.raises(SymlinkRefused):
        TopicLog(io, TOPIC_DIR).snapshot()
    with pytest.raises(SymlinkRefused):
        io.write_new(f"{TOPIC_DIR}/x.parquet", b"x", anchor=TOPIC_DIR)
    io.delete_tree(TOPIC_DIR)  # the link goes to the trash and is unlinked; its target is untouched
    assert not os.path.lexists(root / TOPIC_DIR)
    assert (elsewhere / "_delta_log").is_dir() and list((elsewhere / "_delta_log").iterdir())


def test_a_segment_linked_to_an_outside_file_is_refused_not_read(root: Path, tmp_path: Path, client: Client) -> None:
    produce(client, [b"a", b"b"], batches=2)
    secret = tmp_path / "secret.parquet"
    segment = _segments(root)[1]
    secret.write_bytes(segment.read_bytes())  # a valid segment: following the link would deliver it
    segment.unlink()
    os.symlink(secret, segment)
    io = LocalFileIO(str(root))
    with pytest.raises(SymlinkRefused, match="symbolic link") as info:
        io.read_bytes(f"{TOPIC_DIR}/{segment.name}")
    assert info.value.context["path"] == f"{TOPIC_DIR}/{segment.name}"
    with pytest.raises(SymlinkRefused):
        io.open_input(f"{TOPIC_DIR}/{segment.name}")
    topic = TopicLog(io, TOPIC_DIR)
    assert topic.read(0, 1)[0].column("value").to_pylist() == [b"a"]
    with pytest.raises(SymlinkRefused):
        topic.read(1, 2)


def test_a_linked_log_directory_or_commit_file_is_refused(root: Path, tmp_path: Path, client: Client,
                                                          new_process: Any) -> None:
    produce(client, [b"a", b"b"], batches=2)
    client.close()
    outside_commit = tmp_path / "commit.json"
    newest = commit_file(root, 1)
    outside_commit.write_bytes(newest.read_bytes())
    newest.unlink()
    os.symlink(outside_commit, newest)
    new_process()
    io = LocalFileIO(str(root))
    with pytest.raises(SymlinkRefused):
        io.read_bytes(f"{TOPIC_DIR}/_delta_log/{newest.name}")
    with pytest.raises(SymlinkRefused):
        TopicLog(io, TOPIC_DIR).snapshot()
    # the whole log directory a link: listing and committing through it are refused, nothing written outside
    outside_log = tmp_path / "log"
    os.rename(log_dir(root), outside_log)
    os.symlink(outside_log, log_dir(root))
    before = sorted(p.name for p in outside_log.iterdir())
    with pytest.raises(SymlinkRefused):
        io.list_dir(f"{TOPIC_DIR}/_delta_log")
    with pytest.raises(SymlinkRefused):
        io.put_if_absent(f"{TOPIC_DIR}/_delta_log/{2:020d}.json", b"{}\n", anchor=TOPIC_DIR)
    assert sorted(p.name for p in outside_log.iterdir()) == before


def test_a_linked_cursor_directory_refuses_cursor_writes_and_writes_nothing_outside(root: Path, tmp_path: Path,
                                                                                    client: Client,
                                                                                    new_process: Any) -> None:
    produce(client, [b"a", b"b"])
    consumer = client.subscribe(T, "s", initial_position=InitialPosition.Earliest)
    consumer.acknowledge(consumer.receive(timeout_millis=2000))
    consumer.close()
    client.close()
    cursors = root / TOPIC_DIR / "_cursors"
    outside = tmp_path / "cursors"
    outside.mkdir()
    os.rename(cursors / "s", outside / "s")
    os.symlink(outside / "s", cursors / "s")
    before = sorted(p.name for p in (outside / "s").iterdir())
    new_process()
    again = Client(str(root))
    try:
        with pytest.raises(PulsarException, match="symbolic link"):
            c = again.subscribe(T, "s", initial_position=InitialPosition.Earliest)
            c.acknowledge(c.receive(timeout_millis=2000))
            c.close()
    finally:
        again.close()
    assert sorted(p.name for p in (outside / "s").iterdir()) == before


def test_check_repair_never_copies_a_linked_outside_file_into_the_root(root: Path, tmp_path: Path, client: Client,
                                                                        cli: Any) -> None:
    produce(client, [b"a", b"b"], batches=2)
    client.close()
    private = tmp_path / "id_rsa"
    private.write_bytes(b"-----BEGIN PRIVATE KEY----- not a segment")
    private.chmod(0o600)
    segment = _segments(root)[0]
    segment.unlink()
    os.symlink(private, segment)
    _, out, err = cli("topics", "check", "t", "--repair", "--execute")
    assert "symbolic link" in out + err
    copies = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and b"PRIVATE KEY" in p.read_bytes()]
    assert copies == []
    assert not (root / TOPIC_DIR / "_damaged").exists()
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert private.read_bytes().startswith(b"-----BEGIN")


def test_a_link_above_the_root_is_the_users_choice_and_is_followed(tmp_path: Path, root: Path) -> None:
    """The root's own path may lead through links (``/tmp`` on some systems): only links below it are refused."""
    alias = tmp_path / "alias"
    os.symlink(root, alias)
    io = LocalFileIO(str(alias))
    io.write_new("a/b.bin", b"x")
    assert io.read_bytes("a/b.bin") == b"x"
    assert (root / "a" / "b.bin").read_bytes() == b"x"
