"""``pubsub metrics``: the exporter serves Pulsar's metric names and labels with values that follow from
commits and cursors (scraped over HTTP and parsed with prometheus_client's own parser), on a folder and
on S3; an unchanged topic costs one GET per log and cursor on a warm scrape; bad ports are typed errors."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from metrics_helpers import families
from moto_s3 import MotoS3, Root

from broker_core import BrokerConfig, Client, InitialPosition
from broker_core.cli import main
from broker_core.clock import ManualClock
from broker_core.errors import InvalidConfiguration
from broker_core.metrics.collector import PulsarCollector, exported_names
from broker_core.metrics.exporter import exposition, serve
from broker_core.metrics.sampling import Sampler

T = "persistent://public/default/t"
P = "persistent://public/default/p"


@pytest.fixture
def client(any_root: Root) -> Iterator[Client]:
    c = Client(any_root.url, storage_options=any_root.storage_options, broker_config=BrokerConfig(fsync_enabled=False))
    yield c
    c.close()


def fill(client: Client) -> None:
    """t: 10 messages, subscription s acked 3 of them; p: 2 partitions, 4 messages, subscription q acked none."""
    consumer = client.subscribe(T, "s", initial_position=InitialPosition.Earliest)
    producer = client.create_producer(T, batching_enabled=False)
    for i in range(10):
        producer.send(f"m{i}".encode())
    for _ in range(3):
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    consumer.close()
    client._broker.admin.create_partitioned_topic(P, 2)
    client.subscribe(P, "q", initial_position=InitialPosition.Earliest).close()
    producer = client.create_producer(P, batching_enabled=False)
    for i in range(4):
        producer.send(f"p{i}".encode(), partition_key=str(i))
    producer.flush()




def labels(topic: str, subscription: str | None = None) -> tuple[tuple[str, str], ...]:
    found = {"cluster": "standalone", "namespace": "public/default", "topic": topic}
    if subscription is not None:
        found["subscription"] = subscription
    return tuple(sorted(found.items()))


def test_the_served_metrics_have_pulsars_names_labels_and_values(client: Client, any_root: Root) -> None:
    fill(client)
    collector = PulsarCollector(Sampler(client._broker))
    running = serve(collector, port=0)
    try:
        with urllib.request.urlopen(running.url, timeout=30) as response:
            text = response.read().decode()
    finally:
        running.close()
    got = families(text)
    assert {"pulsar_rate_in", "pulsar_rate_out", "pulsar_throughput_in", "pulsar_throughput_out",
            "pulsar_in_messages_total", "pulsar_storage_size", "pulsar_storage_backlog_size",
            "pulsar_storage_backlog_age_seconds", "pulsar_subscription_back_log",
            "pulsar_subscription_unacked_messages", "pulsar_subscription_msg_rate_out",
            "pulsar_subscription_msg_rate_redeliver"} <= set(got)
    assert set(got) <= exported_names()
    t = labels(T)
    assert got["pulsar_in_messages_total"][t] == 10
    assert got["pulsar_rate_in"][t] == pytest.approx(10 / 60)
    assert got["pulsar_rate_out"][t] == pytest.approx(3 / 60)
    assert got["pulsar_subscription_msg_rate_out"][labels(T, "s")] == pytest.approx(3 / 60)
    assert got["pulsar_subscription_back_log"][labels(T, "s")] == 7
    assert got["pulsar_msg_backlog"][t] == 7
    assert 0 < got["pulsar_storage_backlog_size"][t] < got["pulsar_storage_size"][t]
    assert 0 <= got["pulsar_storage_backlog_age_seconds"][t] < 120
    parts = [f"{P}-partition-{i}" for i in range(2)]
    assert sum(got["pulsar_in_messages_total"][labels(p)] for p in parts) == 4
    assert sum(got["pulsar_subscription_back_log"][labels(p, "q")] for p in parts) == 4
    if any_root.is_s3:
        assert got["pubsub_metrics_scrape_storage_requests"][(("cluster", "standalone"), ("type", "GET"))] > 0


def test_a_warm_scrape_of_unchanged_topics_reads_one_version_per_log_and_cursor(moto_s3: MotoS3) -> None:
    """Requests are counted on object stores, where they are billed."""
    client = Client(moto_s3.fresh_root(), storage_options=moto_s3.storage_options,
                    broker_config=BrokerConfig(fsync_enabled=False))
    fill(client)
    collector = PulsarCollector(Sampler(client._broker))
    exposition(collector)  # cold: lists the inventory, opens every log and cursor
    exposition(collector)
    # t (1 subscription) and p's two partitions (1 subscription each): 3 logs + 3 cursors, one GET each
    assert collector.last_requests.get("GET") == 6
    assert sum(collector.last_requests.values()) - collector.last_requests.get("HEAD", 0) == 6
    # new messages: the log is read again, and the backlog's numbers follow
    client.create_producer(T).send(b"more")
    got = families(exposition(collector))
    client.close()
    assert got["pulsar_in_messages_total"][labels(T)] == 11
    assert got["pulsar_subscription_back_log"][labels(T, "s")] == 8


def test_bad_and_busy_ports_are_typed_errors(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    client = Client(str(tmp_path / "root"))
    try:
        collector = PulsarCollector(Sampler(client._broker))
        with pytest.raises(InvalidConfiguration, match="70000"):
            serve(collector, port=70000)
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            with pytest.raises(InvalidConfiguration, match=f"127.0.0.1:{port}"):
                serve(collector, port=port)
    finally:
        client.close()
    assert main(["--root", str(tmp_path / "root"), "metrics", "serve", "--port", "99999"]) == 2


def test_metrics_dump_prints_one_scrape_and_cluster_comes_from_the_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "root"
    (root / "_pubsub").mkdir(parents=True)
    (root / "_pubsub" / "broker.toml").write_text('clusterName = "east"\n')
    client = Client(str(root))
    client.create_producer(T).send(b"x")
    client.close()
    assert main(["--root", str(root), "metrics", "dump"]) == 0
    got = families(capsys.readouterr().out)
    assert got["pulsar_in_messages_total"][(("cluster", "east"), ("namespace", "public/default"), ("topic", T))] == 1


def test_metrics_serve_runs_until_interrupted(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "broker_core.cli", "--root", str(tmp_path / "root"),
                             "metrics", "serve", "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.split(" on ")[1].split()[0]
        with urllib.request.urlopen(url, timeout=30) as response:
            assert "pubsub_metrics_scrape_duration_seconds" in response.read().decode()
        proc.send_signal(2)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_served_text_and_prometheus_clients_own_formatting_agree(client: Client) -> None:
    """``render`` writes the text itself (for speed); a registry holding the collector formats the same samples."""
    from prometheus_client import generate_latest

    from broker_core.metrics.exporter import registry_for

    fill(client)
    collector = PulsarCollector(Sampler(client._broker), clock=ManualClock(time.time_ns() // 1_000_000))
    ours = families(collector.render())
    theirs = families(generate_latest(registry_for(collector)).decode())
    skip = {"pubsub_metrics_scrape_duration_seconds", "pubsub_metrics_scrape_storage_requests"}  # per scrape
    assert {k: v for k, v in ours.items() if k not in skip} == {k: v for k, v in theirs.items() if k not in skip}
    assert len(ours["pulsar_subscription_back_log"]) == 3


def test_without_prometheus_client_the_command_says_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "root").mkdir()
    for name in ("prometheus_client", "broker_core.metrics.collector", "broker_core.metrics.exporter"):
        monkeypatch.setitem(sys.modules, name, None)  # an import of any of them now fails
    assert main(["--root", str(tmp_path / "root"), "metrics", "dump"]) == 2
    err = capsys.readouterr().err
    assert "prometheus_client" in err and "spark-pubsub[metrics]" in err
