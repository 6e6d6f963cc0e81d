"""The short version of every chaos scenario (`nexus chaos` at test size): real processes, real faults.

Each test runs one scenario on its own fresh database and processes and asserts two things: every
invariant the checker proves held, and the scenario's fault really happened (a kill count, an outage,
a breaker that opened...), so a scenario that silently injected nothing cannot pass.
"""

from __future__ import annotations

import pytest

from nexus_lab.chaos.harness import ChaosSession
from nexus_lab.chaos.result import ScenarioResult
from nexus_lab.chaos.runner import run_scenario
from nexus_lab.chaos.scenarios import SCENARIOS

pytestmark = [pytest.mark.slow]

PLANS = 10
SEED = "ci"


async def run_short(session: ChaosSession, name: str) -> ScenarioResult:
    result = await run_scenario(session, SCENARIOS[name], plans=PLANS, seed=SEED, settle_timeout_s=60)
    assert result.error is None, result.error
    assert result.invariants_ok, "\n".join([*result.failures[:20], result.check_text])
    assert result.fault_proved, f"{name} injected no {result.proof!r}: {result.faults}"
    return result


async def test_reordering(chaos_session: ChaosSession) -> None:
    """Out-of-order pairs raced through two gateways are buffered or applied, once and in order."""
    result = await run_short(chaos_session, "reordering")
    assert result.faults["out-of-order pairs raced"] > 0


async def test_duplicates(chaos_session: ChaosSession) -> None:
    """Resent steps and restarted plans change nothing."""
    await run_short(chaos_session, "duplicates")


async def test_zombies(chaos_session: ChaosSession) -> None:
    """A step sent after its plan's ABORT_PLAN is discarded."""
    await run_short(chaos_session, "zombies")


async def test_poison(chaos_session: ChaosSession) -> None:
    """Malformed and other-plan messages are dead-lettered and the stream goes on."""
    await run_short(chaos_session, "poison")


async def test_hallucinations(chaos_session: ChaosSession) -> None:
    """Hallucinated steps are each REJECTED with their code and change no order."""
    await run_short(chaos_session, "hallucinations")


async def test_gateway_kill(chaos_session: ChaosSession) -> None:
    """Gateways SIGKILLed repeatedly lose nothing the agent was told was accepted; MCP agents retrying lost
    calls with the same idempotency keys complete their orders, each step applied once."""
    result = await run_short(chaos_session, "gateway-kill")
    assert result.faults["gateway SIGKILLed"] >= 2
    assert result.faults["mcp orders"] == 4


async def test_dispatcher_kill(chaos_session: ChaosSession) -> None:
    """Dispatchers SIGKILLed holding leases: their deliveries are resent, in order, none lost."""
    await run_short(chaos_session, "dispatcher-kill")


async def test_postgres_restart(chaos_session: ChaosSession) -> None:
    """PostgreSQL stopped and started twice mid-run: 503s are retried and every plan completes."""
    result = await run_short(chaos_session, "postgres-restart")
    assert result.faults["PostgreSQL stopped"] == 2


@pytest.mark.kafka
async def test_kafka_restart(chaos_session: ChaosSession) -> None:
    """The Kafka broker restarted mid-run: producer and consumer resume, every step applied once."""
    await run_short(chaos_session, "kafka-restart")


@pytest.mark.kafka
async def test_consumer_kill(chaos_session: ChaosSession) -> None:
    """A Kafka consumer SIGKILLed mid-stream: its successor re-reads what was not committed."""
    await run_short(chaos_session, "consumer-kill")


async def test_receiver_unstable(chaos_session: ChaosSession) -> None:
    """5xx, 408, 429 with Retry-After and hangs: every notification still delivered once, in order."""
    await run_short(chaos_session, "receiver-unstable")


async def test_circuit_breaker(chaos_session: ChaosSession) -> None:
    """The receiver down for seconds opens the breaker; it closes again and everything is delivered."""
    result = await run_short(chaos_session, "circuit-breaker")
    assert result.faults.get("breaker closed again", 0) > 0


async def test_everything(chaos_session: ChaosSession) -> None:
    """Every fault at once, and still every invariant holds."""
    result = await run_short(chaos_session, "everything")
    assert len(result.faults) >= 4, result.faults


async def test_postgres_failover(chaos_session: ChaosSession) -> None:
    """The primary's machine lost under Kafka, MCP, saga and delivery load and its synchronous standby promoted: every
    step the agent was told was accepted is applied once, notifications delivered in order, MCP orders complete, and
    every saga settles with no effect twice in effect."""
    result = await run_short(chaos_session, "postgres-failover")
    assert result.faults["primary lost"] == 1
    assert result.faults["saga plans"] == 6


async def test_retention(chaos_session: ChaosSession) -> None:
    """Orders removed a second after they finish (behind a slow receiver) are proven from their markers: each
    step applied once, every notification delivered before its order left."""
    result = await run_short(chaos_session, "retention")
    assert result.faults["orders removed"] > 0
