"""`nexus bench --quick` runs end to end on its own embedded PostgreSQL and writes its JSON and plot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_quick_submit_and_raw_write_rows_with_throughput(tmp_path: Path) -> None:
    """`nexus bench --quick --suite submit,raw` writes JSON rows with events_per_s > 0 and a PNG."""
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    env = {k: v for k, v in os.environ.items() if k != "NEXUS_DATABASE_URL"}
    done = subprocess.run(
        [sys.executable, "-m", "nexus_cli", "bench", "--quick", "--suite", "submit,raw", "--plans", "20",
         "--json", str(out), "--plot", str(png)],
        capture_output=True, text=True, timeout=90, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    body = json.loads(out.read_text())
    suites = {r["suite"] for r in body["results"]}
    assert suites == {"submit", "raw"}
    assert all(r["events_per_s"] > 0 for r in body["results"])
    assert body["ratios"][0]["submit/raw"] > 0
    assert png.stat().st_size > 10_000
