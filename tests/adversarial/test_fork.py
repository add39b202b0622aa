"""Processes that fork after using a root (multiprocessing's 'fork', gunicorn or celery prefork).

A child gets the parent's memory but none of its threads: obstore's runtime, the producers' senders,
the consumers' dispatchers.  Before issue #26 a forked child of an S3 client hung at its first
request, even through a Client of its own, and on a folder a fork that landed while one of the
parent's threads held a lock hung the child now and then.  Now a Client made in the child works, on
both roots, with the parent's client open or closed, and an object made before the fork raises
``CreatedBeforeFork`` at once (``docs/CLIENT.md`` "Forking processes", D140-D144).

Each case runs ``fork_driver.py`` in a subprocess that forks its children itself and kills one that
does not finish within the bar (60 s), so no case can hang the suite.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from moto_s3 import MotoS3, Root
from processes import run_python

from broker_core import Client, CreatedBeforeFork

DRIVER = Path(__file__).with_name("fork_driver.py")
CHILD_TIMEOUT_S = 60  # the bar: a forked child of an S3 client works (or fails) within 60 s


def drive(root: Root, *, parent: str, children: list[str], iterations: int) -> dict[str, Any]:
    config = {"url": root.url, "parent": parent, "children": children, "iterations": iterations,
              "child_timeout_s": CHILD_TIMEOUT_S}
    done = run_python(DRIVER, json.dumps(config), timeout_s=iterations * CHILD_TIMEOUT_S + 120)
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def assert_all_ok(report: dict[str, Any]) -> None:
    bad = [r for r in report["results"] if r["status"] != "ok"]
    assert not bad, bad


def test_children_of_an_open_client_work_and_its_objects_fail_at_once(any_root: Root) -> None:
    """The parent's client stays open and sends throughout.  Children in turn: one opens its own Client
    (produce and consume), one first uses the parent's client, producer, consumer and reader (each
    raises ``CreatedBeforeFork`` within seconds, ``close`` returns) and then its own, one runs a
    multiprocessing 'fork' worker that opens its own.  On a folder this repeats 7 times (21 forks
    under a busy parent: main hung about one child in five); the parent still sends afterwards."""
    iterations = 21 if any_root.kind == "local" else 3
    report = drive(any_root, parent="open", children=["new", "inherited", "mp"], iterations=iterations)
    assert_all_ok(report)
    assert report["parent_after"] == "ok"


def test_children_of_a_closed_client_work(any_root: Root) -> None:
    """The parent used the root and closed its client before forking (obstore's runtime still ran in
    it): a child's own Client works, forked directly or as a multiprocessing 'fork' worker."""
    assert_all_ok(drive(any_root, parent="closed", children=["new", "mp"], iterations=2))


def test_a_child_that_cannot_load_its_own_obstore_fails_at_once(moto_s3: MotoS3) -> None:
    """Where the private copy of obstore's library cannot be made (here: no temporary folder), the
    child's first object-store root is ``CreatedBeforeFork`` within seconds, naming 'spawn', not a hang."""
    from broker_core.storage import obstore_runtime

    url = moto_s3.fresh_root()
    Client(url, storage_options=moto_s3.storage_options).close()  # obstore's runtime now runs here
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report one byte, never return into pytest
        verdict = b"?"
        try:
            def no_folder(*_: Any, **__: Any) -> str:
                raise OSError("no temporary folder")

            obstore_runtime.tempfile.mkdtemp = no_folder  # type: ignore[assignment]
            started = time.monotonic()
            try:
                Client(url, storage_options=moto_s3.storage_options)
            except CreatedBeforeFork as exc:
                fast = time.monotonic() - started < 5
                verdict = b"1" if fast and "spawn" in str(exc) and "no temporary folder" in str(exc) else b"0"
        finally:
            os.write(write_end, verdict)
            os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while not os.waitpid(pid, os.WNOHANG)[0]:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            break
        time.sleep(0.02)
    verdict = os.read(read_end, 1)
    os.close(read_end)
    assert verdict == b"1"
