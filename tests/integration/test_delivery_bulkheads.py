"""Bulkheads on real PostgreSQL and real HTTP: one tenant's hanging endpoints never hold another's deliveries."""

from __future__ import annotations

import asyncio
import re

from nexus.core.decide.items import Incoming
from nexus.delivery.subscriptions import add_subscription
from nexus.gateway import Gateway
from nexus.ingress.tenants import bind
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.sink import start_sink
from tests.factories import plan_json
from tests.helpers import wait_until
from tests.integration.test_delivery import SECRET, dispatching


class HangingReceiver:
    """A real HTTP server that reads every request and never answers it; counts the requests it holds."""

    def __init__(self) -> None:
        self.open = 0
        self.most = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?i)content-length: *(\d+)", head)
            await reader.readexactly(int(length.group(1)) if length else 0)
            self.open += 1
            self.most = max(self.most, self.open)
            await reader.read()  # until the dispatcher gives up and closes the connection
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


async def _submit(db: Database, tenant: str, orders: int) -> None:
    items = [bind(Incoming.parse(e), tenant) for i in range(orders) for e in plan_json(f"{tenant}-{i}", f"p-{i}", 3)]
    await Gateway(db).submit([i for i in items if i is not None])


async def _pending(db: Database, tenant: str) -> int:
    return int(
        await db.fetchval(
            "SELECT count(*) FROM deliveries d JOIN subscriptions s ON s.id = d.subscription_id"
            " WHERE s.tenant_id = $1 AND d.state = 'pending'",
            tenant,
        )
    )


async def test_twenty_hanging_subscriptions_of_one_tenant_do_not_hold_anothers_deliveries(
    db: Database, settings: Settings
) -> None:
    """While 20 subscriptions of acme hang, acme holds at most 8 of the 16 workers and every one of beta's
    notifications is delivered; none of acme's is."""
    hanging = HangingReceiver()
    base = await hanging.start()
    healthy = await start_sink(secret=SECRET)
    try:
        for i in range(20):
            await add_subscription(db, f"acme-{i:02d}", f"{base}/hook/{i}", SECRET, tenant_id="acme")
        await add_subscription(db, "beta", healthy.url + "/hook", SECRET, tenant_id="beta")
        await _submit(db, "acme", 10)
        await _submit(db, "beta", 10)
        # Requests hang for longer than the test: acme's slots are never given back while it runs.
        slow = settings.replace(webhook_workers=16, webhook_timeout_s=60.0, lease_s=240.0)
        async with dispatching(db, slow):
            await wait_until(lambda: _beta_done(db), 30, "every beta notification delivered")
            await wait_until(lambda: _eq(hanging.open, 8), 10, "acme's requests in flight")
            held = hanging.open
        assert await _pending(db, "acme") == 20 * 10 * 3
        assert [r["status"] for r in healthy.sink.records] == [200] * 30
    finally:
        hanging.close()
        await healthy.aclose()
    assert held == hanging.most == 8  # the tenant's bulkhead: half of the 16 workers, never more


async def test_subscription_and_tenant_caps_are_settings(db: Database, settings: Settings) -> None:
    """With NEXUS_DELIVERY_MAX_INFLIGHT_PER_SUBSCRIPTION=3 and ..._PER_TENANT=5, two hanging subscriptions of
    acme (beside beta's) hold 3 + 2 slots: per subscription, then per tenant."""
    hanging = HangingReceiver()
    base = await hanging.start()
    try:
        for i in range(2):
            await add_subscription(db, f"acme-{i}", f"{base}/hook/{i}", SECRET, tenant_id="acme")
        await add_subscription(db, "beta", f"{base}/beta", SECRET, tenant_id="beta")
        await _submit(db, "acme", 10)
        capped = settings.replace(
            webhook_workers=16,
            webhook_timeout_s=60.0,
            lease_s=240.0,
            delivery_max_inflight_per_subscription=3,
            delivery_max_inflight_per_tenant=5,
        )
        async with dispatching(db, capped):
            await wait_until(lambda: _eq(hanging.open, 5), 10, "acme's requests in flight")
            await asyncio.sleep(0.5)  # a few more claim rounds: nothing more may be taken
            held = hanging.open
    finally:
        hanging.close()
    assert held == hanging.most == 5


async def test_a_lone_tenant_uses_every_worker(db: Database, settings: Settings) -> None:
    """With no other tenant's subscription there is nobody to protect: acme's hanging subscriptions hold all
    16 workers (a single-tenant gateway delivers as fast as without bulkheads)."""
    hanging = HangingReceiver()
    base = await hanging.start()
    try:
        for i in range(2):
            await add_subscription(db, f"acme-{i}", f"{base}/hook/{i}", SECRET, tenant_id="acme")
        await _submit(db, "acme", 10)
        async with dispatching(db, settings.replace(webhook_workers=16, webhook_timeout_s=60.0, lease_s=240.0)):
            await wait_until(lambda: _eq(hanging.open, 16), 10, "acme's requests in flight")
    finally:
        hanging.close()
    assert hanging.most == 16


async def _beta_done(db: Database) -> bool:
    return await _pending(db, "beta") == 0


async def _eq(value: int, expected: int) -> bool:
    return value == expected
