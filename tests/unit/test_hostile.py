"""Hostile-agent modes as pure functions: where they act, what they send, what the gateway must answer."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nexus.core.decide.data_check import invalid_data
from nexus.core.decide.deadlines import deadline_abort
from nexus.core.envelope import EventEnvelope, parse_envelope
from nexus.core.order_state import OrderState
from nexus.core.process_model import ABORTED, Verdict
from nexus.core.sequencing import resolve
from nexus.errors import ErrorCode, InvalidEventError
from nexus.processes import builtin_catalog
from nexus_lab.agent import hostile
from nexus_lab.agent.graph import EXPECTED, STEPS, Outcome, seq_of, shape_of
from nexus_lab.agent.hostile import Mode
from nexus_lab.agent.hostile_messages import HostileStream, Message, denied_abort, malformed_body
from nexus_wire.codes import ABORT_STEP, Decision
from tests.factories import Answer, fold_messages

PLANNED = (Outcome.COMPLETED, Outcome.INVENTORY_FAILED, Outcome.PAYMENT_REJECTED)
ALL_ON = dict.fromkeys(Mode, 1.0)
ORDER = [*STEPS, ABORT_STEP]


def honest_events(outcome: Outcome, order_id: str = "o-1", plan_id: str = "p-1") -> list[EventEnvelope]:
    """The events the graph would produce for this outcome."""
    shape = shape_of(outcome)
    events = []
    for event_type in shape:
        data: dict[str, object] = {}
        if event_type == ABORT_STEP:
            data = {"reason": "simulated", "abort_code": "inventory_failed", "aborted_at_seq": len(shape) - 1}
        events.append(
            EventEnvelope(
                event_id=uuid.uuid4(),
                event_type=event_type,
                plan_id=plan_id,
                order_id=order_id,
                seq_id=seq_of(event_type),
                timestamp=dt.datetime.now(dt.UTC),
                data=data,
            )
        )
    return events


def reviewed(events: list[EventEnvelope]) -> list[EventEnvelope]:
    """The honest events of an approval plan: an order above the threshold, paid in full."""
    order = hostile.reviewed_order(
        {"items": [{"product_id": "p", "quantity": 2, "unit_price": "2.50"}], "total_amount": "5.00"}
    )
    data = {1: {**order, "currency": "USD"}, 3: {"amount": order["total_amount"], "currency": "USD"}}
    return [e.model_copy(update={"data": data[e.seq_id]}) if e.seq_id in data else e for e in events]


def messages_for(outcome: Outcome, actions: Sequence[hostile.Action]) -> list[Message | Answer]:
    """Stream the honest events of `outcome` through the hostile moves, as the runner does (an
    approval plan's held step answered once every step was sent, and a denied plan's abort after it)."""
    held = next((a for a in actions if a.mode is Mode.APPROVAL), None)
    events = honest_events(outcome) if held is None else reviewed(honest_events(outcome))
    stream = HostileStream(
        hostile.schedule(shape_of(outcome), actions),
        order_id="o-1",
        plan_id="p-1",
        process=hostile.APPROVAL_PROCESS if held else None,
    )
    sent: list[Message | Answer] = [*stream.ready()]
    for event in events:
        sent += stream.push(event)
    assert stream.done
    if held is not None:
        verdict = None if held.variant == hostile.APPROVE else Verdict(ErrorCode.APPROVAL_DENIED, "denied")
        sent.append(Answer(stream.honest[held.at], verdict))
        if verdict is not None:
            sent.append(denied_abort(stream.honest, order_id="o-1", plan_id="p-1"))
    return sent


def fold(messages: Sequence[Message | Answer]) -> tuple[list[Decision], OrderState]:
    """What the pure core decides for each message, in order, and the order's final state."""
    return fold_messages("o-1", messages)


def test_zero_rates_choose_nothing() -> None:
    """With every rate at 0 no plan misbehaves, whatever its seed."""
    for i in range(50):
        assert hostile.choose(f"s:{i}", dict.fromkeys(Mode, 0.0), shape_of(Outcome.COMPLETED)) == ()


def test_choice_depends_only_on_the_seed() -> None:
    """The same seed, rates and shape give the same actions; another seed gives others somewhere."""
    rates = dict.fromkeys(Mode, 0.5)
    shape = shape_of(Outcome.COMPLETED)
    first = [hostile.choose(f"x:{i}", rates, shape) for i in range(30)]
    assert first == [hostile.choose(f"x:{i}", rates, shape) for i in range(30)]
    assert first != [hostile.choose(f"y:{i}", rates, shape) for i in range(30)]


@pytest.mark.parametrize(
    ("mode", "outcome", "expected"),
    [
        (Mode.OUT_OF_ORDER, Outcome.INVENTORY_FAILED, []),
        (Mode.OUT_OF_ORDER, Outcome.PAYMENT_REJECTED, [0]),
        (Mode.OUT_OF_ORDER, Outcome.COMPLETED, [0, 1, 2, 3]),
        (Mode.ZOMBIE, Outcome.COMPLETED, []),
        (Mode.ZOMBIE, Outcome.INVENTORY_FAILED, [2]),
        (Mode.OTHER_PLAN, Outcome.INVENTORY_FAILED, [1, 2]),
        (Mode.RESTART, Outcome.COMPLETED, [1, 2, 3, 4]),
        (Mode.RESTART, Outcome.PAYMENT_REJECTED, [1, 2]),
        (Mode.MALFORMED, Outcome.INVENTORY_FAILED, [0, 1, 2]),
        (Mode.DUPLICATE, Outcome.PAYMENT_REJECTED, [0, 1, 2]),
    ],
)
def test_candidates(mode: Mode, outcome: Outcome, expected: list[int]) -> None:
    """Each mode acts only where its expected decision is certain (e.g. no impostor before the order)."""
    assert hostile.candidates(mode, shape_of(outcome), None) == expected


def test_no_boundary_inside_an_out_of_order_pair() -> None:
    """Extras never land between the two halves of a swapped pair."""
    shape = shape_of(Outcome.COMPLETED)
    assert 2 not in hostile.candidates(Mode.MALFORMED, shape, swap_at=1)
    assert 2 not in hostile.candidates(Mode.RESTART, shape, swap_at=1)


@pytest.mark.parametrize("variant", sorted(hostile.MALFORMED_VARIANTS))
def test_malformed_variants_are_rejected_with_their_code(variant: str) -> None:
    """Every malformed variant fails envelope parsing, or its order's process's data check, with the code the
    report expects."""
    event = honest_events(Outcome.COMPLETED)[0]
    body = malformed_body(variant, event.model_dump(mode="json"))
    try:
        envelope = parse_envelope(body)
    except InvalidEventError as exc:
        code = exc.code
    else:
        refused = invalid_data(builtin_catalog(), OrderState(envelope.order_id), [envelope]).get(0)
        assert refused is not None
        code = refused.code
    assert code.value == hostile.MALFORMED_VARIANTS[variant]


def test_out_of_order_holds_the_first_half_until_its_successor_exists() -> None:
    """The stream sends nothing for step i of a swapped pair until step i+1 is produced, then i+1, i."""
    events = honest_events(Outcome.COMPLETED)
    specs = hostile.schedule(shape_of(Outcome.COMPLETED), [hostile.Action(Mode.OUT_OF_ORDER, 2)])
    stream = HostileStream(specs, order_id="o-1", plan_id="p-1")
    assert [m.seq_id for m in stream.push(events[0])] == [1]
    assert [m.seq_id for m in stream.push(events[1])] == [2]
    assert stream.push(events[2]) == []
    pair = stream.push(events[3])
    assert [(m.seq_id, m.expected) for m in pair] == [(4, Decision.BUFFER), (3, Decision.APPLY)]


def test_restart_resends_from_seq_one_with_new_ids() -> None:
    """A restart after step 3 resends steps 1..3 under new event_ids, each expected DUPLICATE."""
    sent = messages_for(Outcome.COMPLETED, [hostile.Action(Mode.RESTART, 3)])
    restarted = [m for m in sent if m.mode is Mode.RESTART]
    assert [m.seq_id for m in restarted] == [1, 2, 3]
    honest_ids = {m.event_id for m in sent if m.honest}
    assert not honest_ids & {m.event_id for m in restarted}
    assert all(m.expected is Decision.DUPLICATE for m in restarted)


def test_zombie_is_the_step_after_the_abort() -> None:
    """After an inventory failure (aborted at seq 1), the zombie is InventoryValidated, expected DISCARD."""
    sent = messages_for(Outcome.INVENTORY_FAILED, [hostile.Action(Mode.ZOMBIE, 2)])
    assert [(m.event_type, m.expected) for m in sent] == [
        ("OrderCreated", Decision.APPLY),
        ("ABORT_PLAN", Decision.APPLY),
        ("InventoryValidated", Decision.DISCARD),
    ]


def test_other_plan_keeps_the_order_and_changes_the_plan() -> None:
    """The impostor step names the same order under another plan_id and expects PLAN_MISMATCH."""
    sent = messages_for(Outcome.PAYMENT_REJECTED, [hostile.Action(Mode.OTHER_PLAN, 1)])
    impostor = next(m for m in sent if m.mode is Mode.OTHER_PLAN)
    assert impostor.envelope is not None and impostor.envelope.order_id == "o-1"
    assert impostor.plan_id == "p-1" + hostile.OTHER_PLAN_SUFFIX
    assert impostor.expected is Decision.PLAN_MISMATCH


@settings(max_examples=300, deadline=None)
@given(
    seed=st.text(min_size=1, max_size=8),
    outcome=st.sampled_from(PLANNED),
    rates=st.fixed_dictionaries({m: st.sampled_from([0.0, 0.5, 1.0]) for m in Mode}),
)
def test_expected_decisions_are_what_the_core_decides(seed: str, outcome: Outcome, rates: dict[Mode, float]) -> None:
    """Whatever modes a seed picks, the pure core answers each message as expected and ends as the honest plan
    (on its new plan after a replan, with the REPLAN's notification; aborted by the gateway's
    deadline sweep, one step short, after a stall; an approval plan's payment HELD and its successors
    BUFFER, then all applied once approved, or aborted at the seq before it once denied)."""
    actions = hostile.choose(seed, rates, shape_of(outcome))
    modes = {a.mode for a in actions}
    sent = messages_for(outcome, actions)
    decisions, final = fold(sent)
    assert decisions == [m.expected for m in sent]
    expected = EXPECTED[outcome]
    status, last_seq, notifications = expected.status, expected.last_seq, expected.notifications
    if Mode.STALL in modes:
        late = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        overdue = dataclasses.replace(final, deadline_at=late - dt.timedelta(seconds=1))  # the fold has no clock
        sweep = resolve(overdue, [deadline_abort(overdue, "default", late)], {}, catalog=builtin_catalog(), now=late)
        assert [d for _, d, _ in sweep.decisions] == [Decision.APPLY]
        final = sweep.after
        status, last_seq = ABORTED, last_seq - 1
    if Mode.REPLAN in modes:
        notifications += 1
    denied = any(a.mode is Mode.APPROVAL and a.variant == hostile.DENY for a in actions)
    if denied:
        status, last_seq, notifications = ABORTED, hostile.HELD_AT, hostile.HELD_AT + 1
    plan = "p-1" + hostile.REPLAN_SUFFIX if Mode.REPLAN in modes else "p-1"
    assert (final.status, final.last_seq, final.outbox_count, final.plan_id) == (status, last_seq, notifications, plan)
    messages = [m for m in sent if isinstance(m, Message)]
    honest = [m.event_type for m in messages if m.honest and m.event_type != "REPLAN"]
    shape = list(shape_of(outcome))
    if denied:
        shape = [*shape[: hostile.HELD_AT], ABORT_STEP]
    assert sorted(honest, key=ORDER.index) == (shape[:-1] if Mode.STALL in modes else shape)


def test_all_modes_on_each_acts_somewhere() -> None:
    """At rate 1 every mode applicable to an outcome acts on it."""
    for outcome in PLANNED:
        modes = {a.mode for a in hostile.choose("all", ALL_ON, shape_of(outcome))}
        applicable = {m for m in Mode if hostile.candidates(m, shape_of(outcome), None)}
        # The lifecycle modes yield to the others (a replan comes after every resend, a stall never
        # joins a replan nor a move on the plan's last step); alone, each acts wherever it can
        lifecycle = set(hostile.LIFECYCLE_MODES)
        assert modes - lifecycle == applicable - lifecycle
        for mode in hostile.LIFECYCLE_MODES:
            alone = {a.mode for a in hostile.choose("all", {mode: 1.0}, shape_of(outcome))}
            assert alone == ({mode} & applicable)


def test_an_approval_plan_keeps_only_the_moves_before_its_held_step() -> None:
    """Approval yields to a plan that replans, stalls or sends after completion; on the others it
    keeps exactly the moves done before the payment is sent; the seed decides the answer, both happen."""
    rates = {**dict.fromkeys(Mode, 0.5), Mode.APPROVAL: 1.0}
    answers, taken = set(), 0
    for i in range(200):
        shape = shape_of(Outcome.COMPLETED)
        actions = hostile.choose(f"a:{i}", rates, shape)
        without = hostile.choose(f"a:{i}", {**rates, Mode.APPROVAL: 0.0}, shape)
        held = [a for a in actions if a.mode is Mode.APPROVAL]
        if any(a.mode in hostile.WHOLE_PLAN_MODES for a in without):
            assert actions == without
            continue
        taken += 1
        assert [(a.at, a.variant in (hostile.APPROVE, hostile.DENY)) for a in held] == [(hostile.HELD_AT, True)]
        assert actions[:-1] == tuple(a for a in without if hostile._before_held(a))
        answers.add(held[0].variant)
    assert taken > 10 and answers == {hostile.APPROVE, hostile.DENY}
    assert all(a.mode is not Mode.APPROVAL for a in hostile.choose("x", ALL_ON, shape_of(Outcome.PAYMENT_REJECTED)))
