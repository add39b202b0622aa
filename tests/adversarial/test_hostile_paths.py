"""Defect 1 of issue 10: paths read from storage never leave the root.

Each probe writes a hostile path where the log, a checkpoint, a staged-write manifest or the
compacted view's pointer holds one, then runs what would have followed it outside the root.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from adversarial_helpers import TOPIC_DIR, T, commit_file, produce, write_commit

from broker_core import Client, LogCorrupted, MessageId, PathOutsideRoot
from broker_core.log.checkpoint import checkpoint_path
from broker_core.producer.bulk import commit_staged_once, recorded_staged, staged_manifest_path
from broker_core.storage import LocalFileIO
from broker_core.storage.local import contained_path
from broker_core.topic.compacted_view import STATE_DIR, view_store
from broker_core.topic.topic_log import TopicLog

ESCAPE = "../../../../../victim.txt"


def _reader_values(root: Path) -> list[bytes]:
    client = Client(str(root))
    try:
        reader = client.create_reader(T, start_message_id=MessageId.earliest)
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(1000).data())
        return out
    finally:
        client.close()


def _segment_outside(root: Path, client: Client) -> Path:
    """A real one-message segment ("stolen") placed beside the root."""
    produce(client, [b"stolen"], topic="persistent://public/default/other")
    source = next((root / "public/default/persistent/other").glob("part-*.parquet"))
    outside = root.parent / "outside.parquet"
    outside.write_bytes(source.read_bytes())
    return outside


def test_a_remove_escaping_the_root_deletes_nothing_and_vacuum_says_which_commit(
        root: Path, client: Client, cli: Any) -> None:
    produce(client, [b"a", b"b"])
    victim = root.parent / "victim.txt"
    victim.write_text("precious")
    version = write_commit(root, [{"remove": {"path": ESCAPE, "dataChange": True, "deletionTimestamp": 0}}])
    code, _, err = cli("vacuum", "t", "--min-age", "1h", "--execute")
    assert code != 0
    assert f"log version {version}" in err and "not a segment name" in err
    assert victim.read_text() == "precious"
    with pytest.raises(LogCorrupted, match=f"log version {version}"):
        TopicLog(LocalFileIO(str(root)), TOPIC_DIR).snapshot()


@pytest.mark.parametrize("path", ["../../../../../outside.parquet", "ABSOLUTE", "sub/part-" + "0" * 32 + ".parquet",
                                  "part-" + "0" * 32 + ".parquet/../../x.parquet", "%2e%2e/outside.parquet"])
def test_an_add_naming_a_file_outside_the_topic_is_log_corrupted_not_read(root: Path, client: Client,
                                                                           path: str) -> None:
    produce(client, [b"mine"])
    outside = _segment_outside(root, client)
    path = str(outside) if path == "ABSOLUTE" else path
    tags = {"pubsub.baseOffset": "1", "pubsub.numRecords": "1", "pubsub.baseEntryId": "1",
            "pubsub.entryLayout": "1", "pubsub.minPublishTimeMs": "0", "pubsub.maxPublishTimeMs": "0"}
    version = write_commit(root, [{"add": {"path": path, "size": 1, "modificationTime": 0, "dataChange": True,
                                           "partitionValues": {}, "tags": tags}},
                                 {"txn": {"appId": "pubsub.nextOffset", "version": 2}},
                                 {"txn": {"appId": "pubsub.nextEntryId", "version": 2}}])
    with pytest.raises(LogCorrupted, match=f"log version {version}"):
        _reader_values(root)


def test_a_checkpoint_naming_a_path_outside_is_refused_and_json_replay_takes_over(root: Path,
                                                                                 client: Client) -> None:
    produce(client, [b"a", b"b"], batches=2)
    log = TopicLog(LocalFileIO(str(root)), TOPIC_DIR)
    version = log.log.checkpoint()
    path = root / checkpoint_path(TOPIC_DIR, version)
    table = pq.read_table(path)
    adds = table.column("add").to_pylist()
    adds = [None if a is None else {**a, "path": "../../../../outside.parquet"} for a in adds]
    pq.write_table(table.set_column(0, "add", __import__("pyarrow").array(adds, table.schema.field("add").type)),
                   path)
    # the damaged checkpoint is skipped (a warning), the JSON commits still hold every message
    assert _reader_values(root) == [b"a", b"b"]
    for v in range(version):  # with the commits before it gone, the checkpoint itself is the error
        commit_file(root, v).unlink()
    with pytest.raises(LogCorrupted, match="not a segment name"):
        TopicLog(LocalFileIO(str(root)), TOPIC_DIR).snapshot()


def test_a_staged_manifest_with_an_escaping_path_is_refused(root: Path, client: Client) -> None:
    produce(client, [b"a"])
    io = LocalFileIO(str(root))
    victim = root.parent / "victim.parquet"
    victim.write_bytes(b"x")
    manifest = {"appId": "app", "version": 0, "owner": None,
                "topics": {T + "": [{"path": "../../../../../victim.parquet", "size": 1, "numRecords": 1,
                                     "minPublishMs": 0, "maxPublishMs": 0}]}}
    io.put_if_absent(staged_manifest_path("app", 0), json.dumps(manifest).encode())
    with pytest.raises(LogCorrupted, match="not a segment name"):
        recorded_staged(io, app_id="app", version=0)
    log = TopicLog(io, TOPIC_DIR)
    with pytest.raises(LogCorrupted, match="not a segment name"):
        commit_staged_once(io, lambda _t: log, {}, app_id="app", version=0)
    assert victim.exists()
    assert TopicLog(io, TOPIC_DIR).snapshot().version == log.snapshot().version


def test_a_compacted_view_pointer_escaping_the_topic_is_log_corrupted(root: Path, client: Client) -> None:
    produce(client, [b"a"])
    io = LocalFileIO(str(root))
    state = root / TOPIC_DIR / STATE_DIR
    state.mkdir(parents=True)
    doc = {"horizon": 1, "file": "../../../../../outside.parquet", "rows": 1, "ledgerId": 1, "_writeId": "x"}
    (state / f"{0:020d}.json").write_text(json.dumps(doc))
    with pytest.raises(LogCorrupted, match="not a view file"):
        view_store(io, TOPIC_DIR).latest()


def test_storage_refuses_paths_resolving_outside_the_root(root: Path, tmp_path: Path) -> None:
    io = LocalFileIO(str(root))
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    for call in (lambda: io.read_bytes("../outside.txt"), lambda: io.delete("../outside.txt"),
                 lambda: io.exists("a/../../outside.txt"), lambda: io.stat(str(outside)),
                 lambda: io.open_input("../outside.txt"), lambda: io.put_if_absent("../new.txt", b"x"),
                 lambda: io.write_new("../new.txt", b"x"), lambda: io.list_dir("..")):
        with pytest.raises(PathOutsideRoot, match="outside the storage root"):
            call()
    # a symbolic link inside the root that leads outside: deleting through it is refused too
    os.symlink(tmp_path, root / "link")
    with pytest.raises(PathOutsideRoot):
        io.delete("link/outside.txt")
    assert outside.read_text() == "x" and not (tmp_path / "new.txt").exists()


@pytest.mark.parametrize("root", ["/", "/srv/pubsub", "/srv/pubsub/"])
def test_storage_paths_are_the_normalised_join_on_the_fast_path_too(root: str) -> None:
    """Plain relative paths skip ``normpath`` (D108): every path form still resolves to exactly the
    normalised join, or is refused when that leaves the root."""
    parts = ["a", "..", ".", "", ".tmp", "x.", "..a", "a\\b", "part-0.parquet", "_delta_log", " "]
    paths = [f"{p}/{q}" for p in parts for q in parts] + [f"/{p}" for p in parts] + parts + ["a/b/", "a//b"]
    base = os.path.abspath(root)
    for path in paths:
        full = os.path.normpath(os.path.join(base, path))
        if full != base and not full.startswith(base.rstrip(os.sep) + os.sep):
            with pytest.raises(PathOutsideRoot):
                contained_path(base, path)
        else:
            assert contained_path(base, path) == full, path


def test_a_stray_file_at_the_top_of_a_root_is_no_tenant_and_breaks_no_listing(root: Path, client: Client,
                                                                               cli: Any) -> None:
    client.create_producer("t").send(b"x")
    (root / "consumer.npy").write_bytes(b"left here by a script")  # where a tenant folder would be
    (root / "public" / "notes.txt").write_text("a namespace's place")
    code, out, err = cli("tenants", "list")
    assert code == 0 and out.split() == ["public"], err
    code, out, err = cli("topics", "list", "public/default")
    assert code == 0 and "persistent://public/default/t" in out, err
