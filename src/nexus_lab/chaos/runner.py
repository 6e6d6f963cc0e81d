"""Run one scenario: start its processes, run the agent while its faults strike, settle, and check.

The checker (`nexus_lab.checker.check_report`) is the judge: it waits until every notification is delivered
or dead and nothing is pending, then proves the invariants from PostgreSQL and the sink's log.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from nexus.store.database import Database
from nexus_lab.agent import runner as agent
from nexus_lab.agent.transport import KafkaTransport, Transport
from nexus_lab.chaos.faults import BreakerWatch, FaultContext
from nexus_lab.chaos.harness import ChaosSession, Stack
from nexus_lab.chaos.mcp_agents import McpAgents, check_mcp_orders, run_mcp_agents
from nexus_lab.chaos.result import ScenarioResult
from nexus_lab.chaos.saga_load import CHECKS as SAGA_CHECKS
from nexus_lab.chaos.saga_load import SagaLoad
from nexus_lab.chaos.scenarios import Scenario
from nexus_lab.chaos.transports import PatientTransport, RacingTransport, SpreadTransport, http_transports, relax_report
from nexus_lab.checker import CHECKS, CheckResult, check_report, render

# Run-wide checks of the checker that are invariants; the others say whether a mode happened at all.
RUN_INVARIANTS = ("report", "notifications")


def judge(result: CheckResult) -> tuple[int, int, list[str]]:
    """(invariants held, invariants checked, what broke) from the checker's result."""
    held = checked = 0
    broke = list(result.failures)
    for name in CHECKS:
        if name in result.skipped:
            continue
        checked += 1
        held += result.failed[name] == 0
    for name, ok, detail in result.run_checks:
        if name in RUN_INVARIANTS:
            checked += 1
            held += ok
            if not ok:
                broke.append(f"{name}: {detail}")
    return held, checked, broke


async def _transport(scenario: Scenario, stack: Stack) -> tuple[Transport, str]:
    if scenario.transport == "kafka":
        inner = await KafkaTransport(stack.kafka_bootstrap, stack.kafka_topic).start()
        return PatientTransport(inner), f"kafka://{stack.kafka_bootstrap}/{stack.kafka_topic}"
    urls = stack.client_urls
    if scenario.transport == "race":
        return RacingTransport(http_transports(urls)), urls[0]
    return SpreadTransport(http_transports(urls)), urls[0]


def _counted(scenario: Scenario, report: dict[str, Any], check: CheckResult, counts: collections.Counter[str]) -> None:
    hostile = sum(1 for p in report["plans"] for e in p["events"] if e["mode"])
    if hostile:
        counts["hostile messages"] += hostile
    if scenario.sink_faults and check.stats.get("sink_faults"):
        counts["sink faults"] += check.stats["sink_faults"]
    if check.stats.get("removed"):  # orders the checker proved from their removal markers
        counts["orders removed"] += check.stats["removed"]


async def _mcp_agents(scenario: Scenario, stack: Stack) -> McpAgents:
    from nexus_client import ClientConfig

    key = ClientConfig.from_env().api_key or ""
    return await run_mcp_agents(stack.client_urls, key, scenario.mcp_orders, f"{scenario.name}-{stack.dir.name}")


async def _check_mcp(stack: Stack, run: McpAgents, wait_s: float, allow_duplicates: bool) -> tuple[int, int, list[str]]:
    db = await Database(stack.settings()).open(migrate=False)
    try:
        return await check_mcp_orders(db, stack.sink_log, run, wait_s=wait_s, allow_duplicates=allow_duplicates)
    finally:
        await db.close()


async def run_scenario(
    session: ChaosSession,
    scenario: Scenario,
    *,
    plans: int,
    seed: str,
    settle_timeout_s: float = 60.0,
    gateway_cmd: Sequence[str] | None = None,
    progress: Callable[[str], None] = print,
) -> ScenarioResult:
    """Run `scenario` on fresh processes and a fresh database; never raises for what the system did."""
    if scenario.saga is not None:  # Judged by the saga checker, not the agent's report
        from nexus_lab.chaos.sagas import run_saga_scenario

        return await run_saga_scenario(session, scenario, plans=plans, seed=seed, settle_timeout_s=settle_timeout_s,
                                       gateway_cmd=gateway_cmd, progress=progress)  # fmt: skip
    started = time.monotonic()
    rng = random.Random(f"{seed}:{scenario.name}")

    def say(text: str) -> None:
        progress(f"[{scenario.name}] {text}")

    stack, sagas = await _stack(session, scenario, seed, gateway_cmd)
    ctx = FaultContext(session, stack, rng, asyncio.Event(), say)
    result = ScenarioResult(scenario.name, plans, {}, 0, 0, 0.0, scenario.proof)
    tasks: list[asyncio.Task[None]] = []
    watches: list[asyncio.Task[None]] = []
    transport: Transport | None = None
    mcp: asyncio.Task[McpAgents] | None = None
    try:
        await _start(stack, sagas)
        say(_started(scenario, plans))
        transport, target = await _transport(scenario, stack)
        config = _agent_config(scenario, plans, seed)
        ctx.started = time.monotonic()
        _start_faults(scenario, ctx, tasks, watches)
        mcp = asyncio.create_task(_mcp_agents(scenario, stack)) if scenario.mcp_orders else None
        sending = sagas.submit(stack.gateway_urls) if sagas is not None else asyncio.sleep(0)
        report, _ = await asyncio.gather(agent.run_agent(config, transport, target=target), sending)
        mcp_run = await mcp if mcp is not None else None
        ctx.agent_done.set()
        say(f"agent done at {ctx.elapsed():.1f}s: {report['summary']['messages']} messages")
        await asyncio.gather(*tasks)
        _count_transport(transport, report, ctx)
        agent.write_report(report, stack.dir / "agent-report.json")
        await _judge(scenario, stack, report, mcp_run, ctx, result, settle_timeout_s)
        await _judge_beside(scenario, stack, report, sagas, ctx, result, settle_timeout_s)
    except Exception as exc:  # noqa: BLE001 - a scenario that could not run is reported, the others go on
        result.error = f"{type(exc).__name__}: {exc}"
        (stack.dir / "error.txt").write_text(result.error + "\n\n" + stack.logs_tail())
    finally:
        await _stop(tasks, watches, mcp, transport, stack, sagas)
        result.faults = dict(ctx.counts)
        result.elapsed_s = time.monotonic() - started
    (stack.dir / "result.json").write_text(json.dumps(dataclasses.asdict(result), indent=2, default=str) + "\n")
    for line in result.summary_lines():
        say(line)
    return result


async def _stack(
    session: ChaosSession, scenario: Scenario, seed: str, gateway_cmd: Sequence[str] | None
) -> tuple[Stack, SagaLoad | None]:
    """The scenario's processes (not started) on their database, Kafka cluster and effect services, as it asks."""
    if scenario.stack.replicated:
        synchronous = "NEXUS_SYNC_STANDBY" in scenario.stack.env
        url = await session.new_replicated_database(scenario.name, synchronous=synchronous)
    else:
        url = await session.new_database(scenario.name)
    bootstrap = await session.new_kafka_cluster(scenario.name) if scenario.stack.kafka_brokers > 1 else None
    spec, sagas = scenario.stack, None
    if scenario.saga_plans:
        (session.tmp / scenario.name).mkdir(parents=True, exist_ok=True)
        sagas = SagaLoad(session.tmp / scenario.name, scenario.saga_plans, seed)
        spec = dataclasses.replace(spec, env={**spec.env, **sagas.env()})
    return Stack(session, scenario.name, spec, url, gateway_cmd=gateway_cmd, kafka_bootstrap=bootstrap), sagas


async def _start(stack: Stack, sagas: SagaLoad | None) -> None:
    """The effect services first (the gateways' executors call them), then the stack."""
    if sagas is not None:
        await sagas.start()
    await stack.start()


async def _judge_beside(
    scenario: Scenario,
    stack: Stack,
    report: dict[str, Any],
    sagas: SagaLoad | None,
    ctx: FaultContext,
    result: ScenarioResult,
    settle_timeout_s: float,
) -> None:
    """After the agent's checks: the saga load's, then (asynchronous replication) what the failover lost."""
    if sagas is not None:
        await _judge_sagas(stack, sagas, ctx, result, settle_timeout_s)
    if scenario.loss_counted:
        await _count_loss(stack, report, ctx, result)


async def _judge_sagas(
    stack: Stack, sagas: SagaLoad, ctx: FaultContext, result: ScenarioResult, settle_timeout_s: float
) -> None:
    """The saga load's checks (`saga_load.CHECKS`) added to the run's."""
    ctx.count("saga plans", len(sagas.orders))
    db = await Database(stack.settings()).open(migrate=False)
    try:
        broke = await sagas.check(db, settle_timeout_s)
    finally:
        await db.close()
    if sagas.repeated:
        ctx.count("saga calls repeated with the same key", sagas.repeated)
    result.checked += len(SAGA_CHECKS)
    result.held += sum(not any(line.startswith(f"{check}: ") for line in broke) for check in SAGA_CHECKS)
    result.failures += broke
    result.check_text += "".join(f"\n{line}" for line in broke)


_DECIDED = "SELECT event_id FROM decision_log WHERE event_id = ANY($1::text[])"


async def _count_loss(stack: Stack, report: dict[str, Any], ctx: FaultContext, result: ScenarioResult) -> None:
    """Asynchronous replication: the agent's honest steps of which the promoted standby has no decision (the
    primary took them, and their Kafka offsets were committed, but the standby never received them) are counted;
    when some are, the checks they break are counted too, and kept in check.txt, instead of failing the run."""
    sent = [e["event_id"] for p in report["plans"] for e in p["events"] if e["honest"]]
    db = await Database(stack.settings()).open(migrate=False)
    try:
        decided = {r["event_id"] for r in await db.fetch(_DECIDED, sent)}
    finally:
        await db.close()
    lost = len(set(sent) - decided)
    ctx.count("acknowledged steps lost", lost)
    ctx.progress(f"asynchronous replication lost {lost} of {len(sent)} acknowledged steps")
    if lost and result.failures:
        ctx.count("checks broken by the loss", result.checked - result.held)
        result.check_text += "".join(f"\nbroken by the loss: {line}" for line in result.failures)
        result.failures, result.held = [], result.checked


def _started(scenario: Scenario, plans: int) -> str:
    spec = scenario.stack
    return (
        f"started sink, {spec.gateways} gateway(s){' --kafka' if spec.kafka else ''}, "
        f"{spec.dispatchers} dispatcher(s); agent: {plans} plans over {scenario.transport}"
    )


def _start_faults(
    scenario: Scenario, ctx: FaultContext, tasks: list[asyncio.Task[None]], watches: list[asyncio.Task[None]]
) -> None:
    """Each fault of the scenario as a task: the breaker watches apart (they run until cancelled)."""
    for fault in scenario.faults:
        task = asyncio.create_task(fault.run(ctx))
        (watches if isinstance(fault, BreakerWatch) else tasks).append(task)


def _agent_config(scenario: Scenario, plans: int, seed: str) -> agent.AgentConfig:
    return agent.AgentConfig(
        orders=plans,
        seed=f"{seed}:{scenario.name}",
        inventory_failure_rate=scenario.inventory_failure_rate,
        payment_rejection_rate=scenario.payment_rejection_rate,
        step_delay_ms=scenario.step_delay_ms,
        concurrency=8,
        hostile=dict(scenario.hostile),
        processes=scenario.processes,
    )


def _count_transport(transport: Transport, report: dict[str, Any], ctx: FaultContext) -> None:
    """What the transport did besides sending: raced pairs (their decisions relaxed), retried publishes."""
    if isinstance(transport, RacingTransport):
        relax_report(report, transport.raced)
        ctx.count("out-of-order pairs raced", transport.races)
    if isinstance(transport, PatientTransport) and transport.retried:
        ctx.count("publishes retried", transport.retried)


async def _judge(
    scenario: Scenario,
    stack: Stack,
    report: dict[str, Any],
    mcp_run: McpAgents | None,
    ctx: FaultContext,
    result: ScenarioResult,
    settle_timeout_s: float,
) -> None:
    """The run checked once settled: the agent's report, then the MCP agents' orders; into `result`."""
    db = await Database(stack.settings()).open(migrate=False)
    try:
        ctx.progress("settling: waiting for every notification to be delivered or dead")
        check = await check_report(
            report,
            db,
            stack.sink_log,
            settings=stack.settings(),
            wait_s=settle_timeout_s,
            allow_duplicates=scenario.allow_duplicates,
        )
    finally:
        await db.close()
    _counted(scenario, report, check, ctx.counts)
    result.held, result.checked, result.failures = judge(check)
    if mcp_run is not None:  # the MCP agents' orders: their own invariants
        ctx.count("mcp orders", len(mcp_run.order_ids))
        ctx.count("mcp calls retried", mcp_run.retried)
        held, checked, broke = await _check_mcp(stack, mcp_run, settle_timeout_s, scenario.allow_duplicates)
        result.held, result.checked, result.failures = (
            result.held + held,
            result.checked + checked,
            result.failures + broke,
        )
    result.check_text = render(check, len(report["plans"]))
    (stack.dir / "check.txt").write_text(result.check_text + "\n")


async def _stop(
    tasks: list[asyncio.Task[None]],
    watches: list[asyncio.Task[None]],
    mcp: asyncio.Task[McpAgents] | None,
    transport: Transport | None,
    stack: Stack,
    sagas: SagaLoad | None = None,
) -> None:
    for task in [*tasks, *watches]:
        task.cancel()
    if mcp is not None:
        mcp.cancel()
        await asyncio.gather(mcp, return_exceptions=True)
    await asyncio.gather(*tasks, *watches, return_exceptions=True)
    if transport is not None:
        with contextlib.suppress(Exception):
            await transport.close()
    await stack.close()
    if sagas is not None:
        await asyncio.to_thread(sagas.stop)
