"""Sequencing and process validation of one order's steps: the names importers know, kept here.

The decision table lives in `core/decide/`, one module per concern, each with its part of the table:
`position` (sequencing and the reorder buffer), `replan` (plan swap), `validation` (the process),
`approvals`, `deadlines`, `effects` (saga steps), `rejections` (max_rejections), `expiry` (the buffer's
timeout); `decide/order.py` folds one order's steps through them and `decide/plan.py` a whole batch into
a `BatchPlan`. `resolve` and `complete_effect` below are that fold with keyword arguments; they always
judge by a catalog (the gateway's; by default the shipped definitions, which the registry loads).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from nexus.core.decide import order as _order
from nexus.core.decide import position as _position
from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import OrderState, Resolution
from nexus.core.process_model import CompiledProcess, ProcessCatalog, Verdict
from nexus_wire.codes import Decision

__all__ = ["complete_effect", "decide", "resolve"]


def decide(state: OrderState | None, event: EventEnvelope, process: CompiledProcess) -> Decision:
    """The position table (`core/decide/position.py`) for an order of `process`."""
    return _position.decide(state, event, process.terminal_states)


def resolve(
    state: OrderState,
    events: Iterable[EventEnvelope],
    pending: Mapping[int, EventEnvelope],
    *,
    catalog: ProcessCatalog,
    limits: Mapping[str, Any] | None = None,
    rejected: Mapping[uuid.UUID, Verdict] | None = None,
    effect_done: int | None = None,
    now: dt.datetime | None = None,
    approvals: Mapping[uuid.UUID, Verdict | None] | None = None,
) -> Resolution:
    """Fold one order's events, in arrival order, through the deciders (`core/decide/order.py`)."""
    ctx = _order.OrderContext(
        catalog=catalog,
        limits=limits or {},
        rejected=rejected or {},
        effect_done=effect_done,
        now=now,
        approvals=approvals or {},
    )
    return _order.resolve(state, events, pending, ctx)


def complete_effect(
    state: OrderState,
    event: EventEnvelope,
    pending: Mapping[int, EventEnvelope],
    *,
    catalog: ProcessCatalog,
    limits: Mapping[str, Any] | None = None,
) -> Resolution:
    """The effect of `event` succeeded: the step applies for good, then its successors drain."""
    ctx = _order.OrderContext(
        catalog=catalog,
        limits=limits or {},
    )
    return _order.complete_effect(state, event, pending, ctx)
