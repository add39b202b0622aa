"""ObjectStoreFileIO on an in-process memory store: the conditional-put commit primitive (with 412,
409 and a condition-ignoring store injected), delimited listing, tombstoned deletion, root confinement."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from obstore.exceptions import AlreadyExistsError, PreconditionError

from broker_core.errors import BrokerPersistenceError, DirectoryGone, UnsafeStore
from broker_core.storage import ObjectStoreFileIO, StoreOps, file_io_for, open_object_store, parse_root
from broker_core.storage.object_store import TOMBSTONE_DIR, ConflictInFlight


def _memory_url() -> str:
    return f"memory://t{uuid.uuid4().hex[:12]}/root"


@pytest.fixture
def io() -> ObjectStoreFileIO:
    return open_object_store(parse_root(_memory_url()))


class _Wrapper(StoreOps):
    """Delegates every request to ``inner``; subclasses override one to inject a fault."""

    def __init__(self, inner: StoreOps) -> None:
        self.inner = inner
        self.counts = inner.counts

    def get(self, key: str) -> bytes | None:
        return self.inner.get(key)

    def head(self, key: str) -> dict[str, Any] | None:
        return self.inner.head(key)

    def put(self, key: str, data: Any, *, create: bool) -> None:
        self.inner.put(key, data, create=create)

    def list_delimited(self, prefix: str) -> tuple[list[str], list[str]]:
        return self.inner.list_delimited(prefix)

    def list_all(self, prefix: str) -> list[str]:
        return self.inner.list_all(prefix)

    def delete(self, keys: list[str]) -> None:
        self.inner.delete(keys)


class _IgnoresCondition(_Wrapper):
    """A store that overwrites where it should refuse (If-None-Match ignored)."""

    def put(self, key: str, data: Any, *, create: bool) -> None:
        self.inner.put(key, data, create=False)


class _Answers(_Wrapper):
    """Answers the first conditional puts of log keys with the given errors, then behaves."""

    def __init__(self, inner: StoreOps, errors: list[BaseException]) -> None:
        super().__init__(inner)
        self.errors = errors
        self.attempts = 0

    def put(self, key: str, data: Any, *, create: bool) -> None:
        if create and key.endswith(".json"):
            self.attempts += 1
            if self.errors:
                raise self.errors.pop(0)
        self.inner.put(key, data, create=create)


def test_put_if_absent_creates_once_and_keeps_the_first_content(io: ObjectStoreFileIO) -> None:
    assert io.put_if_absent("t/_delta_log/00000000000000000000.json", b"first") is True
    assert io.put_if_absent("t/_delta_log/00000000000000000000.json", b"second") is False
    assert io.read_bytes("t/_delta_log/00000000000000000000.json") == b"first"
    assert io.read_bytes("t/missing") is None
    status = io.stat("t/_delta_log/00000000000000000000.json")
    assert status is not None and status.size_bytes == 5 and status.mtime_ms > 1_600_000_000_000


def test_listing_uses_the_delimiter_and_names_files_and_directories(io: ObjectStoreFileIO) -> None:
    io.write_new("a/seg-1.parquet", b"x")
    io.write_new("a/b/c/d", b"y")
    io.replace("a/hint", b"1")
    io.replace("a/hint", b"2")
    assert io.list_dir("a") == ["b", "hint", "seg-1.parquet"]
    assert io.list_dir("a/b") == ["c"]
    assert io.list_dir("nothing") == []
    assert io.read_bytes("a/hint") == b"2"
    with pytest.raises(BrokerPersistenceError, match="refusing to overwrite"):
        io.write_new("a/seg-1.parquet", b"z")
    assert io.delete("a/hint") is True and io.delete("a/hint") is False


@pytest.mark.parametrize("path", ["../outside", "a/../../outside", "/abs", "a\\b"])
def test_keys_outside_the_root_are_refused(io: ObjectStoreFileIO, path: str) -> None:
    with pytest.raises(BrokerPersistenceError, match="refusing path"):
        io.put_if_absent(path, b"x")
    with pytest.raises(BrokerPersistenceError, match="refusing path"):
        io.read_bytes(path)


def test_a_lost_race_412_is_false_and_a_refusal_with_nothing_behind_it_is_retried(io: ObjectStoreFileIO) -> None:
    spec = parse_root(_memory_url())
    wrapped: list[_Answers] = []

    def wrap(ops: StoreOps) -> StoreOps:
        wrapped.append(_Answers(ops, []))
        return wrapped[0]

    racy = open_object_store(spec, wrap=wrap)
    answers = wrapped[0]
    assert racy.put_if_absent("t/_delta_log/0.json", b"mine") is True
    # 412 with the object there: a lost race, no retry
    answers.errors = [AlreadyExistsError("412 Precondition Failed")]
    answers.attempts = 0
    assert racy.put_if_absent("t/_delta_log/0.json", b"other") is False
    assert answers.attempts == 1
    # a refusal with no object behind it (the conflicting write failed): retried, then won
    answers.errors = [PreconditionError("412"), AlreadyExistsError("412")]
    answers.attempts = 0
    assert racy.put_if_absent("t/_delta_log/1.json", b"v1") is True
    assert answers.attempts == 3
    assert racy.read_bytes("t/_delta_log/1.json") == b"v1"


def test_a_409_conflict_in_flight_is_retried_until_it_clears_or_gives_up() -> None:
    wrapped: list[_Answers] = []

    def wrap(ops: StoreOps) -> StoreOps:
        wrapped.append(_Answers(ops, [ConflictInFlight("409 Conflict")] * 3))
        return wrapped[0]

    io = open_object_store(parse_root(_memory_url()), wrap=wrap)
    assert io.put_if_absent("t/_delta_log/0.json", b"v0") is True
    assert wrapped[0].attempts == 4
    wrapped[0].errors = [ConflictInFlight("409 Conflict")] * 50
    with pytest.raises(BrokerPersistenceError, match="kept conflicting"):
        io.put_if_absent("t/_delta_log/1.json", b"v1")
    assert io.read_bytes("t/_delta_log/1.json") is None


def test_a_store_ignoring_the_put_condition_is_refused_unless_single_writer_is_chosen() -> None:
    url = _memory_url()
    io = open_object_store(parse_root(url), wrap=_IgnoresCondition)
    with pytest.raises(UnsafeStore, match="pubsub_single_writer") as info:
        io.put_if_absent("t/_delta_log/0.json", b"v0")
    assert url in str(info.value)
    assert io.list_dir("t") == []  # nothing written
    single = open_object_store(parse_root(url, {"pubsub_single_writer": "true"}), wrap=_IgnoresCondition)
    assert single.put_if_absent("t/_delta_log/0.json", b"v0") is True


def test_deleting_a_tree_tombstones_it_and_anchored_writes_cannot_recreate_it(io: ObjectStoreFileIO) -> None:
    io.put_if_absent("ns/topic/_delta_log/0.json", b"v0")
    io.write_new("ns/topic/seg.parquet", b"s", anchor="ns/topic")
    io.delete_tree("ns/topic")
    assert io.list_dir("ns") == []
    assert io.exists(f"{TOMBSTONE_DIR}/ns/topic")
    for write in (
        lambda: io.put_if_absent("ns/topic/_delta_log/1.json", b"v1", anchor="ns/topic"),
        lambda: io.write_new("ns/topic/seg2.parquet", b"s", anchor="ns/topic"),
        lambda: io.replace("ns/topic/_delta_log/_last_checkpoint", b"{}", anchor="ns/topic"),
    ):
        with pytest.raises(DirectoryGone, match="ns/topic"):
            write()
    assert io.list_dir("ns") == []  # the anchored writes removed what they put
    io.delete_tree("ns/topic")  # idempotent
    # creating the topic anew (an unanchored write) clears the tombstone; anchored writes work again
    assert io.put_if_absent("ns/topic/_delta_log/0.json", b"new") is True
    assert not io.exists(f"{TOMBSTONE_DIR}/ns/topic")
    io.write_new("ns/topic/seg3.parquet", b"s", anchor="ns/topic")
    assert io.list_dir("ns/topic") == ["_delta_log", "seg3.parquet"]


def test_memory_roots_are_shared_in_process_and_separate_by_name() -> None:
    url = _memory_url()
    assert file_io_for(url) is file_io_for(url)
    file_io_for(url).put_if_absent("x", b"1")
    assert file_io_for(url + "2").read_bytes("x") is None
    assert open_object_store(parse_root(url)).read_bytes("x") == b"1"


def test_requests_are_counted_per_type(io: ObjectStoreFileIO) -> None:
    before = io.request_counts
    io.put_if_absent("a/b.json", b"1")
    io.read_bytes("a/b.json")
    io.list_dir("a")
    after = io.request_counts
    assert after["GET"] - before["GET"] == 1
    assert after["LIST"] - before["LIST"] == 1
    assert after["PUT"] - before["PUT"] >= 1


@pytest.mark.parametrize(("profile", "put_ms", "get_ms"), [("standard", 80, 30), ("express", 10, 10)])
def test_simulated_latency_profiles_delay_each_request_by_type(profile: str, put_ms: int, get_ms: int) -> None:
    import time

    io = open_object_store(parse_root(_memory_url(), {"pubsub_simulated_latency": profile}))
    io._checked.set()  # time single requests, not the first write's conditional-put probe
    t0 = time.perf_counter()
    io.replace("a", b"1")
    t1 = time.perf_counter()
    io.read_bytes("a")
    t2 = time.perf_counter()
    assert put_ms / 1000 <= t1 - t0 < put_ms / 1000 + 0.5
    assert get_ms / 1000 <= t2 - t1 < get_ms / 1000 + 0.5
    with pytest.raises(Exception, match="not a profile"):
        open_object_store(parse_root(_memory_url(), {"pubsub_simulated_latency": "glacier"}))
