"""One delivery.py run_one (16 workers) printing rate and CPU per 1,000 as JSON.

    one_delivery.py N [--idle-tenant]

With --idle-tenant, the subscriber is tenant `default`'s and tenant `beta` has an idle subscription: the
subscriber is held to its tenant's bulkhead (8 of 16 workers)."""

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
import delivery

from nexus.delivery import subscriptions
from nexus.delivery.signing import generate_secret
from nexus.store.embedded import EmbeddedPostgres
from nexus_lab.procs import free_port, wait_http

_add = subscriptions.add_subscription


async def add_two(db, name, url, secret, **kw):
    await _add(db, "beta-idle", url.replace("/hook", "/idle"), secret, tenant_id="beta")
    return await _add(db, name, url, secret, tenant_id="default")


async def main():
    embedded = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="nexus-bench-")), cleanup_mode="delete")
    admin = embedded.start()
    port = free_port()
    sink = delivery.start(
        ["sink", "--port", str(port)], {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        r = await delivery.run_one(
            admin, embedded, 16, int(sys.argv[1]), f"http://127.0.0.1:{port}", generate_secret(), 1.0, 1, [sink.pid]
        )
        print(json.dumps({"rate": round(r["rate"]), "cpu": r["cpu_s_per_1000"], "p50": r["p50"]}))
    finally:
        delivery.stop(sink)
        embedded.close()


if "--idle-tenant" in sys.argv:
    delivery.add_subscription = add_two
asyncio.run(main())
