"""The 2-minute `nexus soak`: the whole stack (HTTP and Kafka ingress, dispatchers, sagas) through one full
cycle of every chaos fault, judged by the checker and the saga invariants, with its measurements written."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import psutil
import pytest

from nexus_lab.procs import NEXUS_CMD, REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.kafka]

FAULTS = ("gateway SIGKILLed", "dispatcher SIGKILLed", "PostgreSQL stopped", "Kafka broker restarted",
          "receiver down", "service down")  # fmt: skip


def _listener(port: int) -> int | None:
    """The pid of the process listening on TCP `port`, if one is."""
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            return conn.pid
    return None


@pytest.mark.timeout(900)
def test_two_minute_soak_passes_with_every_fault_struck(tmp_path: Path) -> None:
    """`nexus soak --minutes 2` holds every invariant in every cycle, strikes every fault of the cycle
    (gateway, dispatcher and executor kills, PostgreSQL and broker restarts, receiver and service outages),
    and writes the per-minute RSS, per-cycle p99, CPU and table sizes with their plot. Its p99 drift
    criterion is written but not asserted here: two 1-minute cycles on a shared CI machine measure the
    machine's load, and timing belongs to benchmarks (`make soak`'s 30 minutes judges it). It runs on a broker
    of its own, restarts only that one and stops it at the end: the shared broker keeps its process."""
    env = {k: v for k, v in os.environ.items() if k != "NEXUS_DATABASE_URL"}
    shared_port = int(env.get("NEXUS_KAFKA_BOOTSTRAP", "127.0.0.1:9092").split(",")[0].rsplit(":", 1)[1])
    shared_pid = _listener(shared_port)
    assert shared_pid is not None, f"no shared broker on port {shared_port}"
    done = subprocess.run(
        [*NEXUS_CMD, "soak", "--minutes", "2", "--phase-seconds", "3", "--plans", "6", "--out", str(tmp_path)],
        env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=880, check=False,
    )  # fmt: skip
    output = done.stdout[-4000:] + done.stderr[-2000:]
    own = re.search(r"a Kafka broker of its own at 127\.0\.0\.1:(\d+)", done.stdout)
    assert own is not None and int(own[1]) != shared_port, output
    assert _listener(int(own[1])) is None, "the soak's own broker still runs"
    assert _listener(shared_port) == shared_pid, "the shared broker was restarted"
    assert (tmp_path / "soak.json").exists(), output
    data = json.loads((tmp_path / "soak.json").read_text())
    assert data["cycles"], data
    for cycle in data["cycles"]:
        assert cycle["violations"] == [] and cycle["held"] == cycle["checked"] > 0, cycle
        assert all(cycle["faults"].get(fault, 0) >= 1 for fault in FAULTS), cycle["faults"]
        assert cycle["p99_ms"] > 0 and cycle["events"] > 0 and cycle["tables"]["saga_steps"] > 0, cycle
    assert {"gateway-0", "dispatcher-0", "postgres"} <= set(data["samples"][-1]["rss_mb"]), data["samples"]
    verdict = {v["criterion"]: v["held"] for v in data["verdict"]}
    timing = {c for c in verdict if c.startswith("p99 of the last cycle")}
    assert timing, verdict  # the drift criterion is measured and written
    assert all(held for c, held in verdict.items() if c not in timing), verdict
    assert done.returncode == (0 if all(verdict.values()) else 1), output  # exits 1 only for the p99 drift
    assert (tmp_path / "soak.png").stat().st_size > 0
