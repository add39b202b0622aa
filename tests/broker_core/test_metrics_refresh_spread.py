"""Each topic's subscriptions are re-listed (and its cached versions checked) once per
``subscription_refresh_s``, at a point of that interval its name picks: the refreshes of topics first
seen by one scrape spread over the scrapes that follow instead of all landing on one (D195)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker_core import BrokerConfig, Client
from broker_core.metrics import sampling
from broker_core.metrics.sampling import Sampler

TOPICS = [f"persistent://public/default/t{i}" for i in range(24)]


def test_subscription_refreshes_spread_over_the_interval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client = Client(str(tmp_path), broker_config=BrokerConfig(fsync_enabled=False))
    try:
        for topic in TOPICS:
            client.subscribe(topic, "s").close()
            producer = client.create_producer(topic)
            producer.send(b"x")
            producer.close()
        now = [1000.0]
        monkeypatch.setattr(sampling, "_now_s", lambda: now[0])
        listed: list[str] = []
        real = sampling.list_subscriptions

        def counting(io: Any, path: str) -> list[str]:
            listed.append(path)
            return real(io, path)

        monkeypatch.setattr(sampling, "list_subscriptions", counting)
        sampler = Sampler(client._broker, inventory_refresh_s=60.0, subscription_refresh_s=300.0)
        first = sampler.sample_all(now_ms=1)
        assert len(first) == len(TOPICS) and all(s.subscriptions.keys() == {"s"} for s in first)
        assert len(listed) == len(TOPICS)  # every topic listed once when first seen

        per_scrape = []
        for _ in range(5):  # five scrapes a minute apart: one refresh interval
            now[0] += 60.0
            listed.clear()
            sampler.sample_all(now_ms=1)
            per_scrape.append(len(listed))
        assert sum(per_scrape) == len(TOPICS)  # each topic refreshed exactly once in the interval ...
        assert max(per_scrape) < len(TOPICS) // 2  # ... and not all at one scrape

        listed.clear()
        now[0] += 1.0
        sampler.sample_all(now_ms=1)
        assert listed == []  # no refresh is due a second later
    finally:
        client.close()


def test_the_cli_flag_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from broker_core.cli.app import main

    Client(str(tmp_path), broker_config=BrokerConfig(fsync_enabled=False)).close()
    assert main(["--root", str(tmp_path), "metrics", "dump", "--subscription-refresh", "soon"]) == 2
    assert "soon" in capsys.readouterr().err
