"""A plan's abort meeting its open saga, decided by the fold (nexus.core.decide.saga_abort, `BatchPlan.turns`):
an open saga before its pivot turns to compensation, nothing else does. Pure."""

from __future__ import annotations

import itertools

from nexus.core.decide.items import Incoming, IngressKind
from nexus.core.decide.plan import BatchPlan, BatchReads, Parts, plan_batch
from nexus.core.decide.saga_abort import SagaGate, SagaTurn, compensating
from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import OrderState
from nexus.core.saga import SagaStatus
from nexus.core.sequencing import resolve
from nexus.processes import builtin_catalog
from tests.factories import abort_json, step_json

CATALOG = builtin_catalog()
KEY = ("default", "o")


def _step(seq: int) -> EventEnvelope:
    return EventEnvelope.model_validate(step_json("o", "p", seq, process="fulfilment"))


def _abort() -> Incoming:
    return Incoming.of(EventEnvelope.model_validate(abort_json("o", "p", process="fulfilment")))


def _created() -> OrderState:
    """An order of the fulfilment process with its first step applied (no effect in flight)."""
    return resolve(OrderState("o"), [_step(1)], {}, catalog=CATALOG).after


def _fold(items: list[Incoming], gates: dict[tuple[str, str], SagaGate]) -> BatchPlan:
    reads = BatchReads(states={KEY: _created()}, gates=gates)
    return plan_batch(items, reads, Parts(CATALOG), kind=IngressKind.HTTP, now=None)


def test_an_abort_turns_an_open_saga_before_its_pivot_and_nothing_else() -> None:
    """Every saga status, pivot completed or not: the abort turns the saga to COMPENSATING (expecting the
    status it read) exactly when it is PENDING or RUNNING and its pivot has not completed."""
    for status, past_pivot in itertools.product(SagaStatus, (False, True)):
        plan = _fold([_abort()], {KEY: SagaGate(status, past_pivot)})
        assert [a.decision.value for a in plan.answers] == ["APPLY"]
        turns = status in (SagaStatus.PENDING, SagaStatus.RUNNING) and not past_pivot
        expected = (SagaTurn("default", "o", SagaStatus.COMPENSATING, status),) if turns else ()
        assert plan.turns == expected, (status, past_pivot)


def test_an_abort_of_an_order_without_a_saga_turns_nothing() -> None:
    """No saga read for the order and none begun by the batch: the abort writes no saga row."""
    assert _fold([_abort()], {}).turns == ()


def test_a_saga_begun_in_the_same_batch_turns_from_pending() -> None:
    """A step with an effect takes its seq (its saga is new: PENDING), then the batch's abort turns it,
    expecting PENDING; a second abort of the batch finds it turned and writes nothing more."""
    plan = _fold([Incoming.of(_step(2)), _abort(), _abort()], {})
    assert [a.decision.value for a in plan.answers] == ["APPLY", "APPLY", "DUPLICATE"]
    assert plan.turns == (SagaTurn("default", "o", SagaStatus.COMPENSATING, SagaStatus.PENDING),)


def test_steps_without_an_abort_turn_no_saga() -> None:
    """A batch of steps only (an open saga holding the order) turns nothing."""
    resolution = resolve(_created(), [_step(2)], {}, catalog=CATALOG)
    assert compensating([resolution], {KEY: SagaGate(SagaStatus.RUNNING, past_pivot=False)}) == ()
