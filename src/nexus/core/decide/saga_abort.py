"""A plan's abort meeting its open saga: which sagas turn to compensation, decided by the fold.

Read under the batch's locks with the orders' states (`SagaGate`: the saga's status and whether its pivot
completed), then walked through the batch's resolutions in order; the saga's own rule is `core.saga.abort_turn`:

| what the batch does to the order                  | saga before           | saga after                 |
|---------------------------------------------------|-----------------------|----------------------------|
| a step with an effect takes its seq               | none                  | PENDING (`NEW_SAGA`)       |
|                                                   | any                   | unchanged                  |
| ABORT_PLAN applies, the pivot not completed       | PENDING or RUNNING    | COMPENSATING, due now      |
| ABORT_PLAN applies, the pivot completed           | any                   | unchanged (nothing undone) |
| ABORT_PLAN applies                                | any other, or none    | unchanged                  |

An agent's abort past the pivot was already REJECTED PAST_PIVOT; the deadline's and the saga's own aborts
reach this table too. Each turn carries the status it was decided from (`expected`): the write changes the
saga only if it still has it (an operator's redrive takes the saga's row lock, not the order's).

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from nexus.core.order_state import Resolution
from nexus.core.saga import SagaStatus, abort_turn

OrderKey = tuple[str, str]
NEW_SAGA = SagaStatus.PENDING
"""The status of a saga a step with an effect begins (an order's existing saga keeps its own)."""


@dataclasses.dataclass(frozen=True, slots=True)
class SagaGate:
    """An order's saga as read under its lock: its status, and whether its pivot step completed."""

    status: SagaStatus
    past_pivot: bool


@dataclasses.dataclass(frozen=True, slots=True)
class SagaTurn:
    """The `sagas` row an abort writes (`saga.sql` `turn_sagas`): `status` if it is still `expected`."""

    tenant_id: str
    order_id: str
    status: SagaStatus
    expected: SagaStatus


def compensating(resolutions: Sequence[Resolution], gates: Mapping[OrderKey, SagaGate]) -> tuple[SagaTurn, ...]:
    """The sagas the batch's aborts turn to compensation (the table above), in the resolutions' order."""
    turns: list[SagaTurn] = []
    for resolution in resolutions:
        for applied in resolution.applied:
            event = applied.event
            key = (event.tenant_id, event.order_id)
            gate = gates.get(key)
            if event.is_abort:
                turned = abort_turn(gate.status, past_pivot=gate.past_pivot) if gate is not None else None
                if gate is not None and turned is not None and turned is not gate.status:
                    turns.append(SagaTurn(key[0], key[1], turned, gate.status))
                    gates = {**gates, key: SagaGate(turned, gate.past_pivot)}
            elif applied.effect and gate is None:
                gates = {**gates, key: SagaGate(NEW_SAGA, past_pivot=False)}
    return tuple(turns)
