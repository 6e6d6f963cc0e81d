"""`nexus bench --quick` runs end to end on its own embedded PostgreSQL and writes its JSON and plot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nexus_lab.procs import free_port

pytestmark = pytest.mark.slow


def bench(*args: str, timeout: float = 90, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`nexus bench ARGS` on its own embedded PostgreSQL (the caller's database URL dropped) and a port of its own
    for the gateway it starts (two benches at once would share the default), `env` added."""
    base = {k: v for k, v in os.environ.items() if k != "NEXUS_DATABASE_URL"}
    return subprocess.run(
        [sys.executable, "-m", "nexus_cli", "bench", "--port", str(free_port()), *args],
        capture_output=True, text=True, timeout=timeout, env=base | (env or {}), check=False,
    )  # fmt: skip


def test_quick_submit_and_raw_write_rows_with_throughput(tmp_path: Path) -> None:
    """`nexus bench --quick --suite submit,raw` writes JSON rows with events_per_s > 0 and a PNG."""
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    done = bench("--quick", "--suite", "submit,raw", "--plans", "20", "--json", str(out), "--plot", str(png))
    assert done.returncode == 0, done.stdout + done.stderr
    body = json.loads(out.read_text())
    suites = {r["suite"] for r in body["results"]}
    assert suites == {"submit", "raw"}
    assert all(r["events_per_s"] > 0 for r in body["results"])
    assert body["ratios"][0]["submit/raw"] > 0
    assert png.stat().st_size > 10_000


def test_wrk_suite_reports_rate_cpu_and_the_floor(tmp_path: Path) -> None:
    """`nexus bench --suite wrk` (short) reports events/s, p50/p99, CPU per 1,000 events and pgbench's floor."""
    out = tmp_path / "wrk.json"
    done = bench(
        "--suite", "wrk", "--connections", "2", "--duration", "2", "--warmup", "1", "--json", str(out), "--plot", ""
    )
    assert done.returncode == 0, done.stdout + done.stderr
    body = json.loads(out.read_text())
    assert body["skipped"] == {}, body["skipped"]
    [row] = body["results"]
    assert row["suite"] == "wrk" and row["concurrency"] == 2 and row["errors"] == 0
    assert row["events_per_s"] > 0 and 0 < row["p50_ms"] <= row["p99_ms"]
    # Every request was an applied step: each connection sent its orders' steps in order.
    assert row["events"] <= row["applied"] <= row["events"] + 2
    assert row["cpu_s_per_1k_events"]["gateway"] > 0 and row["cpu_s_per_1k_events"]["postgres"] > 0
    assert row["floor"]["events_per_s"] > 0 and row["ratio_to_floor"] > 0
    assert "HTTP under wrk" in done.stdout and "x floor" in done.stdout


def test_wrk_keeps_each_orders_steps_in_order_through_the_rate_limit(tmp_path: Path) -> None:
    """Under the tenant's rate limit (set low here; the bench turns it off by default), a 429 leaves wrk's
    connection on the same step, sent again after Retry-After: every answer that is not a refusal is an
    applied step. (Advancing past a 429 sent the order's next step ahead of a gap: BUFFERed, never applied.)"""
    out = tmp_path / "wrk.json"
    done = bench(
        "--suite",
        "wrk",
        "--connections",
        "4",
        "--duration",
        "3",
        "--warmup",
        "0",
        "--json",
        str(out),
        "--plot",
        "",
        env={"NEXUS_RATE_LIMIT_TENANT": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = json.loads(out.read_text())["results"]
    # One token, then one a second, for the bench's key whatever its roles (a per-role limit was not enough: the
    # bench's key holds several roles, whose highest limit applies, and a loaded machine stayed under it).
    assert row["errors"] > 0
    assert row["events"] - row["errors"] <= row["applied"] <= row["events"] - row["errors"] + 4


def test_sagas_suite_compares_notify_and_poll_wakeups(tmp_path: Path) -> None:
    """`nexus bench --suite sagas` (short) runs sagas through an executor process woken by NOTIFY and by its
    poll, and reports sagas/s, the latency per effect over the bare call, and CPU per 1,000 effects."""
    out = tmp_path / "sagas.json"
    done = bench(
        "--suite", "sagas", "--sagas", "3", "--concurrency", "2", "--json", str(out), "--plot", "", timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    body = json.loads(out.read_text())
    assert body["skipped"] == {}, body["skipped"]
    assert sorted(r["mode"] for r in body["results"]) == ["notify", "poll"]
    for r in body["results"]:
        assert r["suite"] == "sagas" and r["concurrency"] == 2 and r["events"] == 3
        assert r["sagas_per_s"] > 0 and r["per_effect_ms"] > 0 and r["bare_call_ms"] > 0
        assert r["cpu_s_per_1k_effects"]["executor"] > 0
    assert "wake-up" in done.stdout
