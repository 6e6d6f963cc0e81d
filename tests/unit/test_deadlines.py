"""Deadlines in the pure decision table: set on a plan's first step, clipped, enforced at `now`."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import yaml

from nexus.core.decide.deadlines import deadline_abort, unstarted_overdue
from nexus.core.decide.log import resolution_entries
from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import OrderState
from nexus.core.process_compile import compile_definition
from nexus.core.process_model import ProcessCatalog
from nexus.core.sequencing import resolve
from nexus.processes import builtin_catalog
from nexus_wire.codes import Decision
from tests.factories import step, step_json

O, P = "order-d", "plan-d"  # noqa: E741
NOW = dt.datetime(2026, 6, 1, 12, tzinfo=dt.UTC)
LIMITS = {"max_order_amount": Decimal(100000)}


def timed_yaml(default_s: float | None = 60, max_s: float | None = 3600) -> str:
    """The built-in order process under the name `timed`, with a deadline section."""
    order = builtin_catalog().get("order")
    assert order is not None
    raw = json.loads(order.definition.model_dump_json(by_alias=True, exclude_none=True))
    raw["name"], raw["deadline"] = "timed", {k: v for k, v in {"default_s": default_s, "max_s": max_s}.items() if v}
    return str(yaml.safe_dump(raw))


def timed_catalog(default_s: float | None = 60, max_s: float | None = 3600) -> ProcessCatalog:
    return ProcessCatalog.of([compile_definition(timed_yaml(default_s, max_s))])


def first(deadline: dt.datetime | None = None) -> EventEnvelope:
    body = step_json(O, P, 1, process="timed")
    if deadline is not None:
        body["deadline"] = deadline.isoformat()
    return EventEnvelope.model_validate(body)


def run(state: OrderState, *events: EventEnvelope, now: dt.datetime = NOW, catalog: ProcessCatalog | None = None):  # type: ignore[no-untyped-def]
    return resolve(state, list(events), {}, catalog=catalog or timed_catalog(), limits=LIMITS, now=now)


def test_first_step_sets_the_default_deadline() -> None:
    """Without an envelope deadline the process's default_s from now applies, not clipped."""
    res = run(OrderState(O), first())
    assert res.after.deadline_at == NOW + dt.timedelta(seconds=60)
    assert res.deadlines[res.decisions[0][0].event_id] == (NOW + dt.timedelta(seconds=60), False)


def test_a_deadline_beyond_the_maximum_is_clipped_and_said() -> None:
    """An envelope deadline later than now + max_s is clipped to it, and the resolution says so."""
    res = run(OrderState(O), first(NOW + dt.timedelta(days=30)))
    assert res.deadlines[res.decisions[0][0].event_id] == (NOW + dt.timedelta(hours=1), True)
    within = run(OrderState(O), first(NOW + dt.timedelta(minutes=5)))
    assert within.after.deadline_at == NOW + dt.timedelta(minutes=5)


def test_past_deadline_aborts_before_the_next_step_which_is_discarded() -> None:
    """A step arriving after the deadline finds the plan aborted (timeout) first, and is DISCARD."""
    state = run(OrderState(O), first()).after
    late = NOW + dt.timedelta(seconds=61)
    res = run(state, step(O, P, 2), now=late)
    assert [d for _, d, _ in res.decisions] == [Decision.DISCARD]
    assert [a.event.data["abort_code"] for a in res.applied] == ["timeout"]
    assert res.after.status == "aborted" and res.after.deadline_at is None
    entries = resolution_entries(res, {})
    assert [(e.event_type, e.decision) for e in entries] == [("ABORT_PLAN", "APPLY"), ("InventoryValidated", "DISCARD")]


def test_sweeper_abort_applies_once_and_only_when_due() -> None:
    """The sweeper's abort: DUPLICATE before the deadline, APPLY once after it, DUPLICATE when resent."""
    state = run(OrderState(O), first()).after
    abort = deadline_abort(state, "default", NOW)
    assert [d for _, d, _ in run(state, abort).decisions] == [Decision.DUPLICATE]
    late = NOW + dt.timedelta(seconds=61)
    once = run(state, abort, abort, now=late)
    assert [d for _, d, _ in once.decisions] == [Decision.APPLY, Decision.DUPLICATE]
    assert len(once.applied) == 1


def test_no_deadline_without_clock_or_definition() -> None:
    """Without `now`, or a process with no deadline and an envelope without one, no deadline is set."""
    assert run(OrderState(O), first(), catalog=timed_catalog(None, None)).after.deadline_at is None
    res = resolve(OrderState(O), [first()], {}, catalog=timed_catalog(), limits=LIMITS)
    assert res.after.deadline_at is None


def test_an_unstarted_plan_is_overdue_only_past_its_implicit_deadline() -> None:
    """A plan with no step (no status, no tombstone) is overdue once its read deadline passed, never before."""
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    past, future = now - dt.timedelta(seconds=1), now + dt.timedelta(seconds=1)
    assert unstarted_overdue(OrderState("o", deadline_at=past), now)
    assert not unstarted_overdue(OrderState("o", deadline_at=future), now)
    assert not unstarted_overdue(OrderState("o"), now)
    assert not unstarted_overdue(OrderState("o", deadline_at=past, tombstone=True), now)
    assert not unstarted_overdue(OrderState("o", deadline_at=past, status="created"), now)
    assert not unstarted_overdue(OrderState("o", deadline_at=past), None)
