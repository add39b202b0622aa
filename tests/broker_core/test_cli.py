"""The ``pubsub`` command: every command's happy path (``--json`` parsed), and bad input for each
group giving the right exit code, exactly one ``pubsub: error:`` line on stderr, and no change on
storage.  Commands run in-process through ``main(argv)``; two runs go through the installed entry
points (the console script and ``python -m broker_core.cli``) in a subprocess.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core import Client, ConsumerType, InitialPosition, TopicDeleted
from broker_core.cli import build_parser, main
from broker_core.cli.messages import next_unacked
from broker_core.subscription.cursor import new_cursor
from broker_core.subscription.ranges import RangeSet

T = "persistent://public/default/t"
P = "persistent://public/default/p"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A storage root with fsync off, opened once so the defaults exist before any snapshot."""
    path = tmp_path / "root"
    (path / "_pubsub").mkdir(parents=True)
    (path / "_pubsub" / "broker.toml").write_text("fsyncEnabled = false\n")
    return path


@pytest.fixture
def cli(root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``cli(*args)`` -> (exit code, stdout, stderr) of ``pubsub --root <root> *args``."""
    monkeypatch.delenv("PUBSUB_ROOT", raising=False)

    def run(*args: str, with_root: bool = True) -> tuple[int, str, str]:
        code = main([*(["--root", str(root)] if with_root else []), *args])
        out = capsys.readouterr()
        return code, out.out, out.err

    run("tenants", "list")  # creates public and public/default
    yield run


def ok(cli: Any, *args: str) -> Any:
    """Run with ``--json``, assert success and return the parsed output."""
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    assert err == ""
    return json.loads(out)


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


def fails(cli: Any, root: Path, code: int, *args: str, match: str = "", **options: Any) -> str:
    """Assert ``args`` exit with ``code``, one error line mentioning ``match``, and no change on storage."""
    before = snapshot(root)
    got, out, err = cli(*args, **options)
    assert got == code, (got, out, err)
    assert out == ""
    assert err.startswith("pubsub: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert match.lower() in err.lower(), err
    assert snapshot(root) == before
    return err


@contextlib.contextmanager
def open_client(root: Path) -> Iterator[Client]:
    client = Client(str(root))
    try:
        yield client
    finally:
        client.close()


def send(root: Path, topic: str, count: int, *, key: str | None = None) -> None:
    with open_client(root) as client:
        producer = client.create_producer(topic)
        for i in range(count):
            producer.send(f"m{i}".encode(), partition_key=key or f"k{i}", properties={"i": str(i)})
        producer.close()


# -- the whole tree ---------------------------------------------------------------------------------


def _paths(parser: argparse.ArgumentParser, prefix: list[str]) -> Iterator[list[str]]:
    yield prefix
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _paths(sub, [*prefix, name])


def test_every_level_answers_help(capsys: pytest.CaptureFixture[str]) -> None:
    paths = list(_paths(build_parser(), []))
    assert len(paths) > 25
    for path in paths:
        assert main([*path, "--help"]) == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: pubsub"), path
        assert len(out.splitlines()) > 3, path


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    import broker_core

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"pubsub {broker_core.__version__}\n"


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["frobnicate"], "invalid choice"),
        ([], "required"),
        (["topics"], "required"),
        (["topics", "create"], "required"),
        (["topics", "peek", "t"], "required"),
        (["topics", "peek", "t", "--earliest", "-n", "0"], "whole number"),
        (["topics", "create", "t", "--partitions", "x"], "whole number"),
        (["namespaces", "policies", "set", "public/default"], "required"),
        (["vacuum", "t"], "--min-age"),
        (["vacuum", "t", "--min-age", "7 days"], "invalid duration"),
        (["retention"], "exactly one"),
        (["retention", "t", "--namespace", "public/default"], "exactly one"),
        (["tenants", "list", "--bogus"], "unrecognized"),
    ],
)
def test_usage_errors_exit_2_with_one_line(cli: Any, root: Path, args: list[str], match: str) -> None:
    fails(cli, root, 2, *args, match=match)


def test_the_root_comes_from_the_option_anywhere_or_the_environment(
    root: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ok(cli, "tenants", "create", "acme") == {"tenant": "acme", "created": True}
    code, out, _ = cli("tenants", "list", "--root", str(root), "--json", with_root=False)
    assert code == 0 and json.loads(out)["tenants"] == ["acme", "public"]
    monkeypatch.setenv("PUBSUB_ROOT", str(root))
    code, out, _ = cli("tenants", "list", with_root=False)
    assert code == 0 and out.split() == ["acme", "public"]
    monkeypatch.delenv("PUBSUB_ROOT")
    fails(cli, root, 2, "tenants", "list", with_root=False, match="--root")


def test_bad_roots_fail_in_one_line_and_create_nothing(
    tmp_path: Path, cli: Any, root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing" / "root"
    assert main(["--root", str(missing), "tenants", "create", "x"]) == 1
    assert "does not exist" in capsys.readouterr().err and not missing.parent.exists()
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert main(["--root", str(a_file), "tenants", "list"]) == 1
    assert "not a directory" in capsys.readouterr().err
    assert main(["--root", "pulsar://localhost:6650", "tenants", "list"]) == 2
    assert "no broker" in capsys.readouterr().err
    assert main(["--root", str(root), "--config", str(tmp_path / "nope.toml"), "tenants", "list"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_create_root_makes_a_missing_root_only_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fresh = tmp_path / "fresh"
    assert main(["--root", str(fresh), "topics", "list", "public/default"]) == 1
    assert not fresh.exists()
    assert main(["--root", str(fresh), "--create-root", "topics", "create", "t"]) == 0
    assert fresh.is_dir()
    capsys.readouterr()
    assert main(["--root", str(fresh), "topics", "list", "public/default"]) == 0
    assert "persistent://public/default/t" in capsys.readouterr().out


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores permissions")
def test_an_unwritable_root_reads_and_refuses_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:  # a read-only root opens for reading (issue 10); a write fails on one line, naming the file
        assert main(["--root", str(locked), "tenants", "list"]) == 0
        capsys.readouterr()
        assert main(["--root", str(locked), "tenants", "create", "acme"]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Permission denied" in err
    finally:
        locked.chmod(0o700)


def test_a_storage_failure_is_one_line_exit_1(cli: Any, root: Path) -> None:
    (root / "blocked").write_text("a file where the tenant's directory would go")
    fails(cli, root, 1, "tenants", "create", "blocked")


# -- tenants and namespaces -----------------------------------------------------------------------


def test_tenants(cli: Any, root: Path) -> None:
    assert ok(cli, "tenants", "create", "acme")["created"]
    assert ok(cli, "tenants", "list") == {"tenants": ["acme", "public"]}
    fails(cli, root, 1, "tenants", "create", "acme", match="already exists")
    fails(cli, root, 2, "tenants", "create", "../evil", match="invalid tenant name")
    fails(cli, root, 2, "tenants", "create", "_hidden", match="reserved")
    fails(cli, root, 1, "tenants", "delete", "nobody", match="does not exist")
    fails(cli, root, 1, "tenants", "delete", "public", match="re-creates")
    ok(cli, "namespaces", "create", "acme/orders")
    fails(cli, root, 1, "tenants", "delete", "acme", match="has namespaces")
    ok(cli, "namespaces", "delete", "acme/orders")
    assert ok(cli, "tenants", "delete", "acme") == {"tenant": "acme", "deleted": True}
    assert ok(cli, "tenants", "list") == {"tenants": ["public"]}
    assert not (root / "acme").exists()
    assert ok(cli, "tenants", "create", "acme")["created"]  # a deleted tenant can come back


def test_namespaces(cli: Any, root: Path) -> None:
    ok(cli, "tenants", "create", "acme")
    assert ok(cli, "namespaces", "create", "acme/orders") == {"namespace": "acme/orders", "created": True}
    assert ok(cli, "namespaces", "list", "acme") == {"tenant": "acme", "namespaces": ["acme/orders"]}
    fails(cli, root, 1, "namespaces", "create", "acme/orders", match="already exists")
    fails(cli, root, 1, "namespaces", "create", "ghost/orders", match="tenant 'ghost' does not exist")
    fails(cli, root, 2, "namespaces", "create", "acme", match="tenant/namespace")
    fails(cli, root, 2, "namespaces", "create", "acme/or:ders", match=":")
    fails(cli, root, 1, "namespaces", "list", "ghost", match="does not exist")
    fails(cli, root, 1, "namespaces", "delete", "public/default", match="re-creates")
    fails(cli, root, 1, "namespaces", "delete", "acme/ghost", match="does not exist")
    ok(cli, "topics", "create", "acme/orders/t")
    fails(cli, root, 1, "namespaces", "delete", "acme/orders", match="has topics")
    ok(cli, "topics", "delete", "acme/orders/t")
    assert ok(cli, "namespaces", "delete", "acme/orders")["deleted"]
    assert ok(cli, "namespaces", "list", "acme")["namespaces"] == []
    fails(cli, root, 1, "topics", "create", "acme/orders/t", match="namespace acme/orders")


def test_namespace_policies(cli: Any, root: Path) -> None:
    got = ok(
        cli,
        "namespaces",
        "policies",
        "set",
        "public/default",
        "retentionTimeInMinutes=60",
        "retentionSizeInMB=-1",
        "deduplicationEnabled=true",
        "backlogQuotaPolicy=producer_exception",
    )
    expected = {
        "retentionTimeInMinutes": 60,
        "retentionSizeInMB": -1,
        "deduplicationEnabled": True,
        "backlogQuotaPolicy": "producer_exception",
    }
    assert got == {"namespace": "public/default", "policies": expected}
    assert ok(cli, "namespaces", "policies", "get", "public/default")["policies"] == expected
    effective = ok(cli, "namespaces", "policies", "get", "public/default", "--effective")["effective"]
    assert effective["retentionTimeInMinutes"] == 60 and effective["messageTTLInSeconds"] == 0
    removed = ok(cli, "namespaces", "policies", "remove", "public/default", "deduplicationEnabled")
    assert "deduplicationEnabled" not in removed["policies"]
    code, out, _ = cli("namespaces", "policies", "get", "public/default")
    assert code == 0 and "retentionTimeInMinutes = 60" in out

    ns = ("namespaces", "policies")
    fails(
        cli, root, 2, *ns, "set", "public/default", "retentionTime=5", match="unknown policy 'retentionTime'"
    )
    fails(cli, root, 2, *ns, "set", "public/default", "messageTTLInSeconds=-5", match="messageTTLInSeconds")
    fails(cli, root, 2, *ns, "set", "public/default", "retentionSizeInMB=-2", match="retentionSizeInMB")
    fails(cli, root, 2, *ns, "set", "public/default", "maxMessageSize=0", match="maxMessageSize")
    fails(cli, root, 2, *ns, "set", "public/default", "backlogQuotaPolicy=drop", match="backlogQuotaPolicy")
    fails(cli, root, 2, *ns, "set", "public/default", "retentionSizeInMB=0", match="contradictory")
    fails(cli, root, 2, *ns, "set", "public/default", "messageTTLInSeconds", match="key=value")
    fails(cli, root, 2, *ns, "set", "public/default", "a=1", "a=2", match="twice")
    fails(cli, root, 2, *ns, "remove", "public/default", "nope", match="unknown policy")
    fails(cli, root, 1, *ns, "get", "public/ghost", match="does not exist")
    fails(cli, root, 1, *ns, "set", "public/ghost", "messageTTLInSeconds=5", match="does not exist")


# -- topics ---------------------------------------------------------------------------------------


def test_topics_create_list_stats_delete(cli: Any, root: Path) -> None:
    assert ok(cli, "topics", "create", "t") == {"topic": T, "partitions": 0, "created": True}
    assert ok(cli, "topics", "create", "p", "--partitions", "3")["partitions"] == 3
    listed = ok(cli, "topics", "list", "public/default")
    assert listed["topics"] == [{"topic": P, "partitions": 3}, {"topic": T, "partitions": 0}]
    send(root, "t", 3)
    send(root, "p", 4)
    ok(cli, "subscriptions", "create", "p", "s")
    stats = ok(cli, "topics", "stats", "p")
    assert stats["msgCount"] == 4 and stats["msgBacklog"] == {"s": 4}
    assert sorted(stats["partitions"]) == [f"{P}-partition-{i}" for i in range(3)]
    assert ok(cli, "topics", "stats", "t")["partitions"][T]["msgCount"] == 3
    code, out, _ = cli("topics", "stats", "p")
    assert code == 0 and "subscription s (Exclusive): backlog" in out

    deleted = ok(cli, "topics", "delete", "p")
    assert deleted["internalTopics"] == [f"{P}-partition-{i}" for i in range(3)]
    assert deleted["subscriptions"] == ["s"]
    assert ok(cli, "topics", "delete", "t")["deleted"]
    assert ok(cli, "topics", "list", "public/default")["topics"] == []
    assert set(os.listdir(root / "public" / "default" / "persistent")) <= {"_partitioned", "_policies"}
    assert os.listdir(root / "_pubsub" / "trash") == []
    ok(cli, "topics", "create", "t")  # the same name again starts from nothing
    assert ok(cli, "topics", "stats", "t")["msgCount"] == 0


def test_topic_errors(cli: Any, root: Path) -> None:
    ok(cli, "topics", "create", "t")
    ok(cli, "topics", "create", "p", "--partitions", "2")
    fails(cli, root, 1, "topics", "create", "t", match="exists already")
    fails(cli, root, 1, "topics", "create", "p", match="exists already")
    fails(cli, root, 1, "topics", "create", "t", "--partitions", "2", match="exists already")
    fails(cli, root, 2, "topics", "create", "a/b", match="ambiguous")
    fails(cli, root, 2, "topics", "create", "../../etc/x", match="relative path")
    fails(cli, root, 2, "topics", "create", "x-partition-0", match="partition")
    fails(cli, root, 1, "topics", "create", "non-persistent://public/default/n", match="non-persistent")
    fails(cli, root, 1, "topics", "create", "public/ghost/t", match="namespace public/ghost")
    fails(cli, root, 2, "topics", "list", "public", match="tenant/namespace")
    fails(cli, root, 1, "topics", "list", "public/ghost", match="does not exist")
    for command in (["stats"], ["delete"], ["peek", "--earliest"], ["policies", "get", "--effective"]):
        fails(cli, root, 1, "topics", *command, "ghost", match="does not exist")
    fails(cli, root, 1, "topics", "delete", "p-partition-1", match="delete persistent://public/default/p")
    fails(cli, root, 1, "topics", "stats", "p-partition-7", match="does not exist")
    fails(cli, root, 1, "topics", "stats", "non-persistent://public/default/n", match="non-persistent")
    fails(cli, root, 1, "topics", "delete", "non-persistent://public/default/n", match="nothing on storage")
    n = "non-persistent://public/default/n"
    assert ok(cli, "topics", "create", n, "--partitions", "2")["partitions"] == 2
    assert {"topic": n, "partitions": 2} in ok(cli, "topics", "list", "public/default")["topics"]
    assert ok(cli, "topics", "delete", n) == {
        "topic": n,
        "deleted": True,
        "internalTopics": [],
        "subscriptions": [],
    }


def test_a_topic_in_use_is_deleted_only_with_force(cli: Any, root: Path) -> None:
    ok(cli, "topics", "create", "t")
    with open_client(root) as client:
        producer = client.create_producer("t")
        producer.send(b"x")
        err = fails(cli, root, 1, "topics", "delete", "t", match="in use")
        assert "producer" in err
        consumer = client.subscribe("t", "s", consumer_type=ConsumerType.Shared)
        code, _, err = cli("topics", "delete", "t")
        assert code == 1 and "consumer" in err
        assert ok(cli, "topics", "delete", "t", "--force")["subscriptions"] == ["s"]
        with pytest.raises(TopicDeleted, match=T):  # disconnected, as Pulsar does it
            producer.send(b"after the delete")
        consumer.close()
        producer.close()
    assert ok(cli, "topics", "list", "public/default")["topics"] == []
    assert not (root / "public" / "default" / "persistent" / "t").exists()  # nothing came back


def test_topic_policies(cli: Any, root: Path) -> None:
    ok(cli, "topics", "create", "p", "--partitions", "2")
    ok(cli, "namespaces", "policies", "set", "public/default", "messageTTLInSeconds=60")
    got = ok(cli, "topics", "policies", "set", "p", "messageTTLInSeconds=30", "maxMessageSize=1024")
    assert got == {"topic": P, "policies": {"messageTTLInSeconds": 30, "maxMessageSize": 1024}}
    assert ok(cli, "topics", "policies", "get", "p", "--effective")["effective"]["messageTTLInSeconds"] == 30
    ok(cli, "topics", "policies", "remove", "p", "messageTTLInSeconds")
    assert ok(cli, "topics", "policies", "get", "p", "--effective")["effective"]["messageTTLInSeconds"] == 60
    assert ok(cli, "topics", "policies", "get", "p")["policies"] == {"maxMessageSize": 1024}
    fails(cli, root, 2, "topics", "policies", "set", "p", "ttl=3", match="unknown policy")
    fails(
        cli,
        root,
        2,
        "topics",
        "policies",
        "set",
        "p",
        "backlogQuotaLimitTime=-7",
        match="backlogQuotaLimitTime",
    )
    fails(cli, root, 1, "topics", "policies", "set", "p-partition-0", "maxMessageSize=5", match="whole topic")
    fails(cli, root, 1, "topics", "policies", "set", "ghost", "maxMessageSize=5", match="does not exist")
    fails(cli, root, 2, "topics", "policies", "remove", "p", "maxMessageSize=5", match="KEY names")


# -- subscriptions ----------------------------------------------------------------------------------


def test_subscriptions(cli: Any, root: Path) -> None:
    ok(cli, "topics", "create", "p", "--partitions", "2")
    send(root, "p", 4)
    created = ok(cli, "subscriptions", "create", "p", "early")
    assert created == {"topic": P, "subscription": "early", "position": "earliest", "created": True}
    ok(cli, "subscriptions", "create", "p", "late", "--position", "latest")
    listed = ok(cli, "subscriptions", "list", "p")["subscriptions"]
    assert [s["subscription"] for s in listed] == ["early", "late"]
    assert listed[0] == {"subscription": "early", "type": "Exclusive", "partitions": 2, "consumers": []}
    backlog = ok(cli, "topics", "stats", "p")["msgBacklog"]
    assert backlog == {"early": 4, "late": 0}
    assert ok(cli, "subscriptions", "delete", "p", "late")["internalTopics"] == 2
    assert [s["subscription"] for s in ok(cli, "subscriptions", "list", "p")["subscriptions"]] == ["early"]

    fails(cli, root, 1, "subscriptions", "create", "p", "early", match="exists already")
    fails(cli, root, 1, "subscriptions", "create", "ghost", "s", match="does not exist")
    fails(cli, root, 2, "subscriptions", "create", "p", "-bad", match="required")
    fails(cli, root, 2, "subscriptions", "create", "p", "b/ad", match="invalid subscription name")
    fails(cli, root, 2, "subscriptions", "create", "p", "s", "--position", "middle", match="invalid choice")
    fails(cli, root, 1, "subscriptions", "delete", "p", "late", match="does not exist")
    fails(cli, root, 1, "subscriptions", "list", "ghost", match="does not exist")


def test_a_subscription_with_consumers_is_deleted_only_with_force(cli: Any, root: Path) -> None:
    ok(cli, "topics", "create", "t")
    with open_client(root) as client:
        consumer = client.subscribe("t", "s", consumer_type=ConsumerType.Shared, consumer_name="c1")
        assert ok(cli, "subscriptions", "list", "t")["subscriptions"][0]["consumers"] == ["c1"]
        fails(cli, root, 1, "subscriptions", "delete", "t", "s", match="connected consumers")
        assert ok(cli, "subscriptions", "delete", "t", "s", "--force")["deleted"]
        consumer.close()


# -- peek, skip, reset-cursor ----------------------------------------------------------------------


def test_peek_shows_what_the_cursor_has_not_acknowledged(cli: Any, root: Path) -> None:
    ok(cli, "topics", "create", "t")
    ok(cli, "subscriptions", "create", "t", "s")
    send(root, "t", 5)
    with open_client(root) as client:
        client.create_producer("t").send(b"\xff\x00", properties={"bin": "yes"})
    first = ok(cli, "topics", "peek", "t", "-s", "s")["messages"]
    assert [m["value"] for m in first] == ["m0"]
    assert first[0]["offset"] == 0 and first[0]["key"] == "k0" and first[0]["properties"] == {"i": "0"}
    assert first[0]["messageId"].endswith(":0:-1:-1") and first[0]["valueEncoding"] == "utf-8"
    everything = ok(cli, "topics", "peek", "t", "--earliest", "-n", "50")["messages"]
    assert [m["offset"] for m in everything] == list(range(6))
    assert everything[-1]["valueEncoding"] == "base64" and everything[-1]["value"] == "/wA="
    with open_client(root) as client:  # acknowledge 0 and 2 individually
        consumer = client.subscribe("t", "s", consumer_type=ConsumerType.Shared)
        got = {consumer.receive(5000).value(): None for _ in range(3)}
        assert list(got) == [b"m0", b"m1", b"m2"]
        consumer.close()  # unacknowledged messages stay in the backlog
    before = snapshot(root)
    code, out, _ = cli("topics", "peek", "t", "-s", "s", "-n", "2")
    assert code == 0 and "value (2 bytes): m0" in out and "properties: i=0" in out
    assert snapshot(root) == before  # peek changes nothing
    fails(cli, root, 1, "topics", "peek", "t", "-s", "nope", match="subscription 'nope' does not exist")
    fails(cli, root, 2, "topics", "peek", "t", "-s", "s", "--earliest", match="not allowed with")


def test_peek_on_a_partitioned_topic_merges_partitions_by_publish_time(cli: Any, root: Path) -> None:
    ok(cli, "topics", "create", "p", "--partitions", "3")
    send(root, "p", 6)
    got = ok(cli, "topics", "peek", "p", "--earliest", "-n", "4")["messages"]
    assert [m["value"] for m in got] == ["m0", "m1", "m2", "m3"]
    assert {m["topic"] for m in got} <= {f"{P}-partition-{i}" for i in range(3)}
    assert all(m["messageId"].split(":")[2] == m["topic"][-1] for m in got)


def test_skip_acknowledges_the_next_messages(cli: Any, root: Path) -> None:
    ok(cli, "topics", "create", "t")
    ok(cli, "subscriptions", "create", "t", "s")
    send(root, "t", 6)
    assert ok(cli, "topics", "skip", "t", "-s", "s", "-n", "2")["skipped"] == 2
    assert [m["value"] for m in ok(cli, "topics", "peek", "t", "-s", "s")["messages"]] == ["m2"]
    skipped = ok(cli, "topics", "skip", "t", "-s", "s", "--all")
    assert skipped["skipped"] == 4 and skipped["partitions"][0]["nextOffsetAfter"] == 6
    assert ok(cli, "topics", "skip", "t", "-s", "s", "-n", "3")["skipped"] == 0
    assert ok(cli, "topics", "peek", "t", "-s", "s")["messages"] == []
    fails(cli, root, 1, "topics", "skip", "t", "-s", "ghost", "-n", "1", match="does not exist")
    fails(cli, root, 2, "topics", "skip", "t", "-s", "s", match="required")
    ok(cli, "topics", "create", "p", "--partitions", "2")
    ok(cli, "subscriptions", "create", "p", "s")
    send(root, "p", 4)
    fails(cli, root, 1, "topics", "skip", "p", "-s", "s", "-n", "1", match="one partition")
    assert ok(cli, "topics", "skip", f"{P}-partition-0", "-s", "s", "-n", "1")["skipped"] == 1
    assert ok(cli, "topics", "skip", "p", "-s", "s", "--all")["skipped"] == 3


def test_next_unacked_walks_the_gaps() -> None:
    cursor = new_cursor("s", ConsumerType.Shared, 2)
    cursor.acked = RangeSet([[3, 5], [7, 8]])
    assert next_unacked(cursor, 2, 10, 3).to_json() == [[2, 3], [5, 7]]
    assert next_unacked(cursor, 2, 10, None).to_json() == [[2, 3], [5, 7], [8, 10]]
    assert next_unacked(cursor, 2, 6, 10).to_json() == [[2, 3], [5, 6]]


def test_reset_cursor_by_time_and_message_id(cli: Any, root: Path) -> None:
    ok(cli, "topics", "create", "t")
    ok(cli, "subscriptions", "create", "t", "s")
    send(root, "t", 3)
    time.sleep(0.01)
    middle = int(time.time() * 1000)
    time.sleep(0.01)
    send(root, "t", 3)
    ok(cli, "topics", "skip", "t", "-s", "s", "--all")
    by_time = ok(cli, "topics", "reset-cursor", "t", "-s", "s", "--time", str(middle))
    assert by_time["partitions"] == [{"topic": T, "nextOffsetBefore": 6, "nextOffsetAfter": 3}]
    assert (
        ok(cli, "topics", "reset-cursor", "t", "-s", "s", "-t", "1h")["partitions"][0]["nextOffsetAfter"] == 0
    )
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 60))
    assert (
        ok(cli, "topics", "reset-cursor", "t", "-s", "s", "-t", iso)["partitions"][0]["nextOffsetAfter"] == 6
    )
    ledger = ok(cli, "topics", "peek", "t", "--earliest")["messages"][0]["messageId"].split(":")[0]
    inclusive = ok(cli, "topics", "reset-cursor", "t", "-s", "s", "--message-id", f"{ledger}:4")
    assert inclusive["partitions"][0]["nextOffsetAfter"] == 4
    exclusive = ok(cli, "topics", "reset-cursor", "t", "-s", "s", "-m", f"{ledger}:4", "--exclude-message")
    assert exclusive["partitions"][0]["nextOffsetAfter"] == 5
    assert [m["value"] for m in ok(cli, "topics", "peek", "t", "-s", "s")["messages"]] == ["m2"]
    assert (
        ok(cli, "topics", "reset-cursor", "t", "-s", "s", "-m", "earliest")["partitions"][0][
            "nextOffsetAfter"
        ]
        == 0
    )

    reset = ("topics", "reset-cursor", "t", "-s", "s")
    fails(cli, root, 2, *reset, "--time", "yesterday", match="invalid time")
    fails(cli, root, 2, *reset, "--message-id", "1:2:3:4:5", match="cannot parse")
    fails(cli, root, 2, *reset, "--message-id", f"{ledger}:1:3", match="partition 3")
    fails(cli, root, 2, *reset, "--time", "1h", "--message-id", "earliest", match="not allowed with")
    fails(cli, root, 2, *reset, "--time", "1h", "--exclude-message", match="--message-id")
    fails(cli, root, 2, *reset, match="required")
    fails(cli, root, 1, "topics", "reset-cursor", "t", "-s", "ghost", "-t", "1h", match="does not exist")
    with open_client(root) as client:
        consumer = client.subscribe(
            "t", "s", consumer_type=ConsumerType.Shared, initial_position=InitialPosition.Earliest
        )
        before = snapshot(root)
        code, _, err = cli(*reset, "-t", "1h")
        assert code == 1 and "connected consumers" in err
        assert ok(cli, *reset, "-t", "1h", "--force")["partitions"][0]["nextOffsetAfter"] == 0
        assert snapshot(root) != before
        consumer.close()


def test_reset_cursor_on_a_partitioned_topic(cli: Any, root: Path) -> None:
    ok(cli, "topics", "create", "p", "--partitions", "2")
    ok(cli, "subscriptions", "create", "p", "s")
    send(root, "p", 4)
    ok(cli, "topics", "skip", "p", "-s", "s", "--all")
    assert len(ok(cli, "topics", "reset-cursor", "p", "-s", "s", "-t", "1h")["partitions"]) == 2
    msg = ok(cli, "topics", "peek", f"{P}-partition-1", "--earliest")["messages"][0]["messageId"]
    ledger, entry, partition, _ = msg.split(":")
    fails(
        cli, root, 2, "topics", "reset-cursor", "p", "-s", "s", "-m", f"{ledger}:{entry}", match="partition"
    )
    moved = ok(cli, "topics", "reset-cursor", "p", "-s", "s", "-m", f"{ledger}:{entry}:{partition}")
    assert [r["topic"] for r in moved["partitions"]] == [f"{P}-partition-1"]


# -- jobs -------------------------------------------------------------------------------------------


def test_retention_is_a_dry_run_unless_executed(cli: Any, root: Path) -> None:
    ok(cli, "topics", "create", "t")
    ok(cli, "subscriptions", "create", "t", "s")
    send(root, "t", 4)
    ok(cli, "topics", "skip", "t", "-s", "s", "-n", "3")
    before = snapshot(root)
    dry = ok(cli, "retention", "t", "--time", "0", "--size", "0")
    assert dry["dryRun"] and not dry["changed"]
    assert dry["results"][0]["removedMessages"] == 3 and dry["results"][0]["firstOffset"] == 3
    assert "not acknowledged by subscription 's'" in dry["results"][0]["reason"]
    assert snapshot(root) == before
    code, out, _ = cli("retention", "t", "--time", "0", "--size", "0", "-v")
    assert code == 0 and "would remove 3 segment(s)" in out and "removed_paths: part-" in out
    assert "add --execute" in out
    done = ok(cli, "retention", "--namespace", "public/default", "--time", "0", "--size", "0", "--execute")
    assert done["changed"] and done["results"][0]["version"] is not None
    assert ok(cli, "topics", "peek", "t", "--earliest", "-n", "9")["messages"][0]["offset"] == 3
    fails(cli, root, 2, "retention", "t", "--time", "90s", match="whole number of minutes")
    fails(cli, root, 2, "retention", "t", "--size", "1K", match="whole number of megabytes")
    fails(cli, root, 2, "retention", "t", "--time", "0", "--size", "-1", match="contradictory")
    fails(cli, root, 1, "retention", "ghost", match="does not exist")
    fails(cli, root, 1, "retention", "--namespace", "public/ghost", match="does not exist")
    fails(cli, root, 2, "retention", "--namespace", "public", match="tenant/namespace")


def test_ttl_and_backlog(cli: Any, root: Path) -> None:
    ok(cli, "topics", "create", "t")
    ok(cli, "subscriptions", "create", "t", "s")
    send(root, "t", 3)
    later = str(int(time.time() * 1000) + 120_000)
    dry = ok(cli, "ttl", "t", "--ttl", "1m", "--now", later)
    assert dry["dryRun"] and dry["results"][0]["expiredMessages"] == 3
    assert ok(cli, "topics", "stats", "t")["msgBacklog"] == {"s": 3}
    status = ok(cli, "backlog", "t")
    assert status["results"][0]["backlogMessages"] == 3 and status["results"][0]["slowestSubscription"] == "s"
    ok(
        cli,
        "topics",
        "policies",
        "set",
        "t",
        "backlogQuotaLimitSize=1",
        "backlogQuotaPolicy=consumer_backlog_eviction",
    )
    evict = ok(cli, "backlog", "t", "--evict")
    assert evict["dryRun"] and evict["results"][0]["moved"]
    assert ok(cli, "topics", "stats", "t")["msgBacklog"] == {"s": 3}
    fails(cli, root, 2, "backlog", "t", "--execute", match="--evict")
    done = ok(cli, "ttl", "t", "--ttl", "1m", "--now", later, "-s", "s", "--execute")
    assert done["changed"] and ok(cli, "topics", "stats", "t")["msgBacklog"] == {"s": 0}
    fails(cli, root, 1, "ttl", "t", "-s", "ghost", match="does not exist")
    fails(cli, root, 2, "ttl", "t", "--ttl", "1500ms", match="whole number of seconds")
    fails(cli, root, 2, "ttl", "t", "--now", "soon", match="invalid time")


def test_compact_and_checkpoint(cli: Any, root: Path) -> None:
    ok(cli, "topics", "create", "t")
    send(root, "t", 6, key="same")
    dry = ok(cli, "compact", "t", "--dry-run")
    assert dry["partitions"][0]["status"] == "dry-run" and dry["rows"] == 1
    done = ok(cli, "compact", "t")
    assert done["messagesRead"] == 6 and done["partitions"][0]["status"] == "compacted"
    assert ok(cli, "compact", "t")["partitions"][0]["status"] == "up-to-date"
    ckpt = ok(cli, "checkpoint", "t")
    assert ckpt["results"][0]["created"] and ckpt["results"][0]["version"] == 6
    assert (root / "public/default/persistent/t/_delta_log/00000000000000000006.checkpoint.parquet").exists()
    fails(cli, root, 1, "compact", "ghost", match="does not exist")
    fails(cli, root, 2, "compact", "t", "--up-to-offset", "-1", match="whole number >= 0")
    fails(cli, root, 2, "compact", "--namespace", "public/default", match="unrecognized")
    fails(cli, root, 1, "checkpoint", "--namespace", "public/ghost", match="does not exist")


def test_cleanup_logs_and_vacuum(cli: Any, root: Path) -> None:
    ok(cli, "topics", "create", "t")
    send(root, "t", 4)
    ok(cli, "retention", "t", "--time", "0", "--size", "0", "--execute")  # no subscription: all go
    ok(cli, "checkpoint", "t")
    later = str(int(time.time() * 1000) + 3 * 3_600_000)
    log_dir = root / "public/default/persistent/t/_delta_log"
    before = snapshot(root)
    dry = ok(cli, "cleanup-logs", "t", "--retention", "1h", "--now", later)
    assert dry["dryRun"] and len(dry["results"][0]["deleted"]) >= 4
    vac = ok(cli, "vacuum", "--namespace", "public/default", "--min-age", "1h", "--now", later)
    assert len(vac["results"][0]["deletedRemoved"]) == 4 and not vac["changed"]
    assert snapshot(root) == before
    code, out, _ = cli("vacuum", "t", "--min-age", "1h", "--now", later, "-v")
    assert code == 0 and "would delete 4 removed" in out and "deleted_removed: part-" in out
    done = ok(cli, "vacuum", "t", "--min-age", "1h", "--now", later, "--execute")
    assert done["changed"] and not list((root / "public/default/persistent/t").glob("part-*"))
    cleaned = ok(cli, "cleanup-logs", "t", "--retention", "1h", "--now", later, "--execute")
    assert cleaned["changed"] and not (log_dir / "00000000000000000000.json").exists()
    assert ok(cli, "topics", "stats", "t")["msgCount"] == 0  # the topic still opens
    fails(cli, root, 2, "vacuum", "t", "--min-age", "10m", match="--unsafe-short-age")
    fails(cli, root, 2, "cleanup-logs", "t", "--retention", "5m", match="--unsafe-short-age")
    fails(cli, root, 2, "cleanup-logs", "t", "--retention", "-1d", match="expected one argument")
    fails(cli, root, 2, "vacuum", "t", "--min-age", "1h", "--max-producers", "0", match="whole number")
    fails(cli, root, 1, "vacuum", "ghost", "--min-age", "1h", match="does not exist")
    fails(
        cli, root, 1, "vacuum", "non-persistent://public/default/n", "--min-age", "1h", match="non-persistent"
    )
    assert ok(cli, "vacuum", "t", "--min-age", "1m", "--unsafe-short-age")["dryRun"]


# -- the installed entry points ---------------------------------------------------------------------


def test_the_console_script_and_module_run(root: Path, cli: Any) -> None:
    script = Path(sys.executable).with_name("pubsub")
    commands = [[sys.executable, "-m", "broker_core.cli"]]
    commands.insert(0, [str(script)] if script.exists() else [sys.executable, "-m", "broker_core"])
    env = {**os.environ, "PUBSUB_ROOT": str(root)}
    created = subprocess.run(
        [*commands[0], "topics", "create", "t", "--partitions", "2", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["partitions"] == 2
    failed = subprocess.run(
        [*commands[1], "topics", "create", "t"], capture_output=True, text=True, env=env, timeout=120
    )
    assert failed.returncode == 1 and failed.stdout == ""
    assert failed.stderr.startswith("pubsub: error: ") and failed.stderr.count("\n") == 1
    usage = subprocess.run(
        [sys.executable, "-m", "broker_core", "frobnicate"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert usage.returncode == 2 and "invalid choice" in usage.stderr and "Traceback" not in usage.stderr


def test_a_topic_typo_names_the_close_existing_topics_and_never_suggests_creating_it(cli: Any, root: Path) -> None:
    ok(cli, "topics", "create", "orders")
    ok(cli, "topics", "create", "payments")
    err = fails(cli, root, 1, "topics", "stats", "ordrs", match="does not exist")
    assert "did you mean 'persistent://public/default/orders'?" in err and "topics create" not in err
    err = fails(cli, root, 1, "subscriptions", "list", "ordrs", match="did you mean")
    err = fails(cli, root, 1, "topics", "stats", "zzzz", match="does not exist")  # nothing close: how to look
    assert "pubsub topics list public/default" in err


def test_schemas_get_of_a_missing_topic_says_the_topic_does_not_exist(cli: Any, root: Path) -> None:
    ok(cli, "topics", "create", "orders")
    for extra in ((), ("--version", "1"), ("--all",)):
        err = fails(cli, root, 1, "schemas", "get", "ordrs", *extra, match="topic persistent://public/default/ordrs "
                    "does not exist")
        assert "did you mean 'persistent://public/default/orders'?" in err
    fails(cli, root, 1, "schemas", "get", "orders", match="has no schema")  # the topic exists: it has no schema
