"""`nexus check`'s run-wide checks: the report complete, every configured failure and hostile mode seen, and
every notification created settled (delivered or dead, removed orders' counted from their markers)."""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any


def check_run(report: Mapping[str, Any]) -> list[tuple[str, bool, str]]:
    """Run-wide checks: complete report; every failure kind and hostile mode with rate > 0 happened."""
    config, plans = report["config"], report["plans"]
    out: list[tuple[str, bool, str]] = []
    complete = bool(report.get("complete")) and all(p["finished"] for p in plans)
    out.append(("report", complete, f"{len(plans)}/{config['orders']} plans, error: {report.get('error')}"))
    # A plan of another process than the order names the simulated failure it took (`failure`).
    outcomes = collections.Counter(p.get("failure") or p["outcome"] for p in plans)
    for kind, rate_key in (
        ("inventory_failed", "inventory_failure_rate"),
        ("payment_rejected", "payment_rejection_rate"),
    ):
        if config[rate_key] > 0:
            out.append((kind, outcomes[kind] > 0, f"rate {config[rate_key]:g}: {outcomes[kind]} plans"))
    modes = collections.Counter(m for p in plans for m in p["hostile"])
    for mode, rate in config["hostile"].items():
        if rate > 0:
            out.append((mode, modes[mode] > 0, f"rate {rate:g}: {modes[mode]} plans"))
    return out


def notifications_settled(created: int, deliveries: list[dict[str, Any]]) -> tuple[str, bool, str]:
    """Every notification created has its deliveries, and each of them is delivered or dead."""
    states = collections.Counter(d["state"] for d in deliveries)
    settled = states["delivered"] + states["dead"] + states["pending"]
    return (
        "notifications",
        settled == len(deliveries) and len(deliveries) >= created > 0 and not states["pending"],
        f"{created} created, {len(deliveries)} deliveries: {states['delivered']} delivered, "
        f"{states['dead']} dead, {states['pending']} pending",
    )
