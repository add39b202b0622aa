"""Simulated object-store latency: a ``StoreOps`` wrapper that sleeps before each request.

The S3 emulator answers in about a millisecond; real stores do not.  ``pubsub_simulated_latency``
(a storage option: ``standard`` or ``express``) wraps a root's requests so that benchmarks and
experiments see realistic small-object times in every process that opens the root:

- ``standard`` (S3 Standard): GET, HEAD, LIST and DELETE 30 ms, PUT 80 ms;
- ``express`` (S3 Express One Zone): 10 ms each.

It only adds time; it changes no answer.  Never set it in production.
"""

from __future__ import annotations

import time
from typing import Any

from broker_core.errors import InvalidConfiguration
from broker_core.storage.object_store import StoreOps

PROFILES_MS: dict[str, dict[str, float]] = {
    "standard": {"GET": 30.0, "HEAD": 30.0, "LIST": 30.0, "DELETE": 30.0, "PUT": 80.0},
    "express": {"GET": 10.0, "HEAD": 10.0, "LIST": 10.0, "DELETE": 10.0, "PUT": 10.0},
}


class LatencyOps(StoreOps):
    """Delegates to ``inner`` after sleeping the profile's time for the request type."""

    def __init__(self, inner: StoreOps, profile: str) -> None:
        if profile not in PROFILES_MS:
            raise InvalidConfiguration(
                f"pubsub_simulated_latency={profile!r} is not a profile; use one of {', '.join(PROFILES_MS)}",
                option="pubsub_simulated_latency",
            )
        self.inner = inner
        self.store = inner.store
        self.counts = inner.counts
        self.profile = profile
        self._ms = PROFILES_MS[profile]

    def _wait(self, kind: str) -> None:
        time.sleep(self._ms[kind] / 1000)

    def get(self, key: str) -> bytes | None:
        self._wait("GET")
        return self.inner.get(key)

    def head(self, key: str) -> dict[str, Any] | None:
        self._wait("HEAD")
        return self.inner.head(key)

    def put(self, key: str, data: Any, *, create: bool) -> None:
        self._wait("PUT")
        self.inner.put(key, data, create=create)

    def list_delimited(self, prefix: str) -> tuple[list[str], list[str]]:
        self._wait("LIST")
        return self.inner.list_delimited(prefix)

    def list_all(self, prefix: str) -> list[str]:
        self._wait("LIST")
        return self.inner.list_all(prefix)

    def delete(self, keys: list[str]) -> None:
        self._wait("DELETE")
        self.inner.delete(keys)


__all__ = ["PROFILES_MS", "LatencyOps"]
