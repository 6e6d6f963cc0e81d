"""Saga load beside a scenario's agent: `fulfilment` plans whose effects the gateways' saga executors perform
against `nexus services`, judged by the saga checker once the run settled.

`postgres-failover` runs it (`Scenario.saga_plans`): the plans are submitted over HTTP (five steps at once, resent
until answered, as in the saga scenarios) while the agent produces to Kafka and the primary's machine is lost,
so effects are in flight when the standby is promoted. The checks: every saga settled (completed, or aborted
and compensated), the saga invariants from PostgreSQL and the services' ledgers (no effect twice in effect,
compensations undo, in reverse order, nothing past the pivot undone), and each completed order's effects
standing once in every ledger.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import time
from pathlib import Path

import httpx

from nexus.store.database import Database
from nexus_lab.agent.reactive import step_envelope
from nexus_lab.chaos.harness import clean_env
from nexus_lab.chaos.sagas import SAGA_ENV, standing_effects, submit_batch
from nexus_lab.procs import NEXUS_CMD, Proc, free_port, wait_ready
from nexus_lab.saga_checker import check_sagas_live
from nexus_lab.services import SERVICES

CHECKS = ("sagas settled", "saga invariants", "completed orders' effects")

_UNSETTLED = """
SELECT count(*) FROM orders AS o LEFT JOIN sagas AS s ON s.tenant_id = o.tenant_id AND s.order_id = o.order_id
WHERE o.order_id = ANY($1::text[])
  AND NOT ((o.status = 'completed' AND s.status = 'COMPLETED') OR (o.status = 'aborted' AND s.status = 'COMPENSATED'))
"""
_COMPLETED = "SELECT order_id FROM orders WHERE order_id = ANY($1::text[]) AND status = 'completed'"


class SagaLoad:
    """`nexus services` and `plans` fulfilment plans, their orders named `saga-<i>`."""

    def __init__(self, directory: Path, plans: int, seed: str) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.plans = plans
        # every answer 250 ms late and the plans paced: sagas are open over the first seconds, when faults strike
        command = [*NEXUS_CMD, "services", "--port", str(port), "--seed", seed, "--latency-ms", "250"]
        self.proc = Proc("services", command, clean_env(), directory / "services.log")
        self.orders: list[str] = []
        self.resent: collections.Counter[str] = collections.Counter()
        self.repeated = 0
        """Effect calls the services saw more than once with one key (a call whose outcome was not written)."""

    def env(self) -> dict[str, str]:
        """The settings the gateways' saga executors need: short intervals and the services' URLs."""
        return {**SAGA_ENV, **{f"NEXUS_SERVICE_{name.upper()}_URL": f"{self.url}/{name}" for name in SERVICES}}

    async def start(self) -> None:
        """Start the services; a fifth of the charges is declined for good (those sagas compensate)."""
        self.proc.start()
        await wait_ready(self.proc, self.url + "/health")
        async with httpx.AsyncClient(timeout=10) as client:
            answer = await client.post(self.url + "/_faults", json={"service": "payment", "permanent_fail_rate": 0.2})
            answer.raise_for_status()

    async def submit(self, gateway_urls: list[str], pace_s: float = 0.5) -> None:
        """Every plan's five steps in one batch, a plan every `pace_s`, spread over the gateways."""
        key = os.environ.get("NEXUS_API_KEY", "")

        async def send(i: int, client: httpx.AsyncClient) -> None:
            batch = [
                json.loads(step_envelope(f"saga-{i}", f"saga-plan-{i}", seq).model_dump_json()) for seq in range(1, 6)
            ]
            await asyncio.sleep(i * pace_s)
            await submit_batch(client, gateway_urls[i % len(gateway_urls)], batch, self.resent)
            self.orders.append(batch[0]["order_id"])

        async with httpx.AsyncClient(timeout=10, headers={"authorization": f"Bearer {key}"}) as client:
            await asyncio.gather(*(send(i, client) for i in range(self.plans)))

    async def check(self, db: Database, timeout_s: float) -> list[str]:
        """What each check of `CHECKS` found broken, as `check: line`, once the sagas settled (or the timeout)."""
        deadline = time.monotonic() + timeout_s
        left = int(await db.fetchval(_UNSETTLED, self.orders))
        while left and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            left = int(await db.fetchval(_UNSETTLED, self.orders))
        broke = [f"sagas settled: {left} of {len(self.orders)} never settled"] if left else []
        broke += [f"saga invariants: {line}" for line in await check_sagas_live(db, self.url)]
        completed = {r["order_id"] for r in await db.fetch(_COMPLETED, self.orders)}
        async with httpx.AsyncClient(timeout=10) as client:
            ledgers = (await client.get(self.url + "/ledgers")).json()
        self.repeated = sum(n > 1 for service in SERVICES for n in ledgers[service]["attempts"].values())
        broke += [f"completed orders' effects: {line}" for line in standing_effects(ledgers, completed)]
        return broke

    def stop(self) -> None:
        self.proc.stop()
