"""Storage: the ``FileIO`` seam (``protocol``) and its two sides, a folder (``local``) and an object
store (``object_store``), picked from a service URL and its ``storage_options`` (``urls``).

``file_io_for`` opens a root.  Object-store roots are cached per process and options (one client,
one connection pool and one conditional-put probe per root), and their access is checked on open
with one listing, so a missing bucket, wrong credentials or an unreachable endpoint fail at once
with a typed error that names the root.

May import: the base modules (``errors``, ``config``).  Nothing above them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from broker_core.errors import InvalidConfiguration, InvalidUrl
from broker_core.storage.local import LocalFileIO, contained_path
from broker_core.storage.object_store import ObjectStoreFileIO, StoreOps
from broker_core.storage.protocol import TRASH_DIR, FileIO, FileStatus, check_key
from broker_core.storage.urls import RootSpec, parse_root, redact, scrub, truthy

_LOCK = threading.Lock()
_OBJECT_STORES: dict[tuple[str, tuple[tuple[str, str], ...]], ObjectStoreFileIO] = {}
_MEMORY_STORES: dict[str, Any] = {}


def file_io_for(service_url: str, *, fsync: bool = True,
                storage_options: Mapping[str, Any] | None = None) -> LocalFileIO | ObjectStoreFileIO:
    """Return the ``FileIO`` for a service URL: a folder path, ``file://``, or an object-store URL.

    Raises:
        InvalidUrl: a URL no backend serves (named, with the schemes that are served).
        InvalidConfiguration: a malformed or unknown storage option (named; a secret's value never is).
        StorageUnavailable / StorageAccessDenied: an object-store root that cannot be listed.
    """
    spec = parse_root(service_url, storage_options)
    if spec.local_path is not None:
        return LocalFileIO(spec.local_path, fsync=fsync)
    key = (spec.url, tuple(sorted(spec.storage_options.items())))
    with _LOCK:
        cached = _OBJECT_STORES.get(key)
    if cached is not None:
        return cached
    io = open_object_store(spec)
    with _LOCK:
        return _OBJECT_STORES.setdefault(key, io)


def open_object_store(spec: RootSpec, *, wrap: Any = None) -> ObjectStoreFileIO:
    """Open (uncached) an object-store root and check that it can be listed.

    ``wrap`` (tests, benchmarks) wraps the ``StoreOps`` before use: fault or latency injection.
    """
    import obstore.store
    from obstore.exceptions import BaseError

    from broker_core.storage.urls import obstore_arguments

    arguments = obstore_arguments(spec)
    try:
        if spec.scheme == "memory":
            with _LOCK:
                store = _MEMORY_STORES.setdefault(spec.url, obstore.store.MemoryStore())
        else:
            store = obstore.store.from_url(spec.url, **arguments)
    except BaseError as exc:
        raise InvalidConfiguration(
            f"cannot configure the store for {spec.url}: {scrub(str(exc).splitlines()[0], spec.storage_options)}; "
            f"storage options given: {sorted(redact(spec.storage_options))}",
            root=spec.url,
        ) from None
    except ValueError as exc:
        raise InvalidUrl(f"cannot open {spec.url}: {scrub(str(exc), spec.storage_options)}", root=spec.url) from None
    except BaseException as exc:  # obstore panics (pyo3 PanicException) on some malformed configs
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        raise InvalidConfiguration(
            f"cannot configure the store for {spec.url}: {scrub(str(exc).splitlines()[0], spec.storage_options)}; "
            f"storage options given: {sorted(redact(spec.storage_options))}",
            root=spec.url,
        ) from None
    ops: Any = StoreOps(store)
    if spec.scheme == "memory":
        ops = _PrefixedOps(ops, spec.url.removeprefix("memory://"))
    profile = spec.storage_options.get("pubsub_simulated_latency")
    if profile is not None:
        from broker_core.storage.latency import LatencyOps

        ops = LatencyOps(ops, profile.strip().lower())
    if wrap is not None:
        ops = wrap(ops)
    io = ObjectStoreFileIO(ops, spec.url, storage_options=spec.storage_options,
                           single_writer=truthy(spec.storage_options.get("pubsub_single_writer")))
    io.root_status()  # one LIST: fails now, typed and naming the root, if the bucket or the credentials are wrong
    return io


class _PrefixedOps(StoreOps):
    """A memory store is shared by every ``memory://`` root in the process: keys carry the root's name."""

    def __init__(self, inner: StoreOps, prefix: str) -> None:
        super().__init__(inner.store)
        self.counts = inner.counts
        self._prefix = prefix.strip("/") + "/"

    def get(self, key: str) -> bytes | None:
        return super().get(self._prefix + key)

    def head(self, key: str) -> dict[str, Any] | None:
        return super().head(self._prefix + key)

    def put(self, key: str, data: Any, *, create: bool) -> None:
        super().put(self._prefix + key, data, create=create)

    def list_delimited(self, prefix: str) -> tuple[list[str], list[str]]:
        dirs, files = super().list_delimited(self._prefix + prefix)
        cut = len(self._prefix)
        return [d[cut:] for d in dirs], [f[cut:] for f in files]

    def list_all(self, prefix: str) -> list[str]:
        return [k[len(self._prefix):] for k in super().list_all(self._prefix + prefix)]

    def delete(self, keys: list[str]) -> None:
        super().delete([self._prefix + k for k in keys])


__all__ = [
    "TRASH_DIR",
    "FileIO",
    "FileStatus",
    "LocalFileIO",
    "ObjectStoreFileIO",
    "RootSpec",
    "StoreOps",
    "check_key",
    "contained_path",
    "file_io_for",
    "open_object_store",
    "parse_root",
]
