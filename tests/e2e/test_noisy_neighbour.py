"""The noisy neighbour, short: tenant C's light load through a real `nexus serve` while tenant A runs each
worst legal pattern at its limits (every key's every wait, 1,000-envelope batches, a plan flood, a
rejected 1,000-item step, idle and half-open sockets). Only C's refusals are asserted: latency is the
benchmark's (benchmarks/noisy_neighbour.py, RESULTS.md)."""

from __future__ import annotations

import pytest

from nexus_lab.bench.noisy import PATTERNS, make_keys, run_phases, start_gateway

pytestmark = pytest.mark.slow


async def test_tenant_c_is_never_refused_while_tenant_a_runs_its_worst_legal_patterns(database_url: str) -> None:
    """Every phase C runs requests and none of them is refused (no 429, no 5xx, no transport error): on the
    code before fair shares, A's 1,120 long polls took the shared connection cap and C got 503 SERVER_BUSY."""
    a_keys, c_key = await make_keys(database_url)
    proc, base = start_gateway(database_url)
    try:
        rows = await run_phases(base, a_keys, c_key, PATTERNS, seconds=2.5, progress=lambda line: None)
    finally:
        proc.stop(15.0)
    assert [row["phase"] for row in rows] == ["baseline", *PATTERNS]
    assert all(row["requests"] > 0 for row in rows), rows
    assert [(row["phase"], row["refusals"]) for row in rows if row["refused"]] == []
