"""A step's data judged on arrival by its order's process (`validation.data_verdict`), before its position
is looked at: refused, it is DEAD_LETTER INVALID_EVENT with the fields' paths, at every door alike. Which
process judges is in `validation`'s docstring. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from nexus.core.audit_chain import Entry
from nexus.core.decide.items import Incoming
from nexus.core.decide.rows import postgres_text
from nexus.core.decide.validation import data_verdict
from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import OrderState
from nexus.core.process_model import CompiledProcess, ProcessCatalog, Verdict
from nexus_wire.codes import Decision


def invalid_data(
    catalog: ProcessCatalog | None, state: OrderState, events: Sequence[EventEnvelope]
) -> dict[int, Verdict]:
    """Which of one order's arriving steps (by index) carry data their order's process refuses (which process
    that is: `validation`'s docstring)."""
    return arrival_data(catalog, state, events)[0]


def arrival_data(
    catalog: ProcessCatalog | None, state: OrderState, events: Sequence[EventEnvelope]
) -> tuple[dict[int, Verdict], dict[int, CompiledProcess]]:
    """`invalid_data`, and the steps whose data passed, each with the process that judged it (the fold does
    not check that data against that process again: `OrderContext.data_checked`)."""
    if catalog is None:
        return {}, {}
    pinned = catalog.get(state.process, state.process_version) if state.process is not None else None
    first: CompiledProcess | None = None
    found: dict[int, Verdict] = {}
    passed: dict[int, CompiledProcess] = {}
    for i, event in enumerate(events):
        process = pinned
        if state.process is None:
            named = event.process is not None or event.seq_id == 1
            process = catalog.get(event.process_name) if named else first
            if event.seq_id == 1 and first is None:
                first = process
        verdict = data_verdict(process, event)
        if verdict is not None:
            found[i] = verdict
        elif process is not None and event.seq_id is not None:  # a step without seq is not judged yet
            passed[i] = process
    return found, passed


def invalid_data_entry(item: Incoming, event: EventEnvelope, verdict: Verdict) -> Entry:
    """The decision log's record of a step dead-lettered for its data, in its order's chain."""
    return Entry(
        tenant_id=event.tenant_id, order_id=event.order_id, decision=Decision.DEAD_LETTER.value,
        event_id=str(event.event_id), plan_id=event.plan_id, seq=event.seq_id, event_type=str(event.event_type),
        code=verdict.code.value, message=postgres_text(verdict.message)[:1000], actor=item.actor,
        actor_name=item.actor_name,
    )  # fmt: skip
