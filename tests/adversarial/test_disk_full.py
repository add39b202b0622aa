"""The root runs out of space mid-way: sends, acknowledgments and jobs fail typed, lose nothing
acknowledged, leave nothing half-written in sight, and work again once space is freed.

What is simulated (``FullDisk``):

- local root: the root lives on a real 4 MiB ``tmpfs`` mounted for the test (the tests run as root);
  ``fill`` writes a filler file until the kernel answers ENOSPC and then frees ``slack_bytes`` of
  it, so a large write fails part-way through, as on a real full disk.  Where mounting is not
  permitted, ``LocalFileIO._write_all`` is patched instead to write half of its bytes and then
  raise ``OSError(ENOSPC)`` (the same partial file, by injection).
- S3 root (the moto server): every PUT raises the error obstore raises for a ``507 Insufficient
  Storage`` answer (a ``GenericError``), injected at ``StoreOps.put``, the storage seam the
  object-store tests wrap; a PUT is atomic, so nothing partial exists there.

``free`` removes the filler (or the injection).  Every assertion reads the root back afresh.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moto_s3 import Root
from obstore.exceptions import GenericError

from broker_core import Client, ConsumerType, InitialPosition, MessageId
from broker_core.broker.broker import Broker
from broker_core.cli import main as cli_main
from broker_core.config import BrokerConfig
from broker_core.errors import BrokerPersistenceError, PulsarException, Timeout
from broker_core.errors.result import Result
from broker_core.jobs import checkpoint, merge_segments
from broker_core.producer.registry import ProducerRegistry
from broker_core.storage import file_io_for
from broker_core.storage.local import LocalFileIO
from broker_core.storage.object_store import StoreOps

T = "persistent://public/default/full"
TOPIC_DIR = "public/default/persistent/full"
_TMPFS_BYTES = 4 * 1024 * 1024


class FullDisk:
    """A root whose storage can be made to run out of space (``fill``) and recover (``free``)."""

    def __init__(self, kind: str, url: str, storage_options: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                 mount: Path | None) -> None:
        self.kind, self.url, self.storage_options = kind, url, storage_options
        self._monkeypatch, self._mount = monkeypatch, mount
        self.full = False
        self.configure("")

    def configure(self, extra: str) -> None:
        """Write the root's ``broker.toml``: deduplication on (a resent sequence id is dropped), plus ``extra``."""
        io = file_io_for(self.url, storage_options=self.storage_options or None)
        io.replace("_pubsub/broker.toml", f"brokerDeduplicationEnabled = true\n{extra}".encode())

    def client(self) -> Client:
        return Client(self.url, storage_options=self.storage_options or None)

    def fill(self, slack_bytes: int = 0) -> None:
        self.full = True
        if self._mount is None:
            return  # the injection reads ``self.full``
        filler = self._mount / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            block = b"\0" * 65536
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, block)
            with contextlib.suppress(OSError):  # the kernel's answer: a page at a time, until ENOSPC
                while True:
                    os.write(fd, block[:4096])
            if slack_bytes:
                os.ftruncate(fd, max(0, os.fstat(fd).st_size - slack_bytes))
        finally:
            os.close(fd)

    def free(self) -> None:
        self.full = False
        if self._mount is not None:
            (self._mount / "filler").unlink(missing_ok=True)

    def segment_names(self) -> set[str]:
        """Every ``*.parquet`` key under the topic (referenced or not)."""
        if self.kind == "local":
            return {p.name for p in Path(self.url, TOPIC_DIR).glob("*.parquet")}
        broker = Broker.for_url(self.url, BrokerConfig(), storage_options=self.storage_options)
        return {name for name in broker.io.list_dir(TOPIC_DIR) if name.endswith(".parquet")}


def _mount_tmpfs(where: Path) -> bool:
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={_TMPFS_BYTES}", "tmpfs", str(where)],
                          capture_output=True, check=False)
    return done.returncode == 0


@pytest.fixture
def disk(any_root: Root, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FullDisk]:
    if any_root.is_s3:
        full_disk = FullDisk("s3", any_root.url, any_root.storage_options, monkeypatch, None)
        real_put = StoreOps.put

        def put(self: StoreOps, key: str, data: Any, *, create: bool) -> None:
            if full_disk.full:
                self.count("PUT")
                raise GenericError(f"Generic S3 error: Error performing PUT {key}: Server returned non-2xx status "
                                   "code: 507 Insufficient Storage: <Error><Code>InsufficientStorage</Code></Error>")
            real_put(self, key, data, create=create)

        monkeypatch.setattr(StoreOps, "put", put)
        yield full_disk
        return
    mount = tmp_path / "mnt"
    if _mount_tmpfs(mount):
        try:  # unmounted whatever happens, so a failed test leaves no mount behind
            (mount / "root").mkdir()
            yield FullDisk("local", str(mount / "root"), {}, monkeypatch, mount)
        finally:
            subprocess.run(["umount", "-l", str(mount)], check=False)
        return
    full_disk = FullDisk("local", str(any_root.url), {}, monkeypatch, None)  # no mount: inject ENOSPC
    real_write_all = LocalFileIO._write_all

    def write_all(self: LocalFileIO, fd: int, data: Any) -> None:
        if full_disk.full:
            view = memoryview(data).cast("B")
            os.write(fd, view[: len(view) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write_all(self, fd, data)

    monkeypatch.setattr(LocalFileIO, "_write_all", write_all)
    yield full_disk


def _read_all(client: Client) -> list[tuple[bytes, int]]:
    """(value, sequence id) of every message of the topic, from a fresh reader."""
    reader = client.create_reader(T, MessageId.earliest)
    out = []
    while reader.has_message_available():
        message = reader.read_next(10_000)
        out.append((message.data(), message.sequence_id()))
    reader.close()
    return out


def _check_ok(disk: FullDisk, capsys: pytest.CaptureFixture[str]) -> None:
    """``pubsub topics check`` finds the log whole."""
    capsys.readouterr()
    args = ["--root", disk.url]
    for key, value in disk.storage_options.items():
        args += ["--storage-option", f"{key}={value}"]
    code = cli_main([*args, "topics", "check", T])
    out = capsys.readouterr()
    assert code == 0, out.out + out.err


def _typed(exc: BaseException) -> BrokerPersistenceError:
    assert isinstance(exc, PulsarException), f"a raw {type(exc).__name__} escaped: {exc!r}"
    assert not isinstance(exc, Timeout), exc
    assert isinstance(exc, BrokerPersistenceError), repr(exc)
    return exc


@pytest.mark.parametrize("mode", ["sync", "async", "batched"])
def test_a_send_into_a_full_root_fails_typed_and_the_producer_resumes_without_duplicates(
        disk: FullDisk, mode: str, capsys: pytest.CaptureFixture[str]) -> None:
    client = disk.client()
    producer = client.create_producer(T, producer_name="p", batching_enabled=mode == "batched",
                                      batching_max_messages=1000, batching_max_publish_delay_ms=60_000)
    for i in range(5):
        producer.send(f"before-{i}".encode())
    segments_before = disk.segment_names()
    big = b"x" * (256 * 1024)  # larger than the slack: the segment write fails part-way through
    disk.fill(slack_bytes=64 * 1024)
    errors: list[BaseException] = []
    results: list[Any] = []
    if mode == "sync":
        with pytest.raises(Exception) as raised:
            producer.send(big)
        errors.append(raised.value)
    else:
        for _ in range(3):
            producer.send_async(big, lambda result, msg_id: results.append((result, msg_id)))
        producer.flush()  # as in Pulsar, each failed message reports to its callback
        # the typed error's code (an untyped OSError would be ``UnknownError``)
        assert results == [(Result.BrokerPersistenceError, None)] * 3, results
        with pytest.raises(Exception) as raised:  # the error itself, as a send (not batched) raises it
            producer.send(big)
        errors.append(raised.value)
    error = _typed(errors[0])
    # nothing half-written stays behind: the failed segment is neither committed nor left as a file
    assert disk.segment_names() == segments_before
    disk.free()
    producer.send(b"after-0")  # the same producer works again
    producer.send_async(b"after-1", None)
    producer.flush()
    producer.close()
    client.close()

    reopened = disk.client()
    seen = _read_all(reopened)
    values = [v for v, _ in seen]
    assert values == [f"before-{i}".encode() for i in range(5)] + [b"after-0", b"after-1"], (error, values)
    sequence_ids = [s for _, s in seen]
    assert sequence_ids == sorted(set(sequence_ids)), sequence_ids  # no duplicate, in order
    # a new producer of the same name continues the sequence (dedup keeps a resent id out)
    again = reopened.create_producer(T, producer_name="p")
    assert again.last_sequence_id() == sequence_ids[-1]
    again.send(b"resent", sequence_id=sequence_ids[-1])  # a duplicate: dropped
    again.send(b"next")
    again.close()
    assert [v for v, _ in _read_all(reopened)] == [*values, b"next"]
    reopened.close()
    _check_ok(disk, capsys)


def test_acknowledgments_on_a_full_root_are_kept_and_committed_once_space_is_freed(
        disk: FullDisk, capsys: pytest.CaptureFixture[str]) -> None:
    client = disk.client()
    producer = client.create_producer(T)
    for i in range(10):
        producer.send(f"m{i}".encode())
    producer.close()
    consumer = client.subscribe(T, "s", consumer_type=ConsumerType.Shared, initial_position=InitialPosition.Earliest)
    received = [consumer.receive(10_000) for _ in range(10)]
    for message in received[:3]:
        consumer.acknowledge(message)
    consumer.close()  # flushes: three acknowledgments committed
    consumer = client.subscribe(T, "s", consumer_type=ConsumerType.Shared)
    redelivered = [consumer.receive(10_000) for _ in range(7)]
    assert [m.data() for m in redelivered] == [f"m{i}".encode() for i in range(3, 10)]
    disk.fill()
    for message in redelivered[:4]:
        consumer.acknowledge(message)  # fire and forget, as in Pulsar: the commit fails in the background
    errors: Any = consumer._errors  # the ack thread keeps the typed error and the acknowledgments
    for _ in range(600):  # the commit is due ``ack_group_time`` (100 ms) after the first acknowledgment
        if errors:
            break
        with pytest.raises(Timeout):
            consumer.receive(50)
    assert errors, "the acknowledgments were committed into a full root"
    _typed(errors[0])
    disk.free()
    consumer.close()  # retried now: committed
    client.close()

    reopened = disk.client()
    again = reopened.subscribe(T, "s", consumer_type=ConsumerType.Shared)
    left = []
    with contextlib.suppress(Timeout):
        while True:
            left.append(again.receive(1_000).data())
    assert left == [f"m{i}".encode() for i in range(7, 10)]  # acked ones never again, the rest all there
    again.close()
    assert [v for v, _ in _read_all(reopened)] == [f"m{i}".encode() for i in range(10)]
    reopened.close()
    _check_ok(disk, capsys)


def test_checkpoint_and_merge_into_a_full_root_fail_typed_and_rerun_cleanly(
        disk: FullDisk, capsys: pytest.CaptureFixture[str]) -> None:
    client = disk.client()
    producer = client.create_producer(T, batching_enabled=False)
    for i in range(12):
        producer.send(f"m{i}".encode())
    producer.close()
    broker = Broker.for_url(disk.url, BrokerConfig(), storage_options=disk.storage_options)
    segments_before = disk.segment_names()
    disk.fill()
    with pytest.raises(Exception) as raised:
        checkpoint(broker, T)
    _typed(raised.value)
    with pytest.raises(Exception) as raised:
        merge_segments(broker, T, min_age_ms=0, min_segments=2, dry_run=False)
    _typed(raised.value)
    assert disk.segment_names() == segments_before  # no half-written merged segment stays behind
    assert [v for v, _ in _read_all(client)] == [f"m{i}".encode() for i in range(12)]
    disk.free()
    checkpoint(broker, T)
    merged = merge_segments(broker, T, min_age_ms=0, min_segments=2, dry_run=False)
    assert merged.changed, merged
    client.close()
    reopened = disk.client()
    assert [v for v, _ in _read_all(reopened)] == [f"m{i}".encode() for i in range(12)]
    reopened.close()
    _check_ok(disk, capsys)


def test_a_producer_whose_lease_renewal_meets_a_full_root_sends_again_once_space_is_freed(
        disk: FullDisk, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lease renewal that fails for lack of space does not fail the producer for good (it did: every
    later send raised the renewal's error, D171); losing the registration still would."""
    disk.configure("producerLeaseMs = 300\n")  # renewals every 100 ms
    failed: list[BaseException] = []
    real_renew = ProducerRegistry.renew

    def renew(self: ProducerRegistry, name: str, *, now_ms: int, lease_ms: int) -> None:
        try:
            real_renew(self, name, now_ms=now_ms, lease_ms=lease_ms)
        except BaseException as exc:
            failed.append(exc)
            raise

    monkeypatch.setattr(ProducerRegistry, "renew", renew)
    client = disk.client()
    producer = client.create_producer(T, producer_name="p")
    producer.send(b"before")
    disk.fill()
    pause = threading.Event()
    for _ in range(500):  # bounded: until a renewal has failed and its call has ended
        if failed and producer._last_renew_s != float("inf"):
            break
        pause.wait(0.02)
    assert failed, "no lease renewal was attempted while the root was full"
    _typed(failed[0])
    disk.free()
    producer.send(b"after")
    producer.close()
    assert [v for v, _ in _read_all(client)] == [b"before", b"after"]
    client.close()
