"""A parent that uses a root, then forks children that use it too: run by ``test_fork.py``.

``python fork_driver.py '<json>'`` with ``url`` (the root; an S3 root reads its settings from the
``AWS_*`` environment), ``parent`` (``"open"``: the parent's client stays open, a thread of it
sending all along, so a fork may land while one of its threads holds a lock; ``"closed"``: closed
before the first fork), ``children`` (what the children do, taken in turn: ``"new"``: the child
opens a Client of its own; ``"inherited"``: the child first uses the parent's (open) client,
producer, consumer, reader (and on S3 its Admin), each of which must raise ``CreatedBeforeFork``
at once, then opens its own; ``"mp"``: a ``multiprocessing`` 'fork' worker opens its own), ``iterations`` and
``child_timeout_s``.

A child that does not finish within ``child_timeout_s`` is killed and reported ``"hung"``, so the
driver never hangs.  The last line of output is JSON: one ``{"status", "seconds", "error"}`` per
iteration (``status`` is ``ok``, ``failed`` or ``hung``), plus ``parent_after`` (the parent still
sends after the forks).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any

from broker_core import Admin, Client, CreatedBeforeFork, InitialPosition, MessageId

TOPIC = "persistent://public/default/forked"
_RECEIVE_MS = 20_000
_FAST_S = 5.0  # an inherited object must fail well within this


def own_client_round_trip(url: str, tag: str) -> None:
    """Open a Client in this process, send ``tag``, and consume from the start until the parent's
    first message and ``tag`` have both arrived."""
    client = Client(url)
    try:
        client.create_producer(TOPIC).send(tag.encode())
        consumer = client.subscribe(TOPIC, f"sub-{tag}", initial_position=InitialPosition.Earliest)
        wanted = {b"parent-first", tag.encode()}
        while wanted:
            message = consumer.receive(_RECEIVE_MS)
            wanted.discard(message.data())
            consumer.acknowledge(message)
    finally:
        client.close()


def inherited_fail_fast(handles: dict[str, Any]) -> None:
    """Each use of a parent's (open) object raises ``CreatedBeforeFork`` within ``_FAST_S``; ``close``
    returns at once."""
    uses = {
        "client.create_producer": lambda: handles["client"].create_producer(TOPIC),
        "client.subscribe": lambda: handles["client"].subscribe(TOPIC, "inherited"),
        "producer.send": lambda: handles["producer"].send(b"from-child"),
        "producer.flush": lambda: handles["producer"].flush(),
        "consumer.receive": lambda: handles["consumer"].receive(1000),
        "consumer.batch_receive": lambda: handles["consumer"].batch_receive(),
        "consumer.acknowledge": lambda: handles["consumer"].acknowledge(handles["received"]),
        "reader.read_next": lambda: handles["reader"].read_next(1000),
        "reader.has_message_available": lambda: handles["reader"].has_message_available(),
    }
    for name, use in uses.items():
        started = time.monotonic()
        try:
            use()
        except CreatedBeforeFork as exc:
            assert "fork" in str(exc) and "spawn" in str(exc), (name, str(exc))
        else:
            raise AssertionError(f"{name} worked in the child")
        assert time.monotonic() - started < _FAST_S, f"{name} took {time.monotonic() - started:.1f} s"
    started = time.monotonic()
    handles["client"].close()
    assert time.monotonic() - started < _FAST_S, "the parent's client.close() was slow in the child"
    url = handles["url"]
    if url.startswith("s3://"):  # the parent's Admin holds the parent's store: refused at its first request
        started = time.monotonic()
        try:
            handles["admin"].list_subscriptions(TOPIC)
        except CreatedBeforeFork:
            assert time.monotonic() - started < _FAST_S
        else:
            raise AssertionError("the parent's Admin reached S3 from the child")
    else:  # on a folder it does plain file I/O, and still works
        assert "parent" in handles["admin"].list_subscriptions(TOPIC)
    assert "parent" in Admin.open(url).list_subscriptions(TOPIC)  # the child's own Admin


def _mp_worker(url: str, tag: str) -> None:
    own_client_round_trip(url, tag)


def child_main(config: dict[str, Any], handles: dict[str, Any], iteration: int) -> None:
    tag = f"child-{iteration}-{os.getpid()}"
    mode = config["children"][iteration % len(config["children"])]
    if mode == "inherited":
        assert config["parent"] == "open", "the parent's objects are the open ones"
        inherited_fail_fast(handles)
        own_client_round_trip(config["url"], tag)
    elif mode == "mp":
        worker = multiprocessing.get_context("fork").Process(target=_mp_worker, args=(config["url"], tag))
        worker.start()
        worker.join(config["child_timeout_s"])
        if worker.exitcode is None:
            worker.kill()
            raise AssertionError("the multiprocessing worker hung")
        assert worker.exitcode == 0, f"the multiprocessing worker exited {worker.exitcode}"
    else:
        own_client_round_trip(config["url"], tag)


def run_child(config: dict[str, Any], handles: dict[str, Any], iteration: int) -> dict[str, Any]:
    started = time.monotonic()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)  # a group of its own: a hung child is killed with what it started
        os.close(read_end)
        code = 0
        try:
            child_main(config, handles, iteration)
        except BaseException:
            os.write(write_end, traceback.format_exc()[-3000:].encode())
            code = 1
        os._exit(code)
    os.close(write_end)
    deadline = started + config["child_timeout_s"]
    status = None
    while time.monotonic() < deadline:
        done, code = os.waitpid(pid, os.WNOHANG)
        if done:
            status = "ok" if os.waitstatus_to_exitcode(code) == 0 else "failed"
            break
        time.sleep(0.02)
    if status is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        status = "hung"
    with contextlib.suppress(ProcessLookupError):  # a worker the child started and left hanging
        os.killpg(pid, signal.SIGKILL)
    error = os.read(read_end, 4000).decode(errors="replace") if status == "failed" else ""
    os.close(read_end)
    mode = config["children"][iteration % len(config["children"])]
    return {"mode": mode, "status": status, "seconds": round(time.monotonic() - started, 2), "error": error}


def main() -> None:
    config = json.loads(sys.argv[1])
    client = Client(config["url"], create_root=True)
    producer = client.create_producer(TOPIC)
    producer.send(b"parent-first")
    consumer = client.subscribe(TOPIC, "parent", initial_position=InitialPosition.Earliest)
    received = consumer.receive(_RECEIVE_MS)
    reader = client.create_reader(TOPIC, MessageId.earliest)
    assert reader.read_next(_RECEIVE_MS).data() == b"parent-first"
    handles = {"client": client, "producer": producer, "consumer": consumer, "reader": reader, "received": received,
               "admin": Admin.open(config["url"]), "url": config["url"]}
    stop = threading.Event()
    sender = None
    if config["parent"] == "open":

        def keep_sending() -> None:  # so that a fork may come while the parent's threads hold locks
            while not stop.is_set():
                producer.send(b"parent-busy")

        sender = threading.Thread(target=keep_sending, daemon=True)
        sender.start()
    else:
        client.close()
    results = [run_child(config, handles, i) for i in range(config["iterations"])]
    stop.set()
    if sender is not None:
        sender.join(30)
    parent_after = "closed"
    if config["parent"] == "open":
        producer.send(b"parent-after")
        parent_after = "ok"
        client.close()
    print(json.dumps({"results": results, "parent_after": parent_after}), flush=True)


if __name__ == "__main__":
    main()
