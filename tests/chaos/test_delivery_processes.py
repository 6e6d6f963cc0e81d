"""Webhook delivery with real `nexus serve` processes: a dispatcher SIGKILLed mid-delivery, two at once.

The sink runs in the test's event loop (real HTTP on loopback) so the test can watch requests arrive;
the dispatchers are separate processes sharing the test's PostgreSQL database.
"""

from __future__ import annotations

import time
from collections import Counter

import httpx

from nexus.delivery.subscriptions import ensure_default_subscription
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.procs import wait_ready
from nexus_lab.sink import Faults, start_sink
from tests.conftest import api_headers
from tests.factories import plan_json
from tests.helpers import wait_until
from tests.integration.test_delivery import (
    SECRET,
    accepted_by_key,
    assert_accounting,
    assert_in_position_order,
    settled,
    submit_plans,
)


async def test_killed_dispatcher_is_replaced_after_its_lease(db: Database, settings: Settings, start_gateway) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL a dispatcher while its requests are in flight: once the lease expires another instance
    resends exactly those notifications (same Idempotency-Key, next attempt), and nothing else is
    doubled or lost."""
    sink = await start_sink(Faults(latency_ms=800), secret=SECRET)
    try:
        s = settings.replace(webhook_url=sink.url + "/hook", webhook_secret=SECRET, webhook_workers=4)
        await ensure_default_subscription(db, s)
        await submit_plans(db, 3)
        first, _ = start_gateway("--dispatcher-only", settings_=s)
        await wait_until(lambda: _true(sink.sink.counts["received"] >= 3), 30, "three requests in flight")
        killed_at = time.time()
        first.kill()
        in_flight = sink.sink.in_flight()
        assert not sink.sink.records  # killed before any answer
        # the in-flight requests are answered to a dead client
        await wait_until(lambda: _true(not sink.sink.in_flight()), 10, "the sink to answer the dead dispatcher")
        start_gateway("--dispatcher-only", settings_=s)
        await wait_until(lambda: settled(db), 60, "all delivered by the second dispatcher")
        records = list(sink.sink.records)
    finally:
        await sink.aclose()
    accepted = accepted_by_key(records)
    assert len(accepted) == 15
    doubled = {k for k, v in accepted.items() if len(v) > 1}
    assert doubled == in_flight and len(doubled) == 3
    for key in doubled:
        first_try, resend = sorted(accepted[key], key=lambda r: r["started"])
        assert (first_try["attempt"], resend["attempt"]) == (1, 2)
        assert resend["duplicate"] and resend["started"] - killed_at >= s.lease_s - 1.0
    assert all(len(v) == 1 for k, v in accepted.items() if k not in doubled)
    assert_in_position_order(records)
    await assert_accounting(db)


async def _true(value: bool) -> bool:
    return value


async def test_two_dispatchers_never_send_one_notification_concurrently(
    db: Database,
    settings: Settings,
    start_gateway,  # type: ignore[no-untyped-def]
) -> None:
    """Two dispatcher processes share the work: no notification is in flight twice at once, none is sent
    twice, and each order's notifications arrive in position order (100 plans posted over HTTP)."""
    sink = await start_sink(Faults(seed=3, latency_ms=5, fail_rate=0.1), secret=SECRET)
    try:
        s = settings.replace(webhook_url=sink.url + "/hook", webhook_secret=SECRET, webhook_workers=8)
        await ensure_default_subscription(db, s)
        _, base = start_gateway(settings_=s)
        second, _ = start_gateway("--dispatcher-only", settings_=s)
        # Running before the first notification: one dispatcher now drains 500 before a late one starts.
        await wait_ready(second, None)
        async with httpx.AsyncClient(base_url=base, timeout=30, headers=api_headers()) as client:
            for batch in range(4):
                events = [e for i in range(25) for e in plan_json(f"p{batch}-{i}", f"plan-{batch}-{i}")]
                answer = await client.post("/v1/events", json={"events": events})
                assert answer.status_code == 200
                assert {r["decision"] for r in answer.json()["results"]} == {"APPLY"}
        await wait_until(lambda: settled(db), 60, "all delivered")
        records = list(sink.sink.records)
        stats = sink.sink.stats()
    finally:
        await sink.aclose()
    accepted = accepted_by_key(records)
    assert len(accepted) == 500 and all(len(v) == 1 for v in accepted.values())
    assert stats["concurrent"] == 0 and stats["duplicates"] == 0 and stats["order_violations"] == 0
    senders = Counter(r["user_agent"] for r in records)
    assert len(senders) == 2, senders  # both instances took part
    assert_in_position_order(records)
    await assert_accounting(db)
