"""The `instance-kill` scenario at test size: two gateway instances behind HAProxy (deploy/haproxy.cfg), every
process of one SIGKILLed under load through the balancer and restarted, and the checker finds nothing wrong."""

from __future__ import annotations

import pytest

from nexus_lab.chaos.harness import ChaosSession
from nexus_lab.chaos.runner import run_scenario
from nexus_lab.chaos.scenarios import SCENARIOS

pytestmark = [pytest.mark.slow]


async def test_instance_kill(chaos_session: ChaosSession) -> None:
    """Every process of one instance (supervisor and both HTTP workers) SIGKILLed under envelope and MCP load
    through HAProxy: every acknowledged step applied once, notifications in order, the MCP orders complete."""
    result = await run_scenario(chaos_session, SCENARIOS["instance-kill"], plans=10, seed="ci", settle_timeout_s=60)
    assert result.error is None, result.error
    assert result.invariants_ok, "\n".join([*result.failures[:20], result.check_text])
    assert result.faults["instance SIGKILLed"] == 1
    assert result.faults["instance processes SIGKILLed"] >= 3, result.faults  # the supervisor and its workers
    assert result.faults["mcp orders"] == 4
    assert "lb recovery ms" in result.faults
