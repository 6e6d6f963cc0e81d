"""The sequencing hooks of sagas: a step with an effect takes its seq but holds the order."""

from __future__ import annotations

import dataclasses

from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import OrderState
from nexus.core.sequencing import complete_effect, resolve
from nexus.errors import ErrorCode
from nexus.processes import builtin_catalog
from nexus_wire.codes import Decision
from tests.factories import abort, step_json

CATALOG = builtin_catalog()


def _step(seq: int) -> EventEnvelope:
    return EventEnvelope.model_validate(step_json("o", "p", seq, process="fulfilment"))


def test_an_effect_step_applies_without_status_or_notification_and_holds_its_successor() -> None:
    """InventoryValidated is APPLY with the status kept and no notification; PaymentProcessed is BUFFER
    although it is last_seq + 1; a resend of the effect step is DUPLICATE."""
    first = resolve(OrderState("o"), [_step(1), _step(2), _step(3), _step(2)], {}, catalog=CATALOG)
    decisions = [d for _, d, _ in first.decisions]
    assert decisions == [Decision.APPLY, Decision.APPLY, Decision.BUFFER, Decision.DUPLICATE]
    after = first.after
    assert (after.status, after.last_seq, after.outbox_count) == ("created", 2, 1)
    assert after.effect == {"step": "InventoryValidated", "seq": 2, "status": "running", "attempts": 0}
    assert [a.effect for a in first.applied] == [False, True]


def test_completing_the_effect_applies_the_step_and_drains_into_the_next_effect() -> None:
    """Once the effect succeeded, the step moves the status and is notified; its buffered successor
    drains and, having an effect too, holds the order in its turn."""
    first = resolve(OrderState("o"), [_step(1), _step(2), _step(3)], {}, catalog=CATALOG)
    pending = {3: first.buffered[0]}
    done = complete_effect(first.after, _step(2), pending, catalog=CATALOG)
    assert (done.after.status, done.after.last_seq, done.after.outbox_count) == ("inventory_validated", 3, 2)
    assert [(a.event.seq_id, a.effect) for a in done.applied] == [(2, False), (3, True)]
    assert done.after.effect is not None and done.after.effect["seq"] == 3


def test_an_abort_past_the_pivot_is_rejected_and_before_it_applies() -> None:
    """With the pivot completed an agent's ABORT_PLAN is REJECTED PAST_PIVOT; without, it applies."""
    state = resolve(OrderState("o"), [_step(1)], {}, catalog=CATALOG).after
    past = resolve(dataclasses.replace(state, past_pivot=True), [abort("o", "p", 1)], {}, catalog=CATALOG)
    assert past.decisions[0][1] is Decision.REJECTED and past.rejections[0].verdict.code is ErrorCode.PAST_PIVOT
    before = resolve(state, [abort("o", "p", 1)], {}, catalog=CATALOG)
    assert before.decisions[0][1] is Decision.APPLY and before.after.status == "aborted"
