"""The saga scenarios of `nexus chaos`: effects performed by executors while processes die and services fail.

Each scenario runs, on a fresh database of the session's PostgreSQL: `nexus services` (the inventory,
payment, shipping and invoice services with their ledgers), one `nexus serve --no-dispatcher` gateway that
only takes the agent's steps (`NEXUS_SAGA_EXECUTORS=0`), and `nexus serve --dispatcher-only` processes that
perform the effects (the executors, so they can be killed alone). The agent submits every `fulfilment`
plan's five steps at once (steps wait, BUFFER, behind the effects before them), resending the same batch
until it is answered; some charges are declined, so both seed paths run. A fault (`SagaFault`) strikes
meanwhile, and counts what it did. Then the run settles (every saga COMPLETED or COMPENSATED) and is
judged from PostgreSQL and the services' ledgers (`saga_checker`): every effect at most once in effect,
compensated sagas leave the ledgers as before, compensations in reverse order, nothing past the pivot
undone, every compensation has its forward call, a repeated call got the first answer; and each completed
order's four effects stand once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import hashlib
import json
import os
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.agent.reactive import step_envelope
from nexus_lab.chaos.harness import FAST_ENV, ChaosSession, clean_env
from nexus_lab.chaos.result import ScenarioResult
from nexus_lab.chaos.scenarios import SagaFault, Scenario
from nexus_lab.procs import NEXUS_CMD, Proc, free_port, wait_ready
from nexus_lab.saga_checker import check_sagas_live
from nexus_lab.services import SERVICES

CHECKS = ("sagas settled", "saga invariants", "completed orders' effects")

# Short intervals so a scenario settles in seconds; a scenario's `env` overrides them.
SAGA_ENV: dict[str, str] = {
    "NEXUS_SAGA_POLL_S": "1.0",
    "NEXUS_SAGA_LEASE_S": "3",
    "NEXUS_SAGA_CALL_TIMEOUT_S": "5",
    "NEXUS_SAGA_RETRY_BASE_MS": "20",
    "NEXUS_SAGA_RETRY_MAX_MS": "200",
    "NEXUS_SAGA_MAX_ATTEMPTS": "30",
    "NEXUS_SAGA_BREAKER_THRESHOLD": "3",
    "NEXUS_SAGA_BREAKER_COOLDOWN_S": "0.5",
    "NEXUS_LISTEN_RETRY_S": "0.5",
}

_UNSETTLED = """
SELECT o.order_id, o.status, s.status AS saga FROM orders AS o
LEFT JOIN sagas AS s ON s.tenant_id = o.tenant_id AND s.order_id = o.order_id
WHERE NOT ((o.status = 'completed' AND s.status = 'COMPLETED') OR (o.status = 'aborted' AND s.status = 'COMPENSATED'))
"""
_NOT_WRITTEN = "SELECT forward_key FROM saga_steps WHERE forward_key = ANY($1::text[]) AND status = 'RUNNING'"
_NOT_COMPENSATED = "SELECT count(*) FROM saga_steps WHERE forward_key = ANY($1::text[]) AND status <> 'COMPENSATED'"
_OPEN = "SELECT count(*) FROM sagas WHERE status IN ('PENDING', 'RUNNING', 'COMPENSATING')"
_REPEATED = "SELECT count(*) FROM saga_steps WHERE forward_key = ANY($1::text[]) AND status = 'COMPLETED'"
_SETTLED_BY_COMPENSATION = "SELECT count(*) FROM saga_steps WHERE uncertain AND status = 'COMPENSATED'"
_RETRIED_PAST = "SELECT count(*) FROM saga_steps WHERE {column} > $1"
# A saga that waits for an operator: it will not settle by itself, so nothing is gained by waiting for it.
_STUCK = ("ESCALATED", "FAILED")


@dataclasses.dataclass
class SagaRun:
    """One saga scenario's processes and what its fault counted."""

    dir: Path
    services_url: str
    db: Database
    gateway: Proc
    gateway_url: str
    executors: list[Proc]
    rng: random.Random
    say: Callable[[str], None]
    counts: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    watched: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    """Forward keys a kill caught in flight, per service: each must end with one entry, asked again."""
    started: float = dataclasses.field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    async def faults(self, client: httpx.AsyncClient, service: str, **values: Any) -> None:
        (await client.post(f"{self.services_url}/_faults", json={"service": service, **values})).raise_for_status()

    async def ledger(self, client: httpx.AsyncClient, service: str) -> dict[str, Any]:
        answer: dict[str, Any] = (await client.get(f"{self.services_url}/{service}/ledger")).json()
        return answer


async def _restart(proc: Proc, attempts: int = 10) -> None:
    for attempt in range(1, attempts + 1):
        proc.start()
        try:
            await wait_ready(proc, None)
        except RuntimeError:  # PostgreSQL may be down (another fault): start again, as a supervisor would
            if attempt == attempts:
                raise
            await asyncio.sleep(1.0)
        else:
            return


async def _until(condition: Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(httpx.HTTPError, OSError):
            value = await condition()
            if value:
                return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} never happened within {timeout_s:g}s")
        await asyncio.sleep(0.05)


# -- the faults ------------------------------------------------------------------------------------------------


async def _kill_mid_call(run: SagaRun, fault: SagaFault, client: httpx.AsyncClient) -> None:
    """Armed before the agent sent (`_arm`): the service records every charge at once and answers it
    `hang_ms` later; SIGKILL the executors as soon as a charge is in the ledger whose step is still
    RUNNING, let them restart: the call is repeated with the same key and the service answers the first
    charge."""

    async def in_flight() -> list[str]:
        keys = [e["key"] for e in (await run.ledger(client, fault.service))["entries"]]
        return [r["forward_key"] for r in await run.db.fetch(_NOT_WRITTEN, keys)] if keys else []

    keys = await _until(in_flight, "a charge recorded by the service but not by the saga")
    for proc in run.executors:
        proc.kill()
    caught = len(await run.db.fetch(_NOT_WRITTEN, keys))
    run.counts["executor SIGKILLed"] += len(run.executors)
    run.counts["killed between call and write"] += int(caught)
    run.say(f"SIGKILL executors at {run.elapsed():.1f}s with {caught} call(s) answered-but-unwritten")
    await run.faults(client, fault.service, hang_rate=0)
    for proc in run.executors:
        await _restart(proc)
    run.watched[fault.service] = keys


async def _arm(run: SagaRun, fault: SagaFault, client: httpx.AsyncClient) -> None:
    """What a fault sets up before the agent sends its first step, so that it strikes the first call it is
    aimed at, whatever the plan count (a fault timed from the start may find every saga already settled)."""
    if fault.kind == "kill-mid-call":
        await run.faults(client, fault.service, hang_rate=1, hang_ms=fault.hang_ms)
    elif fault.kind == "kill-mid-compensation":
        # every charge declined until the kill, so the first saga compensates; releases recorded at once,
        # answered late (forward calls in time)
        await run.faults(client, "payment", permanent_fail_rate=1.0)
        await run.faults(client, "inventory", hang_rate=1, hang_ms=fault.hang_ms, hang_forwards=False)
    elif fault.kind == "service-down":
        await run.faults(client, fault.service, down=True)
    elif fault.kind == "late-answer":
        await run.faults(client, fault.service, hang_rate=1, hang_ms=fault.hang_ms, hang_compensations=False)
    elif fault.kind == "post-pivot-outage":
        await run.faults(client, fault.service, down=True)
    elif fault.kind == "compensation-outage":
        await run.faults(client, fault.service, down_compensations=True)


async def _kill_mid_compensation(run: SagaRun, fault: SagaFault, client: httpx.AsyncClient) -> None:
    """Armed before the agent sent (`_arm`): SIGKILL the executors as soon as a release
    is recorded by the service but its step not yet written; then charges are declined at the scenario's
    rate again, releases answered in time, and the restarted executors repeat the release with its key."""

    async def releasing() -> list[str]:
        entries = (await run.ledger(client, "inventory"))["entries"]
        targets = [e["compensates"] for e in entries if e["kind"] in ("release", "void")]
        return targets if targets and await run.db.fetchval(_NOT_COMPENSATED, targets) else []

    targets = await _until(releasing, "a release recorded by the service but not by the saga", 45.0)
    for proc in run.executors:
        proc.kill()
    caught = await run.db.fetchval(_NOT_COMPENSATED, targets)
    run.counts["executor SIGKILLed"] += len(run.executors)
    run.counts["killed during compensation"] += int(caught)
    run.say(f"SIGKILL executors at {run.elapsed():.1f}s with {caught} compensation(s) unwritten")
    await run.faults(client, "inventory", hang_rate=0, hang_forwards=True)
    await run.faults(client, "payment", permanent_fail_rate=fault.decline_rate)
    for proc in run.executors:
        await _restart(proc)


async def _service_down(run: SagaRun, fault: SagaFault, client: httpx.AsyncClient) -> None:
    """Down from before the agent sent (`_arm`): the service answers 503 to everything for a while: its
    breaker opens (calls wait, uncounted), probes after the cooldown, closes once the service is back; the
    sagas complete."""
    outage = run.rng.uniform(*fault.window_s)
    run.counts["service down"] += 1
    run.say(f"{fault.service} down from the start for {outage:.1f}s")
    await asyncio.sleep(outage)
    await run.faults(client, fault.service, down=False)
    run.say(f"{fault.service} back at {run.elapsed():.1f}s")


async def _outage(run: SagaRun, fault: SagaFault, client: httpx.AsyncClient) -> None:
    """Armed before the agent sent (`_arm`): the service after the pivot answers 503 to every call, or the
    compensating service to every compensation, for longer than the attempt count lasts (breaker threshold
    raised, so the breaker does not hide it); the calls are retried within their budget, and once the service
    is back every saga completes or is compensated, none escalated or FAILED."""
    outage = run.rng.uniform(*fault.window_s)
    run.counts["outage"] += 1
    what = "every compensation" if fault.kind == "compensation-outage" else "every call"
    run.say(f"{fault.service} answers 503 to {what} from the start for {outage:.1f}s")
    await asyncio.sleep(outage)
    await run.faults(client, fault.service, down=False, down_compensations=False)
    run.say(f"{fault.service} back at {run.elapsed():.1f}s")


async def _late_answer(run: SagaRun, fault: SagaFault, client: httpx.AsyncClient) -> None:
    """The service records the call and answers after the client's timeout (forward calls only): an
    attempt's outcome is unknown; a retry with the same key gets the first answer, and a call given up
    is settled by its compensation with the same key, never by a guess."""
    window = run.rng.uniform(*fault.window_s)  # armed before the agent sent (`_arm`)
    run.say(f"{fault.service} answers after the timeout from the start for {window:.1f}s")
    await asyncio.sleep(window)
    await run.faults(client, fault.service, hang_rate=0)
    run.say(f"{fault.service} answers in time again at {run.elapsed():.1f}s")


async def _postgres_restart(run: SagaRun, fault: SagaFault, client: httpx.AsyncClient, session: ChaosSession) -> None:
    """PostgreSQL stopped (fast shutdown) while sagas are open, started again after a while."""
    del client
    await asyncio.sleep(run.rng.uniform(*fault.first_s))
    outage = run.rng.uniform(*fault.window_s)
    opened = await _until(lambda: run.db.fetchval(_OPEN), "an open saga")
    await session.stop_pg()
    run.counts["PostgreSQL stopped"] += 1
    run.counts["sagas open at the stop"] += int(opened)
    run.say(f"PostgreSQL stopped at {run.elapsed():.1f}s for {outage:.1f}s ({opened} sagas open)")
    try:
        await asyncio.sleep(outage)
    finally:
        await session.resume_pg()
    run.say(f"PostgreSQL back at {run.elapsed():.1f}s")


# -- the agent -------------------------------------------------------------------------------------------------


def _plans(count: int) -> list[list[dict[str, Any]]]:
    """Each plan's five steps, fixed once so a resent batch is the same events (DUPLICATE, never new)."""
    return [
        [json.loads(step_envelope(f"s{i:03d}", f"p{i:03d}", seq).model_dump_json()) for seq in range(1, 6)]
        for i in range(count)
    ]


async def submit_batch(
    client: httpx.AsyncClient, url: str, batch: list[dict[str, Any]], counts: collections.Counter[str]
) -> None:
    """POST one plan's batch until it is answered 200 (the gateway may be restarting, PostgreSQL away)."""
    delay = 0.1
    deadline = time.monotonic() + 60
    while True:
        try:
            answer = await client.post(url + "/v1/events", json={"events": batch})
            if answer.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() >= deadline:
            raise TimeoutError(f"plan {batch[0]['order_id']} never accepted")
        counts["submissions retried"] += 1
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


async def _settle(db: Database, plans: int, timeout_s: float) -> list[str]:
    """Wait until every order is completed with its saga COMPLETED, or aborted with it COMPENSATED."""
    deadline = time.monotonic() + timeout_s
    left = ["the orders could not be read (PostgreSQL away)"]
    while True:
        with contextlib.suppress(Exception):  # PostgreSQL may still be coming back
            orders = await db.fetchval("SELECT count(*) FROM orders")
            rows = await db.fetch(_UNSETTLED)
            if orders == plans and not rows:
                return []
            left = [f"order {r['order_id']}: {r['status']} with its saga {r['saga']}" for r in rows]
            left += [f"{plans - orders} order(s) never created"] if orders < plans else []
            if orders == plans and all(r["saga"] in _STUCK for r in rows):
                return left
        if time.monotonic() >= deadline:
            return left
        await asyncio.sleep(0.2)


async def _effects_of_completed(db: Database, ledgers: dict[str, Any]) -> list[str]:
    """Each completed order has exactly one standing entry in every service's ledger."""
    completed = {r["order_id"] for r in await db.fetch("SELECT order_id FROM orders WHERE status = 'completed'")}
    return standing_effects(ledgers, completed)


def standing_effects(ledgers: dict[str, Any], completed: set[str]) -> list[str]:
    """Each order of `completed` has exactly one standing (not compensated) entry in every service's ledger."""
    problems = []
    for service in SERVICES:
        entries = ledgers[service]["entries"]
        undone = {e.get("compensates") for e in entries if e.get("compensates")}
        standing = collections.Counter(
            e["order_id"] for e in entries if "compensates" not in e and e["key"] not in undone
        )
        problems += [
            f"{service}: completed order {o}: {standing[o]} standing effects"
            for o in sorted(completed)
            if standing[o] != 1
        ]
    return problems


# -- one scenario ----------------------------------------------------------------------------------------------


def _env(database_url: str, services_url: str, seed: str, fault: SagaFault, **extra: str) -> dict[str, str]:
    secret = hashlib.sha256(f"saga-chaos:{seed}".encode()).hexdigest()
    return {
        **clean_env(),
        **FAST_ENV,
        **SAGA_ENV,
        "NEXUS_DATABASE_URL": database_url,
        "NEXUS_SAGA_SECRET": secret,  # fixed: the services' fault draws (by key) replay with the seed
        **{f"NEXUS_SERVICE_{name.upper()}_URL": f"{services_url}/{name}" for name in SERVICES},
        **dict(fault.env),
        **extra,
    }


async def run_saga_scenario(
    session: ChaosSession,
    scenario: Scenario,
    *,
    plans: int,
    seed: str,
    settle_timeout_s: float,
    gateway_cmd: Sequence[str] | None,
    progress: Callable[[str], None],
) -> ScenarioResult:
    """Run one saga scenario on fresh processes and a fresh database; never raises for what the system did."""
    assert scenario.saga is not None
    name, fault = scenario.name, scenario.saga
    started = time.monotonic()
    result = ScenarioResult(name, plans, {}, 0, len(CHECKS), 0.0, scenario.proof)

    def say(text: str) -> None:
        progress(f"[{name}] {text}")

    url = await session.new_database(name)
    directory = session.tmp / name
    directory.mkdir(parents=True, exist_ok=True)
    cmd = list(gateway_cmd or NEXUS_CMD)
    services_port, gateway_port = free_port(), free_port()
    services_url, gateway_url = f"http://127.0.0.1:{services_port}", f"http://127.0.0.1:{gateway_port}"
    env = _env(url, services_url, seed, fault)
    services, gateway, executor = procs = _procs(cmd, env, directory, seed, fault, (services_port, gateway_port))
    db = await Database(Settings(database_url=url, db_pool_size=2)).open(migrate=False)
    run = SagaRun(directory, services_url, db, gateway, gateway_url, [executor], random.Random(f"{seed}:{name}"), say)
    key = os.environ.get("NEXUS_API_KEY", "")
    try:
        async with httpx.AsyncClient(timeout=10, headers={"authorization": f"Bearer {key}"}) as client:
            for proc in procs:
                proc.start()
            await asyncio.gather(wait_ready(services, services_url + "/health"),
                                 wait_ready(gateway, gateway_url + "/readyz"), wait_ready(executor, None))  # fmt: skip
            await run.faults(client, "payment", permanent_fail_rate=fault.decline_rate)
            await _arm(run, fault, client)
            say(f"started services, a gateway and an executor process; {plans} fulfilment plans, fault {fault.kind}")
            await _load(run, fault, client, session, plans)
            broken = await _check(run, fault, client, plans, settle_timeout_s)
        result.held = sum(not lines for lines in broken.values())
        result.failures = [f"{check}: {line}" for check, lines in broken.items() for line in lines]
        result.check_text = "\n".join(f"{check}: {'ok' if not lines else f'{len(lines)} broken'}"
                                      for check, lines in broken.items())  # fmt: skip
        (directory / "check.txt").write_text(result.check_text + "\n" + "\n".join(result.failures) + "\n")
    except Exception as exc:  # noqa: BLE001 - a scenario that could not run is reported, the others go on
        result.error = f"{type(exc).__name__}: {exc}"
        tails = "\n".join(f"--- {p.name}\n{p.tail(1500)}" for p in procs)
        (directory / "error.txt").write_text(result.error + "\n\n" + tails)
    finally:
        for proc in procs:
            await asyncio.to_thread(proc.stop)
        await db.close()
        result.faults = dict(run.counts)
        result.elapsed_s = time.monotonic() - started
    for line in result.summary_lines():
        say(line)
    return result


def _procs(
    cmd: list[str], env: dict[str, str], directory: Path, seed: str, fault: SagaFault, ports: tuple[int, int]
) -> list[Proc]:
    """The services, a gateway without saga executors, and a process running the executors."""
    services_port, gateway_port = ports
    services = Proc("services", [*NEXUS_CMD, "services", "--port", str(services_port), "--seed", seed,
                     "--latency-ms", str(fault.latency_ms)],
                    clean_env(), directory / "services.log")  # fmt: skip
    gateway = Proc("gateway", [*cmd, "serve", "--no-dispatcher"],
                   {**env, "NEXUS_HTTP_PORT": str(gateway_port), "NEXUS_SAGA_EXECUTORS": "0"},
                   directory / "gateway.log")  # fmt: skip
    executor = Proc("executor", [*cmd, "serve", "--dispatcher-only"], env, directory / "executor.log")
    return [services, gateway, executor]


async def _load(run: SagaRun, fault: SagaFault, client: httpx.AsyncClient, session: ChaosSession, plans: int) -> None:
    """The plans submitted (eight batches at a time) while the fault strikes."""
    run.started = time.monotonic()
    striking = asyncio.create_task(_strike(run, fault, client, session))
    gate = asyncio.Semaphore(8)

    async def send(batch: list[dict[str, Any]]) -> None:
        async with gate:
            await submit_batch(client, run.gateway_url, batch, run.counts)

    await asyncio.gather(*(send(batch) for batch in _plans(plans)))
    await striking
    run.say(f"agent and fault done at {run.elapsed():.1f}s; settling")


async def _check(
    run: SagaRun, fault: SagaFault, client: httpx.AsyncClient, plans: int, settle_timeout_s: float
) -> dict[str, list[str]]:
    """What each check found broken once the sagas settled (or the timeout passed)."""
    unsettled = await _settle(run.db, plans, settle_timeout_s)
    ledgers = (await client.get(run.services_url + "/ledgers")).json()
    broken = {
        "sagas settled": unsettled,
        "saga invariants": await check_sagas_live(run.db, run.services_url),
        "completed orders' effects": await _effects_of_completed(run.db, ledgers),
    }
    await _count_outcomes(run, fault, ledgers)
    return broken


async def _strike(run: SagaRun, fault: SagaFault, client: httpx.AsyncClient, session: ChaosSession) -> None:
    if fault.kind == "kill-mid-call":
        await _kill_mid_call(run, fault, client)
    elif fault.kind == "kill-mid-compensation":
        await _kill_mid_compensation(run, fault, client)
    elif fault.kind == "service-down":
        await _service_down(run, fault, client)
    elif fault.kind == "late-answer":
        await _late_answer(run, fault, client)
    elif fault.kind == "postgres-restart":
        await _postgres_restart(run, fault, client, session)
    elif fault.kind in ("post-pivot-outage", "compensation-outage"):
        await _outage(run, fault, client)
    else:
        raise ValueError(f"unknown saga fault {fault.kind!r}")


async def _count_outcomes(run: SagaRun, fault: SagaFault, ledgers: dict[str, Any]) -> None:
    """What the run shows happened: calls repeated with the same key, breakers opened, calls settled by
    their compensation (from the executors' logs, the ledgers' request counts and PostgreSQL)."""
    for service, keys in run.watched.items():
        attempts = ledgers[service]["attempts"]
        repeated = [k for k in keys if attempts.get(k, 0) > 1]
        if repeated:
            run.counts["calls repeated with the same key"] += int(await run.db.fetchval(_REPEATED, repeated))
    opened = sum(p.log().count("saga breaker opened") for p in run.executors)
    if opened:
        run.counts["breaker opened"] += opened
    settled = int(await run.db.fetchval(_SETTLED_BY_COMPENSATION))
    if settled:
        run.counts["unknown outcomes settled by compensation"] += settled
    past_count = int(dict(fault.env).get("NEXUS_SAGA_MAX_ATTEMPTS", SAGA_ENV["NEXUS_SAGA_MAX_ATTEMPTS"]))
    for kind, column in (("effects", "attempts"), ("compensations", "compensation_attempts")):
        retried = int(await run.db.fetchval(_RETRIED_PAST.format(column=column), past_count))
        if retried:
            run.counts[f"{kind} retried past the attempt count"] += retried
