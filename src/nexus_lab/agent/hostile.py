"""Hostile-agent modes: pure functions over the sequence of events a plan sends.

The honest plan is the graph's events in order (e_0 .. e_{n-1}). A hostile mode adds or moves messages
around them, and each message carries the decision the gateway must answer, so a plan's expected outcome
stays computable from the report alone: whatever the modes did, the order ends as the honest plan says
(status, last_seq, one notification per honest event) and every hostile message is absorbed.

| mode          | what the agent does                                   | expected decision           |
|---------------|-------------------------------------------------------|-----------------------------|
| duplicate     | resends a step right after sending it (same event_id) | DUPLICATE                   |
| out_of_order  | sends steps i+1 then i (two consecutive steps)        | BUFFER, then APPLY (drains) |
| restart       | "restarts" mid-plan and resends 1..k with new ids     | DUPLICATE each              |
| zombie        | sends the next step after its own ABORT_PLAN          | DISCARD                     |
| other_plan    | sends a step with another plan_id, once the order     | PLAN_MISMATCH (dead letter) |
|               | exists (before it would create it under that plan)    |                             |
| malformed     | sends a message that is not a valid envelope          | DEAD_LETTER                 |
| skipped_step  | sends the step after next in the next step's seq      | REJECTED INVALID_TRANSITION |
| wrong_amount  | pays more than the order's total                      | REJECTED CHECK_FAILED       |
| wrong_currency| pays in another currency than the order's             | REJECTED CHECK_FAILED       |
| invented_step | sends a step type the process does not have           | REJECTED UNKNOWN_STEP       |
| after_completion | sends one more step once the order is completed    | REJECTED AFTER_TERMINAL     |
| replan        | replaces its plan mid-order (REPLAN), goes on under   | APPLY (one notification);   |
|               | the new plan, then resends a step of the old plan     | the straggler DISCARD       |
|               |                                                       | PLAN_SUPERSEDED             |
| stall         | never sends its last step; its first step carries a   | the gateway aborts the plan |
|               | deadline (`stall_deadline_s` from the plan's start)   | (abort_code timeout)        |
| approval      | places an order above 1000.00 in `order_reviewed`,    | PaymentProcessed HELD, its  |
|               | sends every step, then a lab approver approves it     | successors BUFFER; approved:|
|               | (variant `approve`) or denies it (`deny`) and the     | all apply; denied: REJECTED |
|               | agent then aborts its plan at seq 2                   | APPROVAL_DENIED, the abort  |
|               |                                                       | applies, nothing else does  |

The last three are the plan lifecycle's. Approval is drawn last; it yields to a plan that
replans, stalls or sends after completion, and on the plans it takes it keeps only the moves done before the
held step is sent (resends, swaps and extras up to it), so every message's decision stays known in advance.
A replanned plan ends on its new plan (`<plan>-r`); a stalled one ends aborted by the gateway with one more
notification than its honest events. A replan goes at a boundary at or after every restart and
hallucination (those resend under the plan they started with); a stall only where nothing else acts on its
last step, and never with a replan (a REPLAN without a deadline clears the plan's).

The last five are the hallucinations the order's process catches: each is sent at a boundary,
is rejected with its code and changes nothing, so the honest plan's outcome stands. They act on any process
the lab runs (`processes.LabProcess`): the skipped step is the main plan's step after next (where the
definition does not allow it), wrong amount and currency falsify the process's money step, and after
completion resends the plan's step before last once the order reached a terminal state. A process with
`max_rejections` gets fewer hallucinations than that per plan (more would abort it: policy_violation).

Extras (restart, other_plan, malformed, zombie) go at a boundary: a point where every honest event before
it was sent and none after it, never inside an out-of-order pair, so the gateway's state there is exactly
"the first b honest events applied". Which modes a plan uses, and where, depends only on its seed
(`random.Random(f"{seed}/hostile")`, two draws per mode in a fixed order, used or not).
"""

from __future__ import annotations

import dataclasses
import enum
import random
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from nexus_lab.agent.processes import ORDER, LabProcess
from nexus_wire.codes import ABORT_STEP, Decision


class Mode(enum.StrEnum):
    DUPLICATE = "duplicate"
    OUT_OF_ORDER = "out_of_order"
    RESTART = "restart"
    ZOMBIE = "zombie"
    OTHER_PLAN = "other_plan"
    MALFORMED = "malformed"
    SKIPPED_STEP = "skipped_step"
    WRONG_AMOUNT = "wrong_amount"
    WRONG_CURRENCY = "wrong_currency"
    INVENTED_STEP = "invented_step"
    AFTER_COMPLETION = "after_completion"
    REPLAN = "replan"
    STALL = "stall"
    APPROVAL = "approval"


# The order modes are drawn in: out_of_order first, since it decides which boundaries exist.
DRAW_ORDER: tuple[Mode, ...] = (
    Mode.OUT_OF_ORDER,
    Mode.DUPLICATE,
    Mode.RESTART,
    Mode.OTHER_PLAN,
    Mode.MALFORMED,
    Mode.ZOMBIE,
    # Drawn after the older modes so that a seed's older moves stay where they were.
    Mode.SKIPPED_STEP,
    Mode.WRONG_AMOUNT,
    Mode.WRONG_CURRENCY,
    Mode.INVENTED_STEP,
    Mode.AFTER_COMPLETION,
    Mode.REPLAN,
    Mode.STALL,
    Mode.APPROVAL,
)
# The plan-lifecycle modes: only explicit rates turn them on (not the `--hostile-rate` default).
LIFECYCLE_MODES: tuple[Mode, ...] = (Mode.REPLAN, Mode.STALL, Mode.APPROVAL)
REPLAN_SUFFIX = "-r"
# The approval mode: the process whose payments above the threshold wait for a person, the held
# step's index, what the approver answers (variant: drawn from the plan's seed) and how often it approves.
APPROVAL_PROCESS = "order_reviewed"
APPROVAL_THRESHOLD = Decimal(1000)
HELD_AT = ORDER.steps.index(ORDER.money_step)
APPROVE, DENY = "approve", "deny"
APPROVE_SHARE = 0.5
# The moves that shape a whole plan, which an approval plan yields to (it never takes them away).
WHOLE_PLAN_MODES = (Mode.AFTER_COMPLETION, Mode.REPLAN, Mode.STALL)
# The order extras take at one boundary: the draw order of the modes that send an extra there (not
# out_of_order and duplicate, which act at an honest step's index, nor stall and approval, which change how an
# honest step is sent). REPLAN comes last: what follows it at the boundary would go under the new plan.
BOUNDARY_ORDER: tuple[Mode, ...] = tuple(
    m for m in DRAW_ORDER if m not in (Mode.OUT_OF_ORDER, Mode.DUPLICATE, Mode.STALL, Mode.APPROVAL)
)
# The hallucinations the process rejects: mode -> the code the gateway answers (the mutation's name is the mode's).
REJECTED_MODES: dict[Mode, str] = {
    Mode.SKIPPED_STEP: "INVALID_TRANSITION",
    Mode.WRONG_AMOUNT: "CHECK_FAILED",
    Mode.WRONG_CURRENCY: "CHECK_FAILED",
    Mode.INVENTED_STEP: "UNKNOWN_STEP",
    Mode.AFTER_COMPLETION: "AFTER_TERMINAL",
}
INVENTED_TYPE = "OrderTeleported"

MALFORMED_VARIANTS: dict[str, str] = {
    # variant -> the error code the gateway gives it
    "not_json": "PARSE_ERROR",
    "missing_plan_id": "INVALID_EVENT",
    "wrong_seq_id": "INVALID_EVENT",
    "negative_quantity": "INVALID_EVENT",
}
OTHER_PLAN_SUFFIX = "-impostor"


@dataclasses.dataclass(frozen=True, slots=True)
class Action:
    """One hostile move: `at` is an honest index (duplicate, out_of_order) or a boundary (the others)."""

    mode: Mode
    at: int
    variant: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class SendSpec:
    """One message to send, described by reference to the honest event it is built from.

    `ref` is the honest index it derives from (None: needs none). `mutation` says how it is built:
    "as_is" (the honest event itself, or its exact resend), "new_id", "other_plan", "zombie", "malformed".
    """

    ref: int | None
    mutation: str
    mode: Mode | None
    honest: bool
    expected: Decision
    expected_code: str | None = None
    variant: str | None = None

    @property
    def needs(self) -> int:
        """How many honest events must exist before this message can be built."""
        return 0 if self.ref is None else self.ref + 1


def _is_step(event_type: str) -> bool:
    return event_type != ABORT_STEP


def candidates(
    mode: Mode,
    shape: Sequence[str],
    swap_at: int | None,
    chosen: Sequence[Action] = (),
    lab: LabProcess = ORDER,
) -> list[int]:
    """Where `mode` may act in a plan of this shape (honest event types) of `lab`'s process, given the
    out-of-order pair and the actions already chosen."""
    n = len(shape)
    steps = lab.steps
    boundaries = [b for b in range(n + 1) if swap_at is None or b != swap_at + 1]
    if mode is Mode.OUT_OF_ORDER:
        return [i for i in range(n - 1) if _is_step(shape[i]) and _is_step(shape[i + 1])]
    if mode is Mode.DUPLICATE:
        return list(range(n))
    if mode is Mode.RESTART:
        # Mid-plan: something was sent, nothing terminal yet.
        return [b for b in boundaries if 1 <= b < n and all(_is_step(t) for t in shape[:b])]
    if mode is Mode.OTHER_PLAN:
        # Only once the order exists (a step was sent), else the impostor would create it.
        return [b for b in boundaries if b >= 1 and any(_is_step(t) for t in shape[:b])]
    if mode is Mode.MALFORMED:
        return boundaries
    if mode is Mode.ZOMBIE:
        aborted = n >= 1 and shape[-1] == ABORT_STEP and n - 1 < len(steps)
        return [n] if aborted else []
    live = [b for b in boundaries if b < n and all(_is_step(t) for t in shape[:b])]
    if mode is Mode.SKIPPED_STEP:  # the main plan's step after next, where the process does not allow it
        return [b for b in live if b + 1 < len(steps) and steps[b + 1] not in lab.allowed_from(shape[:b])]
    if mode is Mode.INVENTED_STEP:
        return live
    if mode in (Mode.WRONG_AMOUNT, Mode.WRONG_CURRENCY):
        return [b for b in live if b >= 1 and shape[b] == lab.money_step]
    if mode is Mode.AFTER_COMPLETION:
        return [n] if n >= 2 and lab.completes(shape) and n in boundaries else []
    if mode is Mode.REPLAN:
        resent = [a.at for a in chosen if a.mode is Mode.RESTART or a.mode in REJECTED_MODES]
        return [b for b in live if b >= 1 and b >= max(resent, default=0)]
    if mode is Mode.STALL:
        late = any(a.at >= n - 1 or a.mode is Mode.REPLAN for a in chosen)
        pair = swap_at is not None and swap_at + 1 == n - 1
        stallable = n >= 2 and _is_step(shape[-1]) and not late and not pair
        return [n - 1] if stallable else []
    if mode is Mode.APPROVAL:
        whole = any(a.mode in WHOLE_PLAN_MODES for a in chosen)
        approvable = lab.approval_process is not None and tuple(shape) == steps
        return [HELD_AT] if approvable and not whole else []
    raise AssertionError(mode)


def _before_held(action: Action) -> bool:
    """Whether a move is done before an approval plan's held step is sent (so its decision does not
    depend on the hold): a resend or swap of the steps before it, or an extra at a boundary up to it."""
    if action.mode is Mode.DUPLICATE:
        return action.at < HELD_AT
    if action.mode is Mode.OUT_OF_ORDER:
        return action.at + 1 < HELD_AT
    return action.at <= HELD_AT


def choose(seed: str, rates: Mapping[Mode, float], shape: Sequence[str], lab: LabProcess = ORDER) -> tuple[Action, ...]:
    """The hostile actions of one plan, from its seed only (a mode whose rate is 0 never acts)."""
    rng = random.Random(f"{seed}/hostile")
    actions: list[Action] = []
    swap_at: int | None = None
    for mode in DRAW_ORDER:
        roll, pick, variant_pick = rng.random(), rng.random(), rng.random()
        if roll >= rates.get(mode, 0.0):
            continue
        where = candidates(mode, shape, swap_at, actions, lab)
        if not where:
            continue
        at = where[int(pick * len(where))]
        variant = None
        if mode is Mode.MALFORMED:
            names = sorted(MALFORMED_VARIANTS)
            variant = names[int(variant_pick * len(names))]
        if mode is Mode.OUT_OF_ORDER:
            swap_at = at
        if mode is Mode.APPROVAL:  # drawn last: it keeps the moves done before the held step is sent
            variant = APPROVE if variant_pick < APPROVE_SHARE else DENY
            actions = [a for a in actions if _before_held(a)]
        actions.append(Action(mode, at, variant))
    return tuple(_within_max_rejections(seed, actions, lab))


def _within_max_rejections(seed: str, actions: list[Action], lab: LabProcess) -> list[Action]:
    """A process that aborts a plan at its max_rejections-th rejected step keeps one fewer hallucinations
    at most, drawn from the seed (dropping one never makes another move's decision uncertain)."""
    rejected = [a for a in actions if a.mode in REJECTED_MODES]
    if lab.max_rejections is None or len(rejected) < lab.max_rejections:
        return actions
    kept = random.Random(f"{seed}/hostile/rejections").sample(rejected, lab.max_rejections - 1)
    return [a for a in actions if a.mode not in REJECTED_MODES or a in kept]


def schedule(shape: Sequence[str], actions: Sequence[Action]) -> list[SendSpec]:
    """The messages of one plan, in sending order, each with the decision the gateway must give it."""
    n = len(shape)
    swap_at = next((a.at for a in actions if a.mode is Mode.OUT_OF_ORDER), None)
    duplicated = {a.at for a in actions if a.mode is Mode.DUPLICATE}
    stalled = {a.at for a in actions if a.mode is Mode.STALL}
    replanned = next((a.at for a in actions if a.mode is Mode.REPLAN), None)
    held = next((a for a in actions if a.mode is Mode.APPROVAL), None)
    specs: list[SendSpec] = []

    def honest(i: int, expected: Decision, mode: Mode | None) -> None:
        if i in stalled:
            return  # never sent: the gateway's deadline ends the plan
        if i == 0 and shape[0] == ABORT_STEP:
            expected = Decision.TOMBSTONE
        if held is not None and i >= held.at:  # Held, then its successors wait; a denial voids them
            expected = Decision.HELD if i == held.at else Decision.BUFFER
            specs.append(SendSpec(i, "as_is", Mode.APPROVAL, held.variant == APPROVE, expected, variant=held.variant))
            return
        specs.append(SendSpec(i, "as_is", mode, True, expected))
        if i in duplicated:
            specs.append(SendSpec(i, "as_is", Mode.DUPLICATE, False, Decision.DUPLICATE))
        if i == replanned:  # the old plan's straggler, once the new plan's first step went
            specs.append(SendSpec(i, "straggler", Mode.REPLAN, False, Decision.DISCARD, "PLAN_SUPERSEDED"))

    i = 0
    specs += _boundary(shape, actions, 0)
    while i < n:
        if i == swap_at:
            honest(i + 1, Decision.BUFFER, Mode.OUT_OF_ORDER)
            honest(i, Decision.APPLY, Mode.OUT_OF_ORDER)
            i += 2
        else:
            honest(i, Decision.APPLY, None)
            i += 1
        specs += _boundary(shape, actions, i)
    return specs


def reviewed_order(order: Mapping[str, Any]) -> dict[str, Any]:
    """An approval plan's order: the sampled one plus an item of the threshold's price, so its
    total (and payment) is above it."""
    extra = {"product_id": "prod_reviewed", "quantity": 1, "unit_price": str(APPROVAL_THRESHOLD)}
    total = Decimal(str(order["total_amount"])) + APPROVAL_THRESHOLD
    return {**order, "items": [*order["items"], extra], "total_amount": str(total)}


def _boundary(shape: Sequence[str], actions: Sequence[Action], b: int) -> list[SendSpec]:
    """The extras sent at boundary `b`, in `BOUNDARY_ORDER`."""
    specs: list[SendSpec] = []
    for mode in BOUNDARY_ORDER:
        for action in actions:
            if action.mode is not mode or action.at != b:
                continue
            if mode is Mode.RESTART:
                specs.extend(SendSpec(j, "new_id", mode, False, Decision.DUPLICATE) for j in range(b))
            elif mode is Mode.OTHER_PLAN:
                ref = max(j for j in range(b) if _is_step(shape[j]))
                specs.append(SendSpec(ref, "other_plan", mode, False, Decision.PLAN_MISMATCH, "PLAN_MISMATCH"))
            elif mode is Mode.MALFORMED:
                assert action.variant is not None
                specs.append(
                    SendSpec(
                        b - 1 if b else None,
                        "malformed",
                        mode,
                        False,
                        Decision.DEAD_LETTER,
                        MALFORMED_VARIANTS[action.variant],
                        action.variant,
                    )
                )
            elif mode is Mode.ZOMBIE:
                specs.append(SendSpec(b - 1, "zombie", mode, False, Decision.DISCARD))
            elif mode is Mode.REPLAN:
                specs.append(SendSpec(b - 1, "replan", mode, True, Decision.APPLY))
            elif mode in REJECTED_MODES:
                after = b - 1 if b else None
                specs.append(SendSpec(after, mode.value, mode, False, Decision.REJECTED, REJECTED_MODES[mode]))
    return specs
