"""The database's size as an operator reads it: `nexus db stats` and the per-table gauges of /metrics."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from nexus.settings import Settings
from tests.conftest import api_headers, root_headers, settings_env
from tests.factories import plan_json
from tests.helpers import nexus_command


@pytest.fixture
async def api(start_gateway) -> AsyncIterator[httpx.AsyncClient]:  # type: ignore[no-untyped-def]
    _, base = start_gateway("--no-dispatcher")
    async with httpx.AsyncClient(base_url=base, timeout=10, headers=api_headers()) as client:
        yield client


async def _analysed(api: httpx.AsyncClient, settings: Settings) -> None:
    """Five orders applied, then ANALYZE: the catalog's estimate is what the stats read, not a count."""
    for n in range(5):
        response = await api.post("/v1/events", json={"events": plan_json(f"o-stats-{n}", f"p-stats-{n}", 2)})
        assert response.status_code == 200
    import asyncpg

    conn = await asyncpg.connect(settings.database_url)
    try:
        await conn.execute("ANALYZE orders")
    finally:
        await conn.close()


async def test_metrics_show_rows_and_bytes_per_table(api: httpx.AsyncClient, settings: Settings) -> None:
    """After five orders, /metrics reads five rows of `orders` from the catalog, and bytes for every table."""
    await _analysed(api, settings)
    text = (await api.get("/metrics", headers=root_headers())).text
    assert 'nexus_table_rows{table="orders"} 5.0' in text
    sizes = [line for line in text.splitlines() if line.startswith("nexus_table_bytes{")]
    assert any('table="decision_log"' in line for line in sizes)
    assert all(float(line.rsplit(" ", 1)[1]) > 0 for line in sizes)


@pytest.mark.processes
async def test_nexus_db_stats_prints_every_table(api: httpx.AsyncClient, settings: Settings) -> None:
    """`nexus db stats` prints each table's approximate rows and bytes as JSON."""
    await _analysed(api, settings)
    stats = json.loads(nexus_command("db", "stats", env=settings_env(settings)))
    tables = {t["table"]: t for t in stats["tables"]}
    assert tables["orders"]["approx_rows"] == 5
    assert {"orders", "outbox", "decision_log", "dead_letters"} <= set(tables)
    assert stats["replication"] == []
    assert stats["retention"]["retention_s"] == settings.retention_s
    assert stats["retention"]["oldest_finished_s"] == 0  # two steps of five: no order has finished
