"""``conf/grafana/pubsub-dashboard.json`` is a dashboard Grafana can import, and every metric its queries
name is one the exporter exports (a renamed metric would leave a panel silently empty)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from broker_core.metrics.collector import exported_names

DASHBOARD = Path(__file__).resolve().parents[2] / "conf" / "grafana" / "pubsub-dashboard.json"
_METRIC = re.compile(r"\b(pulsar_[a-z_]+|pubsub_[a-z_]+)\b")


def test_the_dashboard_is_grafana_json_whose_queries_name_exported_metrics() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dash["templating"]["list"] if v["type"] == "query"]
    named = {m for e in exprs for m in _METRIC.findall(e)}
    assert named - exported_names() == set()
    # the backlog and lag the issue asks to see are on it
    assert {"pulsar_subscription_back_log", "pulsar_storage_backlog_age_seconds",
            "pubsub_spark_max_offsets_behind_latest"} <= named
    for panel in dash["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24
