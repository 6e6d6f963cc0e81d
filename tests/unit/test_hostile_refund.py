"""The hostile modes on `refund` plans: paths through refund's definition, hallucinations mapped to its fields."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from decimal import Decimal

import pytest

from nexus.core import definitions
from nexus.core.envelope import EventEnvelope
from nexus.processes import shipped
from nexus_lab.agent import hostile, paths
from nexus_lab.agent.hostile import Mode
from nexus_lab.agent.hostile_messages import HostileStream, Message
from nexus_lab.agent.processes import REFUND
from nexus_wire.codes import ABORT_STEP
from tests.factories import fold_messages

HALLUCINATIONS = {mode: 1.0 for mode in hostile.REJECTED_MODES}
# Every mode whose outcome is known from the messages alone (a stall needs the deadline sweep, an approval a
# person; refund has no approval variant anyway).
MOST = {mode: 0.5 for mode in Mode if mode not in (Mode.STALL, Mode.APPROVAL)}


def stream_plan(plan: paths.PathPlan, actions: Sequence[hostile.Action]) -> list[Message]:
    """A refund plan's messages, streamed through its hostile moves as the runner sends them."""
    stream = HostileStream(
        hostile.schedule(plan.shape, actions), order_id="o-1", plan_id="p-1", process="refund", lab=REFUND
    )
    sent = [*stream.ready()]
    for name, data in zip(plan.shape, plan.data, strict=True):
        seq = None if name == ABORT_STEP else len(stream.honest) + 1
        event = EventEnvelope(
            event_id=uuid.uuid4(), event_type=name, plan_id="p-1", order_id="o-1", seq_id=seq,
            timestamp=dt.datetime.now(dt.UTC), data=data,
        )  # fmt: skip
        sent += stream.push(event)
    assert stream.done
    return sent


def run(seed: str, rates: dict[Mode, float], failures: float = 0.3) -> tuple[paths.PathPlan, list[Message]]:
    """The refund plan of `seed` and its messages under the moves its seed picks at these rates."""
    plan = paths.refund_plan(seed, failures, failures)
    return plan, stream_plan(plan, hostile.choose(seed, rates, plan.shape, REFUND))


def test_refund_plans_are_paths_of_its_definition() -> None:
    """Every refund plan's steps are a path of refund.yaml (or its first step then ABORT_PLAN), and each of
    its three paths is taken by some seed."""
    taken = set()
    for i in range(60):
        plan = paths.refund_plan(f"s:{i}", 0.2, 0.3)
        if plan.shape[-1] == ABORT_STEP:
            assert plan.shape == (REFUND.steps[0], ABORT_STEP)
        else:
            assert plan.shape in definitions.plans(shipped("refund"))
            taken.add(plan.shape)
    assert len(taken) == 3


@pytest.mark.parametrize("rates", [HALLUCINATIONS, MOST], ids=["hallucinations", "most-modes"])
def test_refund_plans_end_as_honest_whatever_the_modes(rates: dict[Mode, float]) -> None:
    """The pure core answers each message of a refund plan as expected (REJECTED with the mapped code for
    every hallucination) and the refund ends as its honest path says (a replan adds its own notification)."""
    used: set[Mode] = set()
    for i in range(40):
        plan, sent = run(f"refund:{i}", rates)
        decisions, state = fold_messages("o-1", sent)
        assert decisions == [m.expected for m in sent]
        replans = sum(m.event_type == "REPLAN" for m in sent)
        expected = (plan.expected.status, plan.expected.last_seq, plan.expected.notifications + replans)
        assert (state.status, state.last_seq, state.outbox_count) == expected
        used |= {m.mode for m in sent if m.mode is not None}
    if rates is HALLUCINATIONS:  # each hallucination acts on some refund (two at most per plan)
        assert set(hostile.REJECTED_MODES) <= used


def test_wrong_amount_and_currency_falsify_refund_paid() -> None:
    """On a refund, wrong_amount and wrong_currency send RefundPaid with the requested amount plus one, or
    another currency, at the boundary before the honest RefundPaid."""
    plan = next(p for i in range(50) if (p := paths.refund_plan(f"w:{i}")).shape == REFUND.steps)
    assert hostile.candidates(Mode.WRONG_AMOUNT, plan.shape, None, (), REFUND) == [2]
    requested = plan.data[0]
    for mode in (Mode.WRONG_AMOUNT, Mode.WRONG_CURRENCY):
        _, sent = _with_actions(plan, [hostile.Action(mode, 2)])
        (bad,) = [m for m in sent if m.mode is mode]
        assert bad.envelope is not None and bad.event_type == "RefundPaid" and bad.seq_id == 3
        if mode is Mode.WRONG_AMOUNT:
            assert Decimal(bad.envelope.data["amount"]) == Decimal(str(requested["amount"])) + 1
        else:
            assert bad.envelope.data["currency"] != requested["currency"]
        assert bad.expected_code == "CHECK_FAILED"


def test_after_completion_resends_a_refund_step_once_paid() -> None:
    """After a paid (or rejected) refund, after_completion sends the plan's step before last at the next seq:
    REJECTED AFTER_TERMINAL."""
    for shape in definitions.plans(shipped("refund")):
        assert hostile.candidates(Mode.AFTER_COMPLETION, shape, None, (), REFUND) == [len(shape)]
    assert hostile.candidates(Mode.AFTER_COMPLETION, (REFUND.steps[0], ABORT_STEP), None, (), REFUND) == []


def test_refund_gets_fewer_hallucinations_than_its_max_rejections() -> None:
    """refund aborts a plan at its 3rd rejected step: a refund plan never carries more than 2 hallucinations,
    while an order plan (no max_rejections) takes all that apply."""
    for i in range(30):
        plan = paths.refund_plan(f"c:{i}")
        actions = hostile.choose(f"c:{i}", HALLUCINATIONS, plan.shape, REFUND)
        assert sum(a.mode in hostile.REJECTED_MODES for a in actions) <= 2


def _with_actions(plan: paths.PathPlan, actions: list[hostile.Action]) -> tuple[paths.PathPlan, list[Message]]:
    sent = stream_plan(plan, actions)
    decisions, _ = fold_messages("o-1", sent)
    assert decisions == [m.expected for m in sent]
    return plan, sent
