"""What a saga's outcome decides, in the pure core (nexus.core.decide.effects): a stale success applies
nothing, and compensation's end is the gateway's one `effect_failed` abort of a live order. Pure."""

from __future__ import annotations

import datetime as dt
import uuid

from nexus.core.decide.effects import effect_failed_abort, effect_outcome_stale
from nexus.core.envelope import parse_envelope
from nexus.core.order_state import OrderState
from tests.factories import step_json

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_a_success_is_stale_once_the_order_moved_on_or_aborted() -> None:
    """The effect's step still the order's last and the order live: not stale; otherwise stale."""
    event = parse_envelope(step_json("o", "p", 3))
    assert not effect_outcome_stale(OrderState("o", plan_id="p", status="created", last_seq=3), event)
    assert effect_outcome_stale(OrderState("o", plan_id="p", status="aborted", last_seq=3), event)
    assert effect_outcome_stale(OrderState("o", plan_id="p", status="created", last_seq=4), event)


def test_compensation_over_aborts_a_live_order_once_with_one_id() -> None:
    """A live order: ABORT_PLAN effect_failed at its last seq, with the id uuid5(tenant, order, plan); none
    for an aborted order, an order with no state or no plan."""
    abort = effect_failed_abort(OrderState("o", plan_id="p", status="created", last_seq=2), "t", "x" * 900, NOW)
    assert abort is not None
    namespace = uuid.UUID("5a9a7e0c-3c1b-4f7e-8a51-61626f727421")
    assert abort.event_id == uuid.uuid5(namespace, "t\x1fo\x1fp")
    assert (abort.plan_id, abort.data["abort_code"], abort.data["aborted_at_seq"]) == ("p", "effect_failed", 2)
    assert len(abort.data["reason"]) == 500
    assert effect_failed_abort(OrderState("o", plan_id="p", status="aborted"), "t", "r", NOW) is None
    assert effect_failed_abort(OrderState("o"), "t", "r", NOW) is None
