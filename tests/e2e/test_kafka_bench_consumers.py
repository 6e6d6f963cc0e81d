"""`nexus bench --suite kafka --kafka-consumers N`: the group made of gateway processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_kafka_suite_runs_with_one_and_two_gateway_processes(tmp_path: Path) -> None:
    """Both group sizes apply every event (the bench asserts it) and report throughput and CPU per 1,000 events."""
    out = tmp_path / "bench.json"
    env = {k: v for k, v in os.environ.items() if k != "NEXUS_DATABASE_URL"}
    done = subprocess.run(
        [sys.executable, "-m", "nexus_cli", "bench", "--suite", "kafka", "--plans", "20", "--concurrency", "2",
         "--kafka-consumers", "1", "--kafka-consumers", "2", "--json", str(out), "--plot", ""],
        capture_output=True, text=True, timeout=240, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    body = json.loads(out.read_text())
    assert body["skipped"] == {}, body["skipped"]
    rows = body["results"]
    assert [r["scenario"].endswith("2 gateway processes") for r in rows] == [False, True]
    for r in rows:
        assert r["suite"] == "kafka" and r["concurrency"] == 2 and r["events"] == 400
        assert r["events_per_s"] > 0 and r["p99_ms"] > 0
        assert r["cpu_s_per_1000"]["gateway"] > 0 and r["cpu_s_per_1000"]["producer"] > 0
