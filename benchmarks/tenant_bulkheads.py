"""Another tenant's webhook latency while one tenant's 20 subscriptions hang, with real processes over real HTTP.

On a fresh database: tenant `acme` has 20 subscriptions whose receiver reads every request and never
answers (a real HTTP server in this process); tenant `beta` has one subscription to a healthy `nexus sink`
process. acme's backlog (N plans) is applied first, then a `nexus serve --dispatcher-only` process starts
(default settings: 16 webhook workers, 10 s webhook timeout) and beta's plans are applied at a steady pace
for a while, then the run waits (up to `--drain-s`) for beta's last ones. Reported: beta's latency
(`delivered_at - outbox.created_at`, both PostgreSQL clocks) p50, p99 and max, beta's notifications
delivered by the end, and the most requests acme held at once.

Run it against the code on the path, e.g. ``PYTHONPATH=src`` (this branch) and ``PYTHONPATH=../main/src``
(before bulkheads): ``.venv/bin/python benchmarks/tenant_bulkheads.py [--seconds 20] [--acme-plans 40]``.
PostgreSQL: NEXUS_DATABASE_URL (an admin URL able to CREATE DATABASE), else an embedded pgserver.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from delivery import new_database, plan, start, stop  # benchmarks/ is the script's directory, first on sys.path

from nexus.core.decide.items import Incoming
from nexus.delivery.signing import generate_secret
from nexus.delivery.subscriptions import add_subscription
from nexus.gateway import Gateway
from nexus.ingress.tenants import bind
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.embedded import EmbeddedPostgres
from nexus_lab.procs import free_port, wait_http


class Hanging:
    """Reads each request, never answers; counts the requests held now and at most."""

    def __init__(self) -> None:
        self.open = 0
        self.most = 0
        self.first = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?i)content-length: *(\d+)", head)
            await reader.readexactly(int(length.group(1)) if length else 0)
            self.open += 1
            self.most = max(self.most, self.open)
            self.first.set()
            try:
                await reader.read()  # until the dispatcher times out and closes the connection
            finally:
                self.open -= 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def apply(gateway: Gateway, tenant: str, prefix: str, plans: int) -> None:
    items = [bind(Incoming.parse(e), tenant) for i in range(plans) for e in plan(f"{prefix}{i}")]
    await gateway.submit([i for i in items if i is not None])


async def run(
    admin_url: str, embedded: EmbeddedPostgres | None, seconds: float, acme_plans: int, drain_s: float
) -> dict[str, Any]:
    url = await new_database(admin_url, embedded)
    db = await Database(Settings(database_url=url, db_pool_size=4, allow_private_urls="127.0.0.0/8")).open()
    hanging = Hanging()
    server = await asyncio.start_server(hanging.handle, "127.0.0.1", 0)
    hang_url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    secret = generate_secret()
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    sink = start(["sink", "--port", str(port)], clean)
    env = {**clean, "NEXUS_DATABASE_URL": url, "NEXUS_LOG_LEVEL": "WARNING", "NEXUS_ALLOW_PRIVATE_URLS": "127.0.0.0/8"}
    gateway = Gateway(db)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        for i in range(20):
            await add_subscription(db, f"acme-{i:02d}", f"{hang_url}/hook/{i}", secret, tenant_id="acme")
        await add_subscription(db, "beta", f"http://127.0.0.1:{port}/hook", secret, tenant_id="beta")
        await apply(gateway, "acme", "a", acme_plans)
        dispatcher = start(["serve", "--dispatcher-only"], env)
        try:
            await hanging.first.wait()  # the dispatcher is up and acme's requests are hanging
            started = time.monotonic()
            tick = 0
            while time.monotonic() - started < seconds:
                await apply(gateway, "beta", f"b{tick}-", 1)
                tick += 1
                await asyncio.sleep(max(0.0, started + tick * 0.2 - time.monotonic()))
            applied_for = time.monotonic() - started
            drain_until = time.monotonic() + drain_s  # then every beta notification, however late
            pending = "SELECT count(*) FROM deliveries WHERE tenant_id = 'beta' AND state = 'pending'"
            while await db.fetchval(pending) and time.monotonic() < drain_until:  # noqa: ASYNC110 - another process
                await asyncio.sleep(0.2)
            row = await db.fetchrow(
                "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS p50,"
                " percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) AS p99, max(ms) AS max, count(ms) AS delivered,"
                " count(*) AS due FROM (SELECT extract(epoch FROM d.delivered_at - o.created_at) * 1000 AS ms"
                " FROM deliveries d JOIN outbox o ON o.id = d.outbox_id WHERE d.tenant_id = 'beta') AS x"
            )
            assert row is not None
        finally:
            stop(dispatcher)
        return {
            "beta_applied_s": round(applied_for, 1),
            "beta_p50_ms": round(float(row["p50"] or -1), 1),
            "beta_p99_ms": round(float(row["p99"] or -1), 1),
            "beta_max_ms": round(float(row["max"] or -1), 1),
            "beta_delivered": f"{row['delivered']}/{row['due']}",
            "acme_most_held": hanging.most,
        }
    finally:
        stop(sink)
        server.close()
        await db.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long beta's plans are applied (5/s)")
    parser.add_argument("--acme-plans", type=int, default=40)
    parser.add_argument("--drain-s", type=float, default=120.0, help="longest wait for beta's last deliveries")
    args = parser.parse_args()
    embedded = None
    admin_url = os.environ.get("NEXUS_DATABASE_URL")
    if not admin_url:
        embedded = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="nexus-bench-")), cleanup_mode="delete")
        admin_url = embedded.start()
    try:
        print(json.dumps(await run(admin_url, embedded, args.seconds, args.acme_plans, args.drain_s)), flush=True)
    finally:
        if embedded is not None:
            embedded.close()


if __name__ == "__main__":
    asyncio.run(main())
