"""Handing saga calls' outcomes to the gateway: each outcome becomes a command of the fold (`command_of` ->
`EffectOutcome`), a batch of them (of different orders) folded in one transaction by `Gateway.fold_effects`
(lock, read, plan, write, as for steps), which decides nothing here: the step applied for good, the
compensation's notification and each saga's status and next attempt come from `core/decide/outcomes.py`.
A saga due again at once stays leased to the writer's process, which goes on with it with the steps read
back in the same transaction. (A saga with nothing to call is settled by `Gateway.settle_saga`.)"""

from __future__ import annotations

import dataclasses
from typing import Any

import asyncpg

from nexus.batch_rows import pairs
from nexus.core.decide.items import EffectOutcome, EffectResult
from nexus.core.envelope import parse_envelope
from nexus.core.saga import Action, CallDecision, SagaStatus, StepStatus
from nexus.gateway import Gateway
from nexus.store.queries import query

OrderKey = tuple[str, str]


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """One call's outcome to write back: its saga's step, the call's direction and the pure decision."""

    step: asyncpg.Record
    action: Action
    decision: CallDecision
    response: Any
    error: str | None
    keep: bool = True
    """The writer's process goes on with the saga if it is due again at once (else its lease is cleared)."""

    @property
    def key(self) -> OrderKey:
        return (self.step["tenant_id"], self.step["order_id"])


@dataclasses.dataclass(frozen=True, slots=True)
class Continued:
    """A saga the writer kept leased: its status and steps as the outcome's transaction left them."""

    status: SagaStatus
    steps: list[asyncpg.Record]


async def read_steps_of(conn: asyncpg.Connection, keys: list[OrderKey]) -> dict[OrderKey, list[asyncpg.Record]]:
    """The steps of these sagas, by saga, in seq order: one statement."""
    found: dict[OrderKey, list[asyncpg.Record]] = {key: [] for key in keys}
    for row in await conn.fetch(query("saga.sql", "read_steps_of"), *pairs(keys)):
        found[(row["tenant_id"], row["order_id"])].append(row)
    return found


async def write_outcomes(
    gateway: Gateway, conn: asyncpg.Connection, outcomes: list[Outcome], lease_s: float, owner: str
) -> dict[OrderKey, Continued]:
    """Hand a batch of outcomes (one per saga) to the gateway as commands (`Gateway.fold_effects`: lock, read,
    plan, write) in the caller's transaction; the sagas kept leased, as it left them."""
    kept = await gateway.fold_effects(conn, [command_of(o) for o in outcomes], lease_s, owner)
    return {key: Continued(status, steps) for key, (status, steps) in kept.items()}


def command_of(o: Outcome) -> EffectOutcome:
    """The fold's command for a call's outcome: what it is (`EffectResult`) and the values it writes."""
    step, decision = o.step, o.decision
    forward = o.action is Action.FORWARD
    if forward and decision.step is StepStatus.COMPLETED:
        result = EffectResult.DONE
    elif not forward and decision.step is StepStatus.COMPENSATED:
        result = EffectResult.COMPENSATED
    elif forward and decision.delay_ms is None and decision.saga is SagaStatus.ESCALATED:
        result = EffectResult.ESCALATED
    else:
        result = EffectResult.FAILED
    return EffectOutcome(
        step["tenant_id"], step["order_id"], step["seq"], step["step_name"], step["service"], forward, result,
        decision.step, parse_envelope(step["envelope_text"]) if result is EffectResult.DONE else None,
        o.response, o.error, step["traceparent"], decision.uncertain,
        decision.delay_ms / 1000 if decision.delay_ms is not None else None, o.keep,
    )  # fmt: skip
