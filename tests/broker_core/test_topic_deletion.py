"""Deleting a topic under live producers (``Admin.delete_topic(force=True)``, DECISIONS.md D39).

What a Pulsar user expects: the producers are disconnected, their pending and further sends fail with
a typed error naming the topic (``TopicDeleted``, a ``TopicNotFound``), and nothing they do afterwards
writes anything under the deleted topic's path, so a topic re-created under the same name starts
clean.  The producer in another process runs ``deletion_worker.py`` (one line per event on stdout).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from log_helpers import TOPIC_DIR, open_topic, producer_table, read_all
from moto_s3 import Root

from broker_core import Admin, Client, InitialPosition, MessageId, Producer, Timeout, TopicNotFound
from broker_core.errors import TopicDeleted
from broker_core.log.state_store import VersionedState
from broker_core.producer.registry import ProducerAccessMode, ProducerRegistry
from broker_core.storage import FileIO, LocalFileIO, file_io_for
from broker_core.topic.topic_log import TopicLog

WORKER = Path(__file__).with_name("deletion_worker.py")
TOPIC = "persistent://public/default/orders"
TOPIC_PATH = "public/default/persistent/orders"
LEASE_MS = 600
"""Short producer leases: the producers renew every 200 ms, so renewals run while the tests watch."""


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "root"
    (path / "_pubsub").mkdir(parents=True)
    (path / "_pubsub" / "broker.toml").write_text(f"fsyncEnabled = false\nproducerLeaseMs = {LEASE_MS}\n")
    yield path


@pytest.fixture
def shared_root(any_root: Root) -> str:
    """``root`` on either backend (a folder, or S3 on moto): the URL, its broker.toml written through the FileIO."""
    io = file_io_for(any_root.url, storage_options=any_root.storage_options)
    io.put_if_absent("_pubsub/broker.toml", f"fsyncEnabled = false\nproducerLeaseMs = {LEASE_MS}\n".encode())
    return any_root.url


def tree(io: FileIO, path: str) -> list[str]:
    """Every file under ``path`` (relative to the root), on any backend."""
    out: list[str] = []
    for name in io.list_dir(path):
        child = f"{path}/{name}"
        below = tree(io, child)
        out.extend(below or [child])
    return sorted(out)


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


class Worker:
    """A ``deletion_worker.py`` subprocess; stderr goes to a file so it cannot block."""

    def __init__(self, **args: Any) -> None:
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed by close()
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps(args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
        )

    def line(self) -> str:
        assert self.proc.stdout is not None
        text = self.proc.stdout.readline()
        if not text:
            self.proc.wait(timeout=30)
            self.stderr.seek(0)
            raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.stderr.read()}")
        return text.rstrip("\n")

    def until(self, prefix: str) -> str:
        text = self.line()
        while not text.startswith(prefix):
            text = self.line()
        return text

    def say(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=30)
        self.stderr.close()


class Sender(threading.Thread):
    """Sends on a producer of this process until a send fails."""

    def __init__(self, producer: Producer) -> None:
        super().__init__(daemon=True)
        self.producer = producer
        self.acks = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while True:
                self.producer.send(f"local-{self.acks}".encode())
                self.acks += 1
        except BaseException as exc:  # the test inspects it
            self.error = exc


def read_values(client: Client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, MessageId.earliest)
    values = []
    while reader.has_message_available():
        values.append(reader.read_next(timeout_millis=5000).data())
    with pytest.raises(Timeout):
        reader.read_next(timeout_millis=50)
    reader.close()
    return values


def assert_clean_recreation(root: Path | str, client: Client, admin: Admin) -> None:
    """The topic comes back empty, takes new messages from offset 0, and holds no file of the old one."""
    admin.create_topic(TOPIC)
    fresh = client.create_producer(TOPIC)
    for i in range(3):
        fresh.send(f"new-{i}".encode())
    fresh.close()
    assert read_values(client, TOPIC) == [b"new-0", b"new-1", b"new-2"]
    io = file_io_for(str(root))
    log = TopicLog(io, TOPIC_PATH)
    snap = log.snapshot()
    assert (snap.first_offset, snap.next_offset, snap.version) == (0, 3, 3)
    segments = {f"{seg.path}" for seg in snap.segments}
    on_disk = {name for name in io.list_dir(TOPIC_PATH) if name.startswith("part-")}
    assert on_disk == segments


def test_force_delete_fences_producers_in_this_and_another_process(shared_root: str) -> None:
    root = shared_root
    io = file_io_for(root)
    client = Client(root)
    admin = Admin.open(root)
    admin.create_topic(TOPIC)
    worker = Worker(root=root, topic=TOPIC, mode="send")
    try:
        assert worker.line() == "ready"
        producer = client.create_producer(TOPIC, batching_enabled=False)
        sender = Sender(producer)
        sender.start()
        worker.until("ack 20")
        wait_until(lambda: sender.acks >= 20, "20 local acks")

        deleted = admin.delete_topic(TOPIC, force=True)  # both producers are sending right now
        assert deleted["internalTopics"] == [TOPIC]

        error = worker.until("error ")
        kind, is_not_found, message = error.split(" ", 3)[1:]
        assert (kind, is_not_found) == ("TopicDeleted", "True") and TOPIC in message, error
        assert worker.line() == "again TopicDeleted"
        assert worker.line() == "flush TopicDeleted"
        sender.join(timeout=30)
        assert isinstance(sender.error, TopicDeleted) and isinstance(sender.error, TopicNotFound)
        assert TOPIC in str(sender.error)
        with pytest.raises(TopicDeleted, match=TOPIC):
            producer.send(b"after the delete")
        with pytest.raises(TopicDeleted):
            producer.flush()
        assert not producer.is_connected()

        # Both producers' threads stay alive for several lease-renewal rounds (every LEASE_MS / 3):
        # this checks for an absence, so it has to watch for a while; it fails as soon as a file appears.
        deadline = time.monotonic() + 3 * LEASE_MS / 1000
        while time.monotonic() < deadline:
            assert tree(io, TOPIC_PATH) == []
            time.sleep(0.01)
        worker.say("close")
        assert worker.until("closed") == "closed"
        producer.close()
        assert tree(io, TOPIC_PATH) == []
        assert tree(io, "_pubsub/trash") == []
        assert admin.list_topics("public/default") == []

        assert_clean_recreation(root, client, admin)
    finally:
        worker.close()
        client.close()


def test_producers_idle_through_a_delete_and_a_re_creation_do_not_write_into_the_new_topic(root: Path) -> None:
    client = Client(str(root))
    admin = Admin.open(str(root))
    admin.create_topic(TOPIC)
    worker = Worker(root=str(root), topic=TOPIC, mode="idle", count=8)
    try:
        assert worker.line() == "ready"
        assert worker.line() == "sent 8"
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(8):
            producer.send(f"old-{i}".encode())

        admin.delete_topic(TOPIC, force=True)
        admin.create_topic(TOPIC)
        fresh = client.create_producer(TOPIC)
        fresh.send(b"new")

        with pytest.raises(TopicDeleted, match=TOPIC):
            producer.send(b"stale local")
        worker.say("go")
        error = worker.until("error ")
        assert error.split(" ")[1:3] == ["TopicDeleted", "True"], error
        assert worker.line() == "again TopicDeleted"
        worker.say("close")
        assert worker.until("closed") == "closed"
        producer.close()

        fresh.send(b"newer")  # the new topic's own producer is unaffected
        assert read_values(client, TOPIC) == [b"new", b"newer"]
        snap = TopicLog(LocalFileIO(str(root)), TOPIC_PATH).snapshot()
        assert {p.name for p in (root / TOPIC_PATH).glob("part-*")} == {s.path for s in snap.segments}
        assert set(ProducerRegistry(LocalFileIO(str(root)), TOPIC_PATH).live_producers(
            now_ms=int(time.time() * 1000))) == {fresh.producer_name()}
        fresh.close()
    finally:
        worker.close()
        client.close()


def test_a_partitioned_topic_is_fenced_on_every_partition_before_any_is_removed(root: Path) -> None:
    client = Client(str(root))
    admin = Admin.open(str(root))
    admin.create_partitioned_topic(TOPIC, 3)
    producer = client.create_producer(TOPIC, batching_enabled=False)
    for i in range(6):
        producer.send(f"m{i}".encode(), partition_key=f"k{i}")
    admin.delete_topic(TOPIC, force=True)
    with pytest.raises(TopicDeleted, match=TOPIC):
        producer.send(b"late", partition_key="k")
    producer.close()
    namespace = root / "public" / "default" / "persistent"
    assert [p for p in namespace.iterdir() if p.name.startswith("orders")] == []
    admin.create_partitioned_topic(TOPIC, 3)
    assert read_values(client, TOPIC) == []
    client.close()


# -- the log and the registry, driven directly --------------------------------------------------------


def test_no_commit_lands_after_the_tombstone(tmp_path: Path) -> None:
    writer = open_topic(tmp_path, fsync=False)
    writer.append(producer_table("p", [0, 1]), layout=[2])
    admin_side = open_topic(tmp_path, fsync=False, create=False)  # another process's handle
    version = admin_side.mark_deleted()
    with pytest.raises(TopicDeleted, match="persistent://public/default/t"):
        writer.append(producer_table("p", [2]), layout=[1])
    with pytest.raises(TopicDeleted):
        writer.bump_producer_epoch(to=5)
    log_dir = tmp_path / TOPIC_DIR / "_delta_log"
    assert sorted(p.name for p in log_dir.glob("*.json"))[-1] == f"{version:020d}.json"
    assert len(list((tmp_path / TOPIC_DIR).glob("part-*"))) == 1  # the refused segment was removed


def test_a_writer_that_loses_its_version_to_the_tombstone_is_refused(tmp_path: Path) -> None:
    writer = open_topic(tmp_path, fsync=False)
    writer.append(producer_table("p", [0]), layout=[1])
    io = writer.io
    put = io.put_if_absent

    def tombstone_first(path: str, data: bytes, **kwargs: Any) -> bool:
        if path.endswith(f"{2:020d}.json") and not tombstoned:
            tombstoned.append(open_topic(tmp_path, fsync=False, create=False).mark_deleted())
        return put(path, data, **kwargs)

    tombstoned: list[int] = []
    io.put_if_absent = tombstone_first  # type: ignore[method-assign]
    with pytest.raises(TopicDeleted):
        writer.append(producer_table("p", [1]), layout=[1])
    assert tombstoned == [2]
    assert not (tmp_path / TOPIC_DIR / "_delta_log" / f"{3:020d}.json").exists()
    assert len(list((tmp_path / TOPIC_DIR).glob("part-*"))) == 1


def test_writes_of_a_removed_topic_do_not_re_create_its_directory(tmp_path: Path) -> None:
    io = LocalFileIO(str(tmp_path), fsync=False)
    topic = open_topic(tmp_path, fsync=False)
    topic.append(producer_table("p", [0]), layout=[1])
    registry = ProducerRegistry(io, TOPIC_DIR)
    registry.register("p", ProducerAccessMode.Shared, now_ms=1, lease_ms=10**12)
    shutil.move(str(tmp_path / TOPIC_DIR), str(tmp_path / "elsewhere"))  # what the deletion's rename does

    with pytest.raises(TopicDeleted):
        topic.append(producer_table("p", [1]), layout=[1])
    with pytest.raises(TopicDeleted):
        registry.renew("p", now_ms=2, lease_ms=10**12)
    with pytest.raises(TopicDeleted):
        registry.register("q", ProducerAccessMode.Shared, now_ms=2, lease_ms=10**12)
    assert not (tmp_path / TOPIC_DIR).exists()


def test_a_handle_that_slept_through_a_delete_and_a_re_creation_does_not_build_on_the_new_topic(
    tmp_path: Path,
) -> None:
    """The new topic reuses version numbers: the old handle must notice before it commits anything."""
    old = open_topic(tmp_path, fsync=False)
    for seq in range(3):
        old.append(producer_table("p", [seq]), layout=[1])
    old_id = old.live_snapshot().metadata.id
    shutil.rmtree(tmp_path / TOPIC_DIR)
    new = open_topic(tmp_path, fsync=False)
    for seq in range(5):  # past the old handle's version
        new.append(producer_table("n", [seq]), layout=[1])

    with pytest.raises(TopicDeleted):
        old.append(producer_table("p", [3]), layout=[1], topic_id=old_id)
    values, _ = read_all(new)
    assert values.column("value").to_pylist() == [f"n:{i}".encode() for i in range(5)]
    assert len(list((tmp_path / TOPIC_DIR).glob("part-*"))) == 5

    # a writer that pins nothing (a bulk append) writes to the topic now at that path, consistently
    old.append(producer_table("b", [0]), layout=[1])
    values, offsets = read_all(new)
    assert values.column("value").to_pylist()[-1] == b"b:0" and offsets.tolist() == list(range(6))


def test_a_state_handle_that_slept_through_a_re_creation_builds_on_the_new_document(tmp_path: Path) -> None:
    io = LocalFileIO(str(tmp_path), fsync=False)
    stale = VersionedState(io, "t/_producers")
    for i in range(3):
        stale.update(lambda doc, i=i: {"n": i})
    shutil.rmtree(tmp_path / "t")
    fresh = VersionedState(io, "t/_producers")
    for i in range(3):
        fresh.update(lambda doc, i=i: {"n": 100 + i})
    seen: list[Any] = []
    stale.update(lambda doc: seen.append(doc) or {"n": -1})
    assert seen[-1] == {"n": 102}


def test_a_reader_and_a_consumer_of_a_deleted_topic_stop_with_a_typed_error_once(root: Path) -> None:
    """Not polling (and failing) forever: the next read raises TopicDeleted, later calls AlreadyClosed,
    and nothing re-creates the topic."""
    from broker_core import AlreadyClosed

    client = Client(str(root))
    try:
        producer = client.create_producer("orders")
        for i in range(3):
            producer.send(f"m{i}".encode())
        reader = client.create_reader("orders", MessageId.earliest)
        consumer = client.subscribe("orders", "sub", initial_position=InitialPosition.Earliest)
        assert reader.read_next(timeout_millis=5000).data() == b"m0"
        assert consumer.receive(timeout_millis=5000).data() == b"m0"
        producer.close()
        Admin.open(str(root)).delete_topic("orders", force=True)
        for handle, call in ((reader, lambda: [reader.read_next(timeout_millis=10) for _ in range(10**6)]),
                             (consumer, lambda: [consumer.receive(timeout_millis=10) for _ in range(10**6)])):
            with pytest.raises(TopicDeleted, match="orders was deleted") as info:
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:  # buffered messages first, then the stop
                    try:
                        call()
                    except Timeout:
                        continue
            assert isinstance(info.value, TopicNotFound)
            with pytest.raises(AlreadyClosed):
                call()
            assert not handle.is_connected()
        assert not (root / TOPIC_PATH).exists()
    finally:
        client.close()
