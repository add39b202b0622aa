"""``ObjectStoreFileIO``: the ``FileIO`` seam over an object store (S3, GCS, Azure, memory) via obstore.

What the local primitives become (``docs/PROTOCOL.md`` section "Object stores"):

- ``put_if_absent`` is a conditional put (``If-None-Match: *``, obstore ``mode="create"``).  A
  refusal (S3's 412) is a lost race *if the object is there*; S3 may also refuse with 409 while a
  conflicting write is in flight, which may yet fail, so a refusal with no object behind it (or a
  409) is retried with a short backoff.  A store that silently ignores the condition would let two
  writers commit one version: the first write of a process probes it and refuses the root with
  ``UnsafeStore`` unless the user opted into single-writer use.
- No hard links, fsync or directory renames: a PUT is atomic and durable when it returns.
- Directories do not exist: ``list_dir`` is a delimited listing, and deleting a directory
  (``delete_tree``) writes a *tombstone* ``_pubsub/deleted/<path>`` first, then deletes every key
  under the prefix.  A write anchored at a deleted directory checks the tombstone *after* its PUT
  and removes what it wrote (``DirectoryGone``): a PUT that landed before the deleter's listing is
  deleted by the deleter, one that landed after it sees the tombstone, so nothing survives under a
  deleted topic.  An unanchored write (creating a topic anew) clears the tombstones above it first.
- ``stat``'s mtime is the store's ``Last-Modified``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

import obstore
import pyarrow as pa
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    GenericError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)

from broker_core.errors import (
    BrokerPersistenceError,
    DirectoryGone,
    InvalidConfiguration,
    StorageAccessDenied,
    StorageUnavailable,
    UnsafeStore,
)
from broker_core.storage.protocol import FileStatus, check_key
from broker_core.storage.urls import has_aws_credentials, scrub

TOMBSTONE_DIR = "_pubsub/deleted"
PROBE_DIR = "_pubsub/probes"
ROOT_MARKER = "_pubsub/root.json"
REQUEST_TYPES = ("GET", "HEAD", "PUT", "LIST", "DELETE")
_CONFLICT_RETRIES = 8
# what obstore's error says when it fell back to the instance-metadata service for credentials
_METADATA_HINTS = ("169.254.169.254", "/latest/api/token", "/latest/meta-data", "fd00:ec2::254")


class ConflictInFlight(Exception):
    """A conditional put answered 409: a conflicting write is in flight; try again."""


class StoreOps:
    """The six raw requests the FileIO makes, counted per type.

    Tests and benchmarks wrap this (not the obstore store, a Rust object) to inject 412/409
    answers, a store that ignores the put condition, or per-request latency.
    """

    def __init__(self, store: Any) -> None:
        self.store = store
        self.counts: dict[str, int] = dict.fromkeys(REQUEST_TYPES, 0)
        self._lock = threading.Lock()

    def count(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self.counts[kind] += n

    def get(self, key: str) -> bytes | None:
        self.count("GET")
        try:
            return bytes(obstore.get(self.store, key).bytes())
        except FileNotFoundError:
            return None

    def head(self, key: str) -> dict[str, Any] | None:
        self.count("HEAD")
        try:
            return dict(obstore.head(self.store, key))
        except FileNotFoundError:
            return None

    def put(self, key: str, data: bytes | memoryview | pa.Buffer, *, create: bool) -> None:
        """Raise ``AlreadyExistsError``/``PreconditionError`` when ``create`` and the key exists."""
        self.count("PUT")
        payload = data if isinstance(data, bytes) else memoryview(data).tobytes()
        try:
            obstore.put(self.store, key, payload, mode="create" if create else "overwrite")
        except GenericError as exc:
            if create and ("409" in str(exc) or "ConditionalRequestConflict" in str(exc)):
                raise ConflictInFlight(str(exc)) from exc
            raise

    def list_delimited(self, prefix: str) -> tuple[list[str], list[str]]:
        """(common prefixes, object keys) directly under ``prefix`` (which ends with ``/`` or is empty)."""
        self.count("LIST")
        result = obstore.list_with_delimiter(self.store, prefix or None)
        return list(result["common_prefixes"]), [meta["path"] for meta in result["objects"]]

    def list_all(self, prefix: str) -> list[str]:
        keys: list[str] = []
        for chunk in obstore.list(self.store, prefix):
            self.count("LIST")
            keys.extend(meta["path"] for meta in chunk)
        return keys

    def delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):
            self.count("DELETE")
            obstore.delete(self.store, keys[start:start + 1000])


class ObjectStoreFileIO:
    """``FileIO`` over an object store.

    Args:
        ops: the store's requests (``StoreOps`` over an obstore store, possibly wrapped).
        root_uri: the root's URL without secrets (``s3://bucket/prefix``).
        storage_options: the options it was opened with, kept only to scrub their secrets out of errors.
        single_writer: accept a store that ignores conditional puts (one writing process only).
    """

    def __init__(self, ops: StoreOps, root_uri: str, *, storage_options: Mapping[str, str] | None = None,
                 single_writer: bool = False) -> None:
        self.ops = ops
        self._root_uri = root_uri
        self._options = dict(storage_options or {})
        self._single_writer = single_writer
        self._checked = threading.Event()
        self._check_lock = threading.Lock()
        self._present = False

    def __repr__(self) -> str:
        return f"ObjectStoreFileIO({self._root_uri!r})"

    @property
    def root_uri(self) -> str:
        return self._root_uri

    @property
    def is_local(self) -> bool:
        return False

    def root_status(self) -> str:
        """``"directory"`` if anything is stored under the prefix (the root marker, ``_pubsub/`` files or
        topics: a root written before the marker existed has those), else ``"missing"``: a prefix has no
        existence of its own, so an empty one is a typo or a root never created (one LIST, then
        remembered; a missing bucket is ``StorageUnavailable`` naming it)."""
        if not self._present:  # memory:// lives and dies with its process: nothing to mistype into
            self._present = bool(self.list_dir("")) or self._root_uri.startswith("memory://")
        return "directory" if self._present else "missing"

    def make_root(self) -> None:
        """Write the root marker ``_pubsub/root.json`` (buckets are created by their owner, never by this
        library): from then on the prefix is a root, even before a topic is written."""
        body = json.dumps({"createdAtMs": int(time.time() * 1000)}).encode() + b"\n"
        self.put_if_absent(ROOT_MARKER, body)
        self._present = True

    @property
    def request_counts(self) -> dict[str, int]:
        """Requests made so far, per type (GET, HEAD, PUT, LIST, DELETE)."""
        return dict(self.ops.counts)

    def abs_path(self, path: str) -> str:
        key = self._key(path)
        return f"{self._root_uri}/{key}" if key else self._root_uri

    # -- reads -------------------------------------------------------------------------------------

    def read_bytes(self, path: str) -> bytes | None:
        key = self._key(path)
        return self._call("read", path, lambda: self.ops.get(key))

    def exists(self, path: str) -> bool:
        key = self._key(path)
        return self._call("stat", path, lambda: self.ops.head(key)) is not None

    def stat(self, path: str) -> FileStatus | None:
        key = self._key(path)
        meta = self._call("stat", path, lambda: self.ops.head(key))
        if meta is None:
            return None
        mtime_ms = int(meta["last_modified"].timestamp() * 1000)
        return FileStatus(path=path, size_bytes=int(meta["size"]), mtime_ms=mtime_ms)

    def list_dir(self, path: str) -> list[str]:
        key = self._key(path)
        prefix = f"{key}/" if key else ""
        dirs, files = self._call("list", path, lambda: self.ops.list_delimited(prefix))
        names = {d[len(prefix):].rstrip("/") for d in dirs} | {f[len(prefix):] for f in files}
        return sorted(name for name in names if name)

    def open_input(self, path: str) -> pa.NativeFile:
        data = self.read_bytes(path)
        if data is None:
            raise BrokerPersistenceError(
                f"segment file {path!r} is missing under {self._root_uri}; it was deleted outside the library",
                path=path,
            )
        return pa.BufferReader(pa.py_buffer(data))

    # -- writes ------------------------------------------------------------------------------------

    def put_if_absent(self, path: str, data: bytes, *, anchor: str | None = None) -> bool:
        key = self._key(path)
        self._before_write(key, anchor)
        delay_s = 0.01
        for _attempt in range(_CONFLICT_RETRIES):
            try:
                self._call("commit", path, lambda: self.ops.put(key, data, create=True))
            except (AlreadyExistsError, PreconditionError):
                if self._call("stat", path, lambda: self.ops.head(key)) is not None:
                    return False  # a lost race: the object is there (S3's 412)
            except ConflictInFlight:
                pass  # S3's 409: a conflicting write in flight, which may yet fail
            else:
                self._after_write(key, path, anchor)
                return True
            time.sleep(delay_s)
            delay_s = min(delay_s * 2, 0.5)
        raise BrokerPersistenceError(
            f"conditional put of {path!r} under {self._root_uri} kept conflicting ({_CONFLICT_RETRIES} attempts); "
            "another writer holds it in flight, retry later",
            path=path,
        )

    def write_new(self, path: str, data: bytes | memoryview | pa.Buffer, *, anchor: str | None = None,
                  checked_by_commit: bool = False) -> None:
        """A conditional PUT; the anchor's tombstone is checked after it, unless ``checked_by_commit``
        leaves that to the anchored commit that will name the file (its check comes later, so it
        covers this PUT too; ``docs/PROTOCOL.md`` section 1b)."""
        key = self._key(path)
        self._before_write(key, anchor)
        try:
            self._call("write", path, lambda: self.ops.put(key, data, create=True))
        except (AlreadyExistsError, PreconditionError, ConflictInFlight) as exc:
            raise BrokerPersistenceError(
                f"refusing to overwrite existing file {path!r}; segment names must be unique", path=path
            ) from exc
        if not checked_by_commit:
            self._after_write(key, path, anchor)

    def replace(self, path: str, data: bytes, *, anchor: str | None = None) -> None:
        key = self._key(path)
        self._before_write(key, anchor)
        self._call("replace", path, lambda: self.ops.put(key, data, create=False))
        self._after_write(key, path, anchor)

    def delete(self, path: str) -> bool:
        key = self._key(path)
        if self._call("stat", path, lambda: self.ops.head(key)) is None:
            return False
        self._call("delete", path, lambda: self.ops.delete([key]))
        return True

    def delete_tree(self, path: str) -> None:
        """Tombstone first, then every key under the prefix; idempotent, so a killed deletion is
        finished by the next one.  The tombstone stays until the directory is created anew."""
        key = self._key(path)
        if not key:
            raise BrokerPersistenceError(f"refusing to delete the whole root {self._root_uri}", path=path)
        self._call("delete", path, lambda: self.ops.put(f"{TOMBSTONE_DIR}/{key}", b"", create=False))
        keys = self._call("list", path, lambda: self.ops.list_all(f"{key}/"))
        if keys:
            self._call("delete", path, lambda: self.ops.delete(sorted(keys)))

    # -- helpers -----------------------------------------------------------------------------------

    def _key(self, path: str) -> str:
        return check_key(path, self._root_uri)

    def _before_write(self, key: str, anchor: str | None) -> None:
        self._check_conditional_put()
        if anchor is None and not key.startswith(("_pubsub/", TOMBSTONE_DIR)):
            parts = key.split("/")[:-1]
            tombstones = [f"{TOMBSTONE_DIR}/{'/'.join(parts[:i])}" for i in range(1, len(parts) + 1)]
            if tombstones:  # a directory deleted earlier is being created anew
                self._call("write", key, lambda: self.ops.delete(tombstones))

    def _after_write(self, key: str, path: str, anchor: str | None) -> None:
        if anchor is None:
            return
        anchor_key = self._key(anchor)
        if self._call("stat", path, lambda: self.ops.head(f"{TOMBSTONE_DIR}/{anchor_key}")) is None:
            return
        self._call("delete", path, lambda: self.ops.delete([key]))
        raise DirectoryGone(
            f"cannot write {path!r}: the directory {anchor!r} under {self._root_uri} was deleted (its topic was "
            "deleted); what was written has been removed",
            path=path,
        )

    def _check_conditional_put(self) -> None:
        """Probe once per process that the store refuses a second create of one key."""
        if self._checked.is_set():
            return
        with self._check_lock:
            if self._checked.is_set():
                return
            probe = f"{PROBE_DIR}/{uuid.uuid4().hex}"
            self._call("write", probe, lambda: self.ops.put(probe, b"1", create=True))
            honoured = False
            try:
                self._call("write", probe, lambda: self.ops.put(probe, b"2", create=True))
            except (AlreadyExistsError, PreconditionError, ConflictInFlight):
                honoured = True
            finally:
                self._call("delete", probe, lambda: self.ops.delete([probe]))
            if not honoured and not self._single_writer:
                raise UnsafeStore(
                    f"the store behind {self._root_uri} ignores conditional puts (If-None-Match), so two writers "
                    "could commit the same version; use a store that supports them, or, if exactly one process "
                    "ever writes this root, set the storage option pubsub_single_writer=true",
                    root=self._root_uri,
                )
            self._checked.set()

    def _call(self, what: str, path: str, fn: Any) -> Any:
        """Run one request, translating obstore's errors into typed ones that name the root, not a secret
        (the original is not chained: its text may repeat request details)."""
        try:
            return fn()
        except (AlreadyExistsError, PreconditionError, ConflictInFlight):
            raise  # the callers' business: a lost race or a conflict in flight
        except BaseError as exc:
            raise self._translate(what, path, exc) from None
        except FileNotFoundError:  # a write or listing into a bucket that does not exist
            raise StorageUnavailable(
                f"storage {what} of {path!r} failed: the bucket or container of {self._root_uri} does not exist; "
                "create it or fix the URL",
                root=self._root_uri,
                path=path,
            ) from None
        except BaseException as exc:  # obstore panics (pyo3 PanicException, not an Exception) on bad config
            if type(exc).__name__ != "PanicException":
                raise
            raise InvalidConfiguration(
                f"storage {what} of {path!r} under {self._root_uri} failed inside the object-store client "
                f"({scrub(str(exc).splitlines()[0] if str(exc) else '', self._options)[:300]}); check the "
                f"storage options (given: {sorted(self._options)})",
                root=self._root_uri,
                path=path,
            ) from None

    def _translate(self, what: str, path: str, exc: BaseException) -> BrokerPersistenceError:
        detail = scrub(str(exc).split("\n")[0], self._options)[:400]
        if self._root_uri.startswith(("s3://", "s3a://")) and not has_aws_credentials(self._options) and (
                isinstance(exc, PermissionDeniedError | UnauthenticatedError) or " 403 " in detail
                or " 401 " in detail or any(hint in detail for hint in _METADATA_HINTS)):
            return StorageAccessDenied(
                f"storage {what} of {path!r} under {self._root_uri} failed: no credentials are configured, so the "
                "store asked the instance-metadata service for some, which gave none; set the storage options "
                "aws_access_key_id and aws_secret_access_key (Spark: .option('storage.aws_access_key_id', ...), "
                "CLI: --storage-option aws_access_key_id=...) or the environment variables AWS_ACCESS_KEY_ID and "
                f"AWS_SECRET_ACCESS_KEY, or run where an instance role provides them ({detail})",
                root=self._root_uri,
                path=path,
            )
        if isinstance(exc, PermissionDeniedError | UnauthenticatedError) or " 403 " in detail:
            return StorageAccessDenied(
                f"storage {what} of {path!r} under {self._root_uri} was denied: the credentials are wrong or lack "
                f"permission ({detail})",
                root=self._root_uri,
                path=path,
            )
        if "NoSuchBucket" in str(exc) or "NoSuchContainer" in str(exc) or "ContainerNotFound" in str(exc):
            return StorageUnavailable(
                f"storage {what} of {path!r} failed: the bucket or container of {self._root_uri} does not exist; "
                "create it or fix the URL",
                root=self._root_uri,
                path=path,
            )
        if "error sending request" in detail or "connect" in detail.lower() or "timed out" in detail:
            return StorageUnavailable(
                f"storage {what} of {path!r} failed: the endpoint of {self._root_uri} is unreachable; check "
                f"aws_endpoint / the network ({detail})",
                root=self._root_uri,
                path=path,
            )
        return BrokerPersistenceError(
            f"storage {what} of {path!r} under {self._root_uri} failed: {detail}", root=self._root_uri, path=path
        )


__all__ = [
    "PROBE_DIR", "REQUEST_TYPES", "ROOT_MARKER", "TOMBSTONE_DIR", "ConflictInFlight", "ObjectStoreFileIO", "StoreOps",
]
