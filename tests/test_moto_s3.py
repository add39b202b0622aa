"""The S3 emulator's writes are one step each, as S3's: a conditional PUT has exactly one winner.

moto checks ``If-None-Match: *`` and stores the object in two steps on a threaded server; two
commits of one version could both succeed (a lost update S3 never makes, which delivered a message
to two consumers in ``test_subscription_processes.py``).  ``OneWriteAtATime`` runs each write alone.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto_s3 import OneWriteAtATime

ALONE_S = 1.0  # with the middleware, how long the first write waits for a second that never comes


class CheckThenStore:
    """A WSGI app that stores like moto: check that the key is absent, then store it.  Between the
    two steps it waits (up to ``wait_s``) for a second request to reach the same point, so without
    the middleware both always pass the check; with it, the second never gets there."""

    def __init__(self, wait_s: float) -> None:
        self.store: dict[str, str] = {}
        self.both_checked = threading.Barrier(2, timeout=wait_s)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        key = environ["PATH_INFO"]
        if environ.get("HTTP_IF_NONE_MATCH") == "*" and key in self.store:
            start_response("412 Precondition Failed", [])
            return [b""]
        with contextlib.suppress(threading.BrokenBarrierError):  # alone: what the middleware ensures
            self.both_checked.wait()
        self.store[key] = environ["writer"]
        start_response("200 OK", [])
        return [b""]


def put(app: Callable[..., Iterable[bytes]], writer: str, statuses: dict[str, str]) -> None:
    environ = {"REQUEST_METHOD": "PUT", "PATH_INFO": "/bucket/v1.json", "HTTP_IF_NONE_MATCH": "*", "writer": writer}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        statuses[writer] = status.split()[0]

    list(app(environ, start_response))


def race(app: Callable[..., Iterable[bytes]]) -> dict[str, str]:
    statuses: dict[str, str] = {}
    threads = [threading.Thread(target=put, args=(app, name, statuses)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def test_without_the_middleware_both_conditional_puts_win() -> None:
    """The race the middleware closes (so the next test can fail): both pass the check."""
    inner = CheckThenStore(wait_s=60)  # both arrive, so this returns at once
    assert sorted(race(inner).values()) == ["200", "200"]


def test_one_write_at_a_time_gives_a_conditional_put_one_winner() -> None:
    inner = CheckThenStore(wait_s=ALONE_S)
    statuses = race(OneWriteAtATime(inner))
    assert sorted(statuses.values()) == ["200", "412"], statuses
    winner = next(name for name, status in statuses.items() if status == "200")
    assert inner.store == {"/bucket/v1.json": winner}


def test_reads_are_not_held_behind_a_write() -> None:
    """A GET made while a write is inside the app goes straight through (a reentrant lock or one on
    every request would block it: the write below is still holding the lock when it reads)."""
    seen: list[str] = []

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ["REQUEST_METHOD"] == "PUT":
            reader = threading.Thread(target=lambda: list(wrapped({"REQUEST_METHOD": "GET"}, start_response)))
            reader.start()
            reader.join(30)  # (at once, unless the GET waits for this PUT's lock: then never)
        seen.append(environ["REQUEST_METHOD"])
        start_response("200 OK", [])
        return [b""]

    wrapped = OneWriteAtATime(app)
    list(wrapped({"REQUEST_METHOD": "PUT"}, lambda status, headers: None))
    assert seen == ["GET", "PUT"]
