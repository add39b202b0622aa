"""Issue 26: a damaged newest cursor version must not lock an Exclusive subscription on a released
lease, and every ``ConsumerBusy`` raised because of a lease says whose it is, where, and until when."""

from __future__ import annotations

import json
import os
import re
from contextlib import closing
from typing import Any

import pytest
from moto_s3 import Root

from broker_core import Client, ConsumerBusy, ConsumerType, PulsarException
from broker_core.storage import file_io_for

T = "persistent://public/default/t"
CURSORS = "public/default/persistent/t/_cursors/s"


def _open(root: Root) -> Client:
    return Client(root.url, storage_options=root.storage_options or None)


def _io(root: Root) -> Any:
    return file_io_for(root.url, storage_options=root.storage_options or None, fsync=False)


def _newest(io: Any) -> int:
    return max(int(n[:20]) for n in io.list_dir(CURSORS) if n.endswith(".json"))


def test_busy_says_it_is_a_lease_whose_where_and_until_when(any_root: Root) -> None:
    with closing(_open(any_root)) as client:
        first = client.subscribe(T, "s", consumer_type=ConsumerType.Exclusive, consumer_name="first")
        with pytest.raises(ConsumerBusy) as info:
            client.subscribe(T, "s", consumer_type=ConsumerType.Exclusive, consumer_name="second")
        message = str(info.value)
        assert isinstance(info.value, PulsarException)
        assert "lease" in message and "'first'" in message
        assert f"process {os.getpid()}" in message
        assert re.search(r"expires at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(in \d+ s\)", message)
        assert "close it" in message
        first.close()


def test_a_damaged_newest_version_does_not_resurrect_a_closed_consumers_lease(any_root: Root,
                                                                             new_process: Any) -> None:
    with closing(_open(any_root)) as client:
        client.subscribe(T, "s", consumer_type=ConsumerType.Exclusive, consumer_name="first").close()
    io = _io(any_root)
    newest = _newest(io)  # the version that released the lease
    released = json.loads(io.read_bytes(f"{CURSORS}/{newest:020d}.json"))
    assert "first" not in released["consumers"]
    io.replace(f"{CURSORS}/{newest:020d}.json", b'{"subscription": "s", "ty')  # torn
    new_process()
    with closing(_open(any_root)) as fresh:
        # the older version still holds "first"'s lease; it was taken by this process, which closed it
        fresh.subscribe(T, "s", consumer_type=ConsumerType.Exclusive, consumer_name="second").close()


def test_a_lease_of_a_live_consumer_is_kept_after_the_fallback(any_root: Root, new_process: Any) -> None:
    """The safe side: a lease whose holder may still run is waited out, damage or not."""
    with closing(_open(any_root)) as client:
        first = client.subscribe(T, "s", consumer_type=ConsumerType.Exclusive, consumer_name="first")
        io = _io(any_root)
        newest = _newest(io)
        io.replace(f"{CURSORS}/{newest + 1:020d}.json", b"{")  # a damaged version above the live lease
        new_process()
        with closing(_open(any_root)) as fresh, pytest.raises(ConsumerBusy, match="'first' holds a lease"):
            fresh.subscribe(T, "s", consumer_type=ConsumerType.Exclusive, consumer_name="second")
        first.close()


def test_only_a_provably_gone_holder_is_released() -> None:
    from broker_core.subscription import lease_holder

    here = lease_holder.this_holder()
    assert not lease_holder.is_gone({}, "c")  # written before holders were recorded
    assert not lease_holder.is_gone({**here, "boot": "another-machine"}, "c")
    assert not lease_holder.is_gone({**here, "pidNs": "1"}, "c")  # another container
    assert lease_holder.is_gone(here, "never-opened")  # this process, no such consumer open
    lease_holder.opening("open-one")
    try:
        assert not lease_holder.is_gone(here, "open-one")
    finally:
        lease_holder.closed("open-one")
    assert not lease_holder.is_gone({**here, "pid": "1"}, "c")  # pid 1 always exists


def test_a_lease_of_a_killed_process_on_this_machine_is_released_at_once(tmp_path: Any) -> None:
    import subprocess
    import sys

    root = str(tmp_path / "root")
    code = ("import os, sys\nfrom broker_core import Client, ConsumerType\n"
            "c = Client(sys.argv[1], create_root=True)\n"
            "c.subscribe('persistent://public/default/t', 's', consumer_type=ConsumerType.Exclusive, "
            "consumer_name='crashed')\nos._exit(0)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    subprocess.run([sys.executable, "-c", code, root], check=True, env=env, timeout=120)
    with closing(Client(root)) as client:  # the holder's process is gone: no ~30 s wait for its lease
        client.subscribe(T, "s", consumer_type=ConsumerType.Exclusive, consumer_name="next").close()
