"""A plan's end completed in the fold (nexus.core.decide.plan_end): the plan id and an abort's position come
from the order's state read under its lock. Pure."""

from __future__ import annotations

import uuid

from nexus.core.decide.plan_end import ended_envelope
from nexus.core.envelope import parse_envelope
from nexus.core.order_state import OrderState


def _abort() -> dict[str, object]:
    return {
        "event_id": str(uuid.uuid4()), "event_type": "ABORT_PLAN", "plan_id": "p-placeholder", "order_id": "o",
        "timestamp": "2026-01-01T00:00:00Z", "data": {"reason": "r", "abort_code": "manual", "aborted_at_seq": 0},
    }  # fmt: skip


def test_an_abort_takes_the_live_plan_and_its_last_seq() -> None:
    """A live order: its plan id and last seq, whatever the placeholders said."""
    ended = ended_envelope(
        parse_envelope(_abort()), OrderState("o", plan_id="p-live", status="created", last_seq=3), "p-s"
    )
    assert (ended.plan_id, ended.data["aborted_at_seq"], ended.data["abort_code"]) == ("p-live", 3, "manual")


def test_an_unstarted_plan_ends_as_the_started_plan() -> None:
    """No order yet: the started plan's id, at seq 0; no started plan either: the envelope's own."""
    assert ended_envelope(parse_envelope(_abort()), OrderState("o"), "p-started").plan_id == "p-started"
    assert ended_envelope(parse_envelope(_abort()), OrderState("o"), None).plan_id == "p-placeholder"


def test_a_replan_keeps_its_data_and_takes_the_live_plan() -> None:
    """A REPLAN's data (new plan, reason) is kept; its plan id is the live plan's."""
    raw = {**_abort(), "event_type": "REPLAN", "data": {"new_plan_id": "p-next", "reason": "r"}}
    ended = ended_envelope(parse_envelope(raw), OrderState("o", plan_id="p-live", status="created", last_seq=2), None)
    assert (ended.plan_id, ended.data) == ("p-live", {"new_plan_id": "p-next", "reason": "r"})
