"""The shipped Grafana dashboard only queries metrics the gateway exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from nexus import metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana-dashboard.json"


def test_every_dashboard_query_names_an_exported_metric() -> None:
    """Each nexus_* series a panel queries is registered (histograms via their _bucket series)."""
    exported = {m.name for m in metrics.REGISTRY.collect()}
    exported |= {f"{name}_total" for name in exported}
    panels = json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"]
    used = {n for p in panels for t in p["targets"] for n in re.findall(r"nexus_[a-z_]+", t["expr"])}
    unknown = {n for n in used if n.removesuffix("_bucket") not in exported}
    assert used and unknown == set()
