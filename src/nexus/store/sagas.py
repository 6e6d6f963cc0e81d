"""The gateway's side of sagas: what holds an order (read with its state), the saga steps recorded in
the transaction that applies a step with an effect (or aborts a plan that has an open saga), and the rows a
batch of saga calls' outcomes writes (`Gateway.fold_effects`), the values decided by the fold."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import asyncpg

from nexus.core.decide.effects import EffectStatus, effect_view
from nexus.core.decide.items import EffectOutcome
from nexus.core.decide.outcomes import CompensationRow, OutboxCount, SagaRow, executed_at
from nexus.core.decide.saga_abort import NEW_SAGA, SagaGate, SagaTurn
from nexus.core.definitions import DEFAULT_PROCESS
from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import OrderState, Resolution
from nexus.core.process_model import ProcessCatalog
from nexus.core.saga import EffectBodyError, SagaStatus, StepStatus, StepView, build_body
from nexus.store.queries import query
from nexus.store.saga_keys import SagaSecret, call_keys

_HOLDING = {
    SagaStatus.COMPENSATING: EffectStatus.COMPENSATING,
    SagaStatus.FAILED: EffectStatus.FAILED,
    SagaStatus.ESCALATED: EffectStatus.ESCALATED,
}


def effect_processes(catalog: ProcessCatalog | None) -> frozenset[str]:
    """Names of the processes that have at least one step with an effect (only their orders pay the read)."""
    if catalog is None:
        return frozenset()
    return frozenset(
        p.name for p in catalog.versions.values() if any(s.step.effect is not None for s in p.steps.values())
    )


_LAST_EFFECTS: list[tuple[ProcessCatalog, frozenset[str]]] = []
"""`record`'s `effect_processes` of the last catalog it saw (a catalog is immutable; one is in use at a time)."""


def _effect_processes_of(catalog: ProcessCatalog) -> frozenset[str]:
    """`effect_processes(catalog)`, computed once per catalog rather than once per transaction."""
    if _LAST_EFFECTS and _LAST_EFFECTS[0][0] is catalog:
        return _LAST_EFFECTS[0][1]
    found = effect_processes(catalog)
    _LAST_EFFECTS[:] = [(catalog, found)]
    return found


def effect_services(catalog: ProcessCatalog) -> frozenset[str]:
    """The services the effects of the catalog's processes call."""
    return frozenset(
        s.step.effect.service for p in catalog.versions.values() for s in p.steps.values() if s.step.effect is not None
    )


async def annotate(
    conn: asyncpg.Connection,
    states: dict[tuple[str, str], OrderState],
    keys: Sequence[tuple[str, str]],
) -> dict[tuple[str, str], SagaGate]:
    """Set `effect` (what holds the order) and `past_pivot` on the states of orders that have a saga; each
    such saga's status and whether its pivot completed (`core/decide/saga_abort.py`)."""
    if not keys:
        return {}
    rows = await conn.fetch(query("saga.sql", "read_saga_gates"), [t for t, _ in keys], [o for _, o in keys])
    by_order: dict[tuple[str, str], list[asyncpg.Record]] = defaultdict(list)
    for row in rows:
        by_order[(row["tenant_id"], row["order_id"])].append(row)
    gates = {}
    for key, steps in by_order.items():
        past_pivot = _past_pivot(steps)
        gates[key] = SagaGate(SagaStatus(steps[0]["status"]), past_pivot)
        state = states.get(key)
        if state is not None:
            states[key] = dataclasses.replace(state, effect=gate_of(steps), past_pivot=past_pivot)
    return gates


def gate_of(steps: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The `effect` of an order's answer: the step its open saga is busy with, or None."""
    status = SagaStatus(steps[0]["status"])
    if status in _HOLDING:
        last = max(
            (s for s in steps if s["step_status"] != StepStatus.PENDING), key=lambda s: s["seq"], default=steps[-1]
        )
        return _view(last, _HOLDING[status])
    if not status.open:
        return None
    for step in steps:
        if step["step_status"] in (StepStatus.PENDING, StepStatus.RUNNING):
            return _view(step, EffectStatus.RUNNING)
    return None


def _view(step: Mapping[str, Any], status: EffectStatus) -> dict[str, Any]:
    return effect_view(step["step_name"], step["seq"], status, step["attempts"])


def _past_pivot(steps: Iterable[Mapping[str, Any]]) -> bool:
    return any(s["pivot"] and s["step_status"] == StepStatus.COMPLETED for s in steps)


async def record(
    conn: asyncpg.Connection,
    resolutions: Sequence[Resolution],
    catalog: ProcessCatalog | None,
    traces: Mapping[Any, str | None],
    secret: SagaSecret,
    turns: Sequence[SagaTurn] = (),
) -> None:
    """Write the saga steps of the steps that took their seq waiting for an effect (with both directions'
    Idempotency-Keys, fixed from here on), and the open sagas the fold turned to compensation (`turns`): in
    the transaction of the decisions themselves."""
    if catalog is None:
        return
    sagas: list[tuple[str, str, str, str]] = []
    steps: list[tuple[Any, ...]] = []
    with_effects = _effect_processes_of(catalog)
    for resolution in resolutions:
        if (resolution.after.process or DEFAULT_PROCESS) not in with_effects:
            continue  # no saga can exist for an order of a process without effects
        for applied in resolution.applied:
            event = applied.event
            if event.is_abort or not applied.effect:
                continue
            found = _step_row(resolution, event, catalog, traces)
            if found is not None:
                step_name = str(event.event_type)
                keys = call_keys(await secret.get(conn), event.tenant_id, event.order_id, event.plan_id, step_name)
                sagas.append((event.tenant_id, event.order_id, event.plan_id, found[0]))
                steps.append((*found[1], *keys))
    if sagas:
        await conn.execute(query("saga.sql", "upsert_sagas"), *_columns(sagas, 4), NEW_SAGA.value)
        await conn.execute(query("saga.sql", "insert_saga_steps"), *_columns(steps, 18))
    if turns:
        await conn.execute(
            query("saga.sql", "turn_sagas"), [t.tenant_id for t in turns], [t.order_id for t in turns],
            [t.status.value for t in turns], [t.expected.value for t in turns],
        )  # fmt: skip
    if sagas or turns:
        await conn.execute(query("saga.sql", "notify_sagas"))  # Wake the executors


def _step_row(
    resolution: Resolution, event: EventEnvelope, catalog: ProcessCatalog, traces: Mapping[Any, str | None]
) -> tuple[str, tuple[Any, ...]] | None:
    """The process's name and the saga_steps row of an applied step that waits for its effect; None when the
    step has no effect in its process."""
    process = catalog.get(resolution.after.process or event.process_name, resolution.after.process_version)
    compiled = process.steps.get(str(event.event_type)) if process is not None else None
    if process is None or compiled is None or compiled.step.effect is None:
        return None
    effect = compiled.step.effect
    variables = {
        "data": dict(event.data),
        "order": {**resolution.after.facts, "order_id": event.order_id, "plan_id": event.plan_id,
                  "tenant_id": event.tenant_id},
        "step": {"seq": event.seq_id, "type": str(event.event_type)},
    }  # fmt: skip
    try:
        payload, error = json.dumps(build_body(effect.body, variables), default=str), None
    except EffectBodyError as exc:
        payload, error = None, str(exc)
    compensation = effect.compensation
    compensable = compensation is not None and not compiled.step.pivot and not resolution.before.past_pivot
    return process.name, (
        event.tenant_id,
        event.order_id,
        event.seq_id,
        str(event.event_type),
        event.plan_id,
        event.event_id,
        effect.service,
        compensable,
        compiled.step.pivot,
        effect.path,
        payload,
        error,
        compensation.path if compensation is not None else None,
        json.dumps(compensation.body) if compensation is not None else None,
        traces.get(event.event_id),
        event.model_dump_json(),
    )


def _columns(rows: list[tuple[Any, ...]], width: int) -> list[list[Any]]:
    return [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]


async def finish_calls(
    conn: asyncpg.Connection, keys: Sequence[tuple[str, str]], outcomes: Sequence[EffectOutcome], now: dt.datetime
) -> tuple[dict[tuple[str, str], SagaStatus], dict[tuple[str, str], dt.datetime]]:
    """Under the orders' locks: the forward calls' steps finished as their outcomes say (`executed_at` as the
    core decides it, at `now`), and the sagas of `keys` locked and read (one round trip); each saga's status,
    and since when each retrying one retries."""
    forward = [o for o in outcomes if o.forward]
    rows = await conn.fetch(
        query("saga.sql", "finish_forwards"), [t for t, _ in keys], [o for _, o in keys],
        [o.tenant_id for o in forward], [o.order_id for o in forward], [o.seq for o in forward],
        [o.step_status.value for o in forward], [o.uncertain for o in forward],
        [_text(o.response) for o in forward], [o.error for o in forward], [executed_at(o, now) for o in forward],
    )  # fmt: skip
    statuses = {(r["tenant_id"], r["order_id"]): SagaStatus(r["status"]) for r in rows}
    since = {(r["tenant_id"], r["order_id"]): r["retrying_since"] for r in rows if r["retrying_since"] is not None}
    return statuses, since


async def finish_compensations(
    conn: asyncpg.Connection, steps: Sequence[CompensationRow], counts: Sequence[OutboxCount]
) -> None:
    """The compensated steps' rows and their orders' notification counts, as the fold decided them (the
    notifications themselves are written with the plan's)."""
    if steps:
        await conn.execute(
            query("saga.sql", "finish_compensations"), [s.tenant_id for s in steps], [s.order_id for s in steps],
            [s.seq for s in steps], [s.status for s in steps], [_text(s.response) for s in steps],
            [s.compensated_at for s in steps],
        )  # fmt: skip
    if counts:
        await conn.execute(
            query("saga.sql", "set_outbox_counts"), [c.tenant_id for c in counts], [c.order_id for c in counts],
            [c.outbox_count for c in counts],
        )  # fmt: skip


async def set_sagas(
    conn: asyncpg.Connection, rows: Sequence[SagaRow], lease_s: float, owner: str
) -> dict[tuple[str, str], tuple[SagaStatus, list[asyncpg.Record]]]:
    """Write the sagas' rows the fold decided (a kept one leased to `owner` for `lease_s`, the others'
    leases cleared); the status and steps of those the writer keeps leased, by saga."""
    kept = {(r.tenant_id, r.order_id): (SagaStatus(r.status), list[asyncpg.Record]()) for r in rows if r.keep}
    columns = [
        [r.tenant_id for r in rows], [r.order_id for r in rows], [r.status for r in rows], [r.delay_s for r in rows],
        [r.error for r in rows], [lease_s if r.keep else None for r in rows], [owner if r.keep else None for r in rows],
        [r.retrying_since for r in rows], [r.retrying_service for r in rows],
    ]  # fmt: skip
    for row in await conn.fetch(query("saga.sql", "set_sagas"), *columns):
        kept[(row["tenant_id"], row["order_id"])][1].append(row)
    return kept


def _text(response: Any) -> str | None:
    return json.dumps(response) if response is not None else None


@dataclasses.dataclass(frozen=True, slots=True)
class Settling:
    """A saga read under its order's lock: its status (none: compensated), its steps, and since when and on
    which service it retries (None: not retrying)."""

    status: SagaStatus
    steps: list[StepView]
    retrying_since: dt.datetime | None = None
    retrying_service: str | None = None


async def read_settling(conn: asyncpg.Connection, key: tuple[str, str]) -> Settling:
    """Under the order's lock: its saga (its row locked) and its steps."""
    row = await conn.fetchrow(query("saga.sql", "lock_saga"), *key)
    steps = [step_view(s) for s in await conn.fetch(query("saga.sql", "read_steps"), *key)]
    if row is None:
        return Settling(SagaStatus.COMPENSATED, steps)
    return Settling(SagaStatus(row["status"]), steps, row["retrying_since"], row["retrying_service"])


async def set_saga(
    conn: asyncpg.Connection,
    key: tuple[str, str],
    status: SagaStatus,
    delay_s: float | None,
    retrying: tuple[dt.datetime | None, str | None] = (None, None),
    error: str | None = None,
) -> None:
    """One saga's status, its next attempt in `delay_s` seconds (None: not due), since when and on which
    service it retries (None: not retrying) and its error (None: kept), its lease cleared."""
    await conn.execute(query("saga.sql", "set_saga"), *key, status.value, delay_s, error, *retrying)


def step_view(row: asyncpg.Record) -> StepView:
    """What the state machines need of a `saga_steps` row."""
    return StepView(
        seq=row["seq"],
        step=row["step_name"],
        status=StepStatus(row["status"]),
        compensable=row["compensable"],
        pivot=row["pivot"],
        uncertain=row["uncertain"],
    )
