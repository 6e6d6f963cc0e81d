"""A checker that cannot fail proves nothing: each scenario, run against a gateway with its guarantee
removed on purpose (`tests/chaos/broken/`), must report the violation.

The broken variants are launchers that patch one thing and run `nexus`; the harness starts them in
place of `python -m nexus_cli` (its `gateway_cmd`), so nothing in the product can switch them on.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nexus_lab.chaos.harness import ChaosSession
from nexus_lab.chaos.result import ScenarioResult
from nexus_lab.chaos.runner import run_scenario
from nexus_lab.chaos.scenarios import SCENARIOS

pytestmark = [pytest.mark.slow]

BROKEN = Path(__file__).parent / "broken"
SEED = "ci"


async def run_broken(session: ChaosSession, scenario: str, launcher: str, plans: int) -> ScenarioResult:
    result = await run_scenario(
        session,
        SCENARIOS[scenario],
        plans=plans,
        seed=SEED,
        settle_timeout_s=8,
        gateway_cmd=[sys.executable, str(BROKEN / launcher)],
    )
    assert result.error is None, result.error
    assert result.fault_proved, result.faults
    assert not result.ok, f"{scenario} did not notice {launcher}"
    return result


def broke(result: ScenarioResult, *fragments: str) -> bool:
    return any(f in line for line in result.failures for f in fragments)


async def test_reordering_catches_a_gateway_without_the_advisory_lock(chaos_session: ChaosSession) -> None:
    """Without the per-order lock, raced steps of one order are written on stale state: steps stay buffered,
    or an order's notifications are left without a head and never delivered; every message was answered (the
    variant runs, it only lacks the lock)."""
    result = await run_broken(chaos_session, "reordering", "serve_without_lock.py", plans=60)
    assert not any(line.startswith("report: ") for line in result.failures), result.failures
    assert broke(result, "still buffered", ": order: ", ": outbox: ", ": delivered: ")


async def test_receiver_unstable_catches_a_dispatcher_ignoring_the_order(chaos_session: ChaosSession) -> None:
    """A claim that skips the per-order condition delivers positions out of order to a failing receiver."""
    result = await run_broken(chaos_session, "receiver-unstable", "serve_claim_any_position.py", plans=10)
    assert broke(result, "accepted out of order")


@pytest.mark.kafka
async def test_consumer_kill_catches_offsets_committed_before_applying(chaos_session: ChaosSession) -> None:
    """A consumer that commits before applying and is SIGKILLed loses steps: a lost honest step leaves its
    plan incomplete (order, outbox), a lost hallucinated one is never rejected (rejected); which of them the
    kill catches in flight varies from run to run, and each is the loss showing."""
    result = await run_broken(chaos_session, "consumer-kill", "serve_commit_before_apply.py", plans=10)
    assert broke(result, ": order: ", ": outbox: ", ": rejected: ")


async def test_hallucinations_catches_a_gateway_that_never_rejects(chaos_session: ChaosSession) -> None:
    """A process that approves every step in turn applies hallucinated steps: the checker sees them."""
    result = await run_broken(chaos_session, "hallucinations", "serve_without_checks.py", plans=10)
    assert broke(result, ": rejected: ", ": acks: ", ": outbox: ")


async def test_gateway_kill_catches_numbering_that_forgets_idempotency_keys(chaos_session: ChaosSession) -> None:
    """A repeated MCP call numbered as a new step (its key forgotten) is caught: not answered DUPLICATE."""
    result = await run_broken(chaos_session, "gateway-kill", "serve_forget_step_keys.py", plans=4)
    assert broke(result, "mcp answers: ")


async def test_retention_catches_a_remover_taking_orders_with_open_deliveries(chaos_session: ChaosSession) -> None:
    """A remover that ignores pending deliveries takes notifications away before the slow receiver got them: the
    checker reads the markers and says so (open deliveries, positions never accepted)."""
    result = await run_broken(chaos_session, "retention", "serve_remove_open_orders.py", plans=10)
    assert broke(result, "removed with deliveries open", "never accepted")
