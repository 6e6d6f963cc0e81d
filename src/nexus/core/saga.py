"""Sagas: the effects a process's steps ask the gateway to perform, as pure state machines. No I/O.

A step whose definition declares an `effect` is applied at once (its seq is taken) but its order keeps
its status until the effect's call to a service has succeeded; the saga of the order records every such
step (seed 002: Garcia-Molina and Salem's (T1..Tn) or (T1..Tk, Ck..C1)). Position decides how a step is
retried, not its definition's keys: steps before the process's pivot are compensable, the pivot's success
commits the saga (`past_pivot`), and every step after it is a retriable transaction that must eventually
succeed. `nexus processes check` refuses a definition whose effects cannot keep that promise
(`effect_layout_problem`): an effect before the pivot without a compensation, or effects and no pivot.

Saga states (one `sagas` row per order; every transition lives here)::

    PENDING --(an executor takes its first step)---------------------------> RUNNING
    RUNNING --(a step's effect succeeds; the order reaches a terminal state)-> COMPLETED
    RUNNING --(a step before/at the pivot is refused, or its retries run out,
               or the plan is aborted before the pivot completed)--------------> COMPENSATING
    RUNNING --(after the pivot, or at an uncertain pivot: a permanent refusal
               or the retry budget's end)--------------------------------------> ESCALATED
    COMPENSATING --(the last completed compensable step is compensated)------> COMPENSATED (plan aborted)
    COMPENSATING --(a compensation is refused or its retry budget ends)-------> FAILED
    ESCALATED --(an operator redrives it: a new budget)------------------------> RUNNING
    FAILED    --(an operator redrives it: a new budget)------------------------> COMPENSATING

Step states (`saga_steps` rows)::

    PENDING --(claimed, call made)--> RUNNING --(2xx)--> COMPLETED --(compensation 2xx)--> COMPENSATED
    RUNNING --(transient: 5xx, 408, 429, no connection, timeout)--> RUNNING (same key, after a backoff)
    RUNNING --(refused: other 4xx, or its retries given up)--------> FAILED
    FAILED (outcome unknown: a timeout was among its attempts) --(compensation 2xx)--> COMPENSATED

Each attempt is marked before its call (`call_mark`: a forward call's step RUNNING and uncertain until its
outcome is written; a compensation changes neither). The attempt's number is the one value the database
computes (``attempts + 1`` in ``start_forwards``/``start_compensations``): a counter of calls begun, not a
decision. Two executors overlapping after a lease lapsed each make a call, and each call counts; the count
comes back as `Attempt.number`, from which everything else is decided here.

How a call's outcome is retried (`after_forward`, `after_compensation`); "transient" is a 5xx, 408, 429, a
timeout (outcome unknown), a refused or reset connection; "budget" is `NEXUS_SAGA_RETRY_BUDGET_S` (86,400)
counted from the step's first attempt (time held by an open breaker counts against it, not against the
attempts; a redrive starts a new one); every retry sends the same key after the capped exponential backoff
with jitter of `nexus_wire/backoff.py`, `Retry-After` honoured up to `NEXUS_SAGA_RETRY_MAX_MS`::

    | position                            | 2xx       | transient                           | other 4xx            |
    |-------------------------------------|-----------|-------------------------------------|----------------------|
    | before the pivot                    | COMPLETED | retry up to NEXUS_SAGA_MAX_ATTEMPTS, | FAILED, compensate   |
    |                                     |           | then FAILED, compensate             |                      |
    | the pivot, every outcome known      | COMPLETED | as before the pivot                 | FAILED, compensate   |
    | the pivot, an outcome unknown       | COMPLETED | retry within the budget, then       | FAILED, compensate   |
    |                                     |           | FAILED, saga ESCALATED              |                      |
    | after the pivot (`past_pivot`)      | COMPLETED | retry within the budget, then       | FAILED, saga         |
    |                                     |           | FAILED, saga ESCALATED              | ESCALATED            |
    | a compensation (any position)       | COMPENSATED | retry within the budget, then     | saga FAILED          |
    |                                     |           | saga FAILED                         |                      |

A call whose outcome is unknown (the client timed out; the service may have acted) is never guessed:
it is retried with the same key, and if it must be given up before the pivot it is compensated with its
own key named (`Compensates`), which settles it whether or not the service had recorded it.

Every call carries `Idempotency-Key = HMAC-SHA256(secret, tenant:order:plan:step:action)`: derived, so
every attempt of a call (by any executor, after any crash) sends the same key. Bodies are built by CEL
(the engine of `core/checks.py`) from the step's `data`, the order's facts (`order`), `step` and, for a
compensation, the forward call's answer (`result`).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from typing import Any

from nexus.core.checks import CheckSyntaxError, CompiledRule
from nexus.core.delivery import AttemptOutcome
from nexus.core.delivery import outcome_of_status as delivery_outcome_of_status
from nexus.core.process_model import Step
from nexus_wire.backoff import RetryPolicy, decide


class SagaStatus(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    COMPENSATING = "COMPENSATING"
    COMPENSATED = "COMPENSATED"
    FAILED = "FAILED"
    ESCALATED = "ESCALATED"

    @property
    def open(self) -> bool:
        """The saga holds its order: the next step waits (BUFFER) while it is open."""
        return self not in (SagaStatus.COMPLETED, SagaStatus.COMPENSATED)


class StepStatus(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    COMPENSATED = "COMPENSATED"


class Action(enum.StrEnum):
    FORWARD = "forward"
    COMPENSATE = "compensate"


class CallOutcome(enum.StrEnum):
    """How one call to a service ended."""

    SUCCEEDED = "succeeded"  # 2xx
    RETRYABLE = "retryable"  # 5xx, 408, 429, no connection (nothing reached the service)
    UNKNOWN = "unknown"  # timed out after sending: the service may have acted
    REFUSED = "refused"  # any other status: the service will never do it (e.g. a declined charge)


_CALL_OUTCOMES = {
    AttemptOutcome.DELIVERED: CallOutcome.SUCCEEDED,
    AttemptOutcome.RETRYABLE: CallOutcome.RETRYABLE,
    AttemptOutcome.REJECTED: CallOutcome.REFUSED,
}


def outcome_of_status(status: int) -> CallOutcome:
    """The outcome of a call the service answered with HTTP `status`: read as a webhook's answer is."""
    return _CALL_OUTCOMES[delivery_outcome_of_status(status)]


def idempotency_key(secret: bytes, tenant_id: str, order_id: str, plan_id: str, step: str, action: Action) -> str:
    """The key of every attempt of one call: HMAC-SHA256(secret, tenant:order:plan:step:action), hex."""
    message = f"{tenant_id}:{order_id}:{plan_id}:{step}:{action.value}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


@dataclasses.dataclass(frozen=True, slots=True)
class CallMark:
    """What marking a call's attempt writes over its step before the call is made; None keeps the column."""

    status: StepStatus | None
    uncertain: bool | None
    """Whether the service may have acted: true from the forward call's mark until its outcome is written."""


def call_mark(action: Action, status: StepStatus) -> CallMark:
    """The mark of an attempt of `action` on a step in `status`: a forward call (of a PENDING step, or a RUNNING
    one retried) makes it RUNNING and uncertain, so a crash after the call leaves it uncertain, never
    forgotten; a compensation keeps what its forward call left (`needs_compensation` read it)."""
    if action is Action.COMPENSATE:
        return CallMark(None, None)
    if status not in (StepStatus.PENDING, StepStatus.RUNNING):
        raise ValueError(f"a forward call is made for a pending or running step, not a {status.value} one")
    return CallMark(StepStatus.RUNNING, True)


@dataclasses.dataclass(frozen=True, slots=True)
class Work:
    """The next call of an open saga, or None when it waits for the agent's next step."""

    action: Action
    seq: int


def next_work(status: SagaStatus, steps: Sequence[StepView]) -> Work | None:
    """The one call an executor makes next for a saga: forward calls in seq order while RUNNING,
    compensations in reverse seq order while COMPENSATING (one at a time, so the order is structural)."""
    if status in (SagaStatus.PENDING, SagaStatus.RUNNING):
        for step in sorted(steps, key=lambda s: s.seq):
            if step.status in (StepStatus.PENDING, StepStatus.RUNNING):
                return Work(Action.FORWARD, step.seq)
        return None
    if status is SagaStatus.COMPENSATING:
        for step in sorted(steps, key=lambda s: -s.seq):
            if needs_compensation(step):
                return Work(Action.COMPENSATE, step.seq)
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class StepView:
    """What the state machines need of one `saga_steps` row."""

    seq: int
    step: str
    status: StepStatus
    compensable: bool
    pivot: bool = False
    uncertain: bool = False
    """An attempt timed out: the service may have acted, so giving up means compensating."""


def needs_compensation(step: StepView) -> bool:
    """A compensable step the service may have acted on: completed, or given up with an unknown outcome
    (including a call still RUNNING when its plan was aborted)."""
    if not step.compensable:
        return False
    if step.status is StepStatus.COMPLETED:
        return True
    return step.uncertain and step.status in (StepStatus.FAILED, StepStatus.RUNNING)


def past_pivot(steps: Sequence[StepView]) -> bool:
    """The pivot's effect completed: the saga is committed, nothing is compensated any more."""
    return any(s.pivot and s.status in (StepStatus.COMPLETED,) for s in steps)


@dataclasses.dataclass(frozen=True, slots=True)
class CallDecision:
    """What a call's outcome makes of its step and saga: the values the executor writes."""

    step: StepStatus
    saga: SagaStatus
    delay_ms: float | None = None
    """Retry the same call (same key) after this long; None: no retry."""
    uncertain: bool = False
    label: str = ""
    """The `result` label of `nexus_saga_steps_total`."""


@dataclasses.dataclass(frozen=True, slots=True)
class RetryRules:
    """How a saga's calls are retried: `policy` is the schedule (its `max_ms` also caps `Retry-After`) and,
    before the pivot, the count (`max_attempts`); `budget_s` bounds the retries after it and of
    compensations, from the step's first attempt."""

    policy: RetryPolicy
    budget_s: float = 86_400.0

    def __post_init__(self) -> None:
        if self.budget_s < 0:
            raise ValueError("the retry budget must not be negative")


@dataclasses.dataclass(frozen=True, slots=True)
class Attempt:
    """One finished call: its number (from 1, since the budget began), its outcome, the seconds since the
    step's first attempt of this budget, and the service's `Retry-After` (ms) if it sent one."""

    number: int
    outcome: CallOutcome
    elapsed_s: float = 0.0
    retry_after_ms: float | None = None


class Position(enum.StrEnum):
    """Where a step stands in its saga: this decides how its failures are retried."""

    BEFORE_PIVOT = "before_pivot"
    PIVOT = "pivot"
    AFTER_PIVOT = "after_pivot"


def position_of(step: StepView, steps: Sequence[StepView]) -> Position:
    """The step's position: after the pivot once the pivot's effect completed (`past_pivot`)."""
    if past_pivot(steps):
        return Position.AFTER_PIVOT
    return Position.PIVOT if step.pivot else Position.BEFORE_PIVOT


def _counted(rules: RetryRules, attempt: Attempt, rand: float) -> float | None:
    """The delay before the next attempt while the count lasts, or None: given up."""
    retry = decide(rules.policy, attempt.number, rand, attempt.retry_after_ms)
    return retry.delay_ms if retry.retry else None


def _budgeted(rules: RetryRules, attempt: Attempt, rand: float) -> float | None:
    """The delay before the next attempt while the budget lasts (no count), or None: the budget ended."""
    if attempt.elapsed_s >= rules.budget_s:
        return None
    unbounded = dataclasses.replace(rules.policy, max_attempts=attempt.number + 1)
    return decide(unbounded, attempt.number, rand, attempt.retry_after_ms).delay_ms


def after_forward(
    step: StepView, attempt: Attempt, position: Position, rules: RetryRules, *, rand: float
) -> CallDecision:
    """After a forward call of `step` at `position` ended as `attempt` did (the table above)."""
    outcome = attempt.outcome
    uncertain = step.uncertain or outcome is CallOutcome.UNKNOWN
    if outcome is CallOutcome.SUCCEEDED:
        return CallDecision(StepStatus.COMPLETED, SagaStatus.RUNNING, label="completed")
    budgeted = position is Position.AFTER_PIVOT or (position is Position.PIVOT and uncertain)
    if outcome is not CallOutcome.REFUSED:
        delay = _budgeted(rules, attempt, rand) if budgeted else _counted(rules, attempt, rand)
        if delay is not None:
            return CallDecision(StepStatus.RUNNING, SagaStatus.RUNNING, delay, uncertain, label="retry")
        if budgeted:  # the budget ended: past the point of no return (or the pivot may have happened)
            return CallDecision(StepStatus.FAILED, SagaStatus.ESCALATED, uncertain=uncertain, label="escalated")
    if position is Position.AFTER_PIVOT:  # a permanent refusal after the pivot: an operator decides
        return CallDecision(StepStatus.FAILED, SagaStatus.ESCALATED, uncertain=uncertain, label="escalated")
    label = "refused" if outcome is CallOutcome.REFUSED else "exhausted"
    return CallDecision(StepStatus.FAILED, SagaStatus.COMPENSATING, uncertain=uncertain, label=label)


def after_compensation(attempt: Attempt, rules: RetryRules, *, rand: float) -> CallDecision:
    """After a compensation call of a step ended as `attempt` did: retried within the budget."""
    if attempt.outcome is CallOutcome.SUCCEEDED:
        return CallDecision(StepStatus.COMPENSATED, SagaStatus.COMPENSATING, label="compensated")
    if attempt.outcome is not CallOutcome.REFUSED:
        delay = _budgeted(rules, attempt, rand)
        if delay is not None:
            return CallDecision(StepStatus.COMPLETED, SagaStatus.COMPENSATING, delay, label="retry")
    return CallDecision(StepStatus.COMPLETED, SagaStatus.FAILED, label="compensation_failed")


def settle(status: SagaStatus, steps: Sequence[StepView]) -> SagaStatus:
    """A COMPENSATING saga with nothing left to compensate is COMPENSATED."""
    if status is SagaStatus.COMPENSATING and next_work(status, steps) is None:
        return SagaStatus.COMPENSATED
    return status


def on_abort(status: SagaStatus, steps: Sequence[StepView]) -> SagaStatus:
    """The order's plan was aborted (agent, deadline, policy) while its saga is `status` (`abort_turn`)."""
    return abort_turn(status, past_pivot=past_pivot(steps))


def abort_turn(status: SagaStatus, *, past_pivot: bool) -> SagaStatus:
    """An abort turns a saga still running forward (PENDING, RUNNING) to COMPENSATING unless its pivot
    completed; any other saga (settled, compensating, FAILED or ESCALATED: a person's) stays as it is."""
    if past_pivot or status not in (SagaStatus.PENDING, SagaStatus.RUNNING):
        return status
    return SagaStatus.COMPENSATING


def redrive(status: SagaStatus) -> SagaStatus:
    """An operator's redrive: ESCALATED retries its steps, FAILED retries its compensations."""
    if status is SagaStatus.ESCALATED:
        return SagaStatus.RUNNING
    if status is SagaStatus.FAILED:
        return SagaStatus.COMPENSATING
    raise ValueError(f"only an escalated or failed saga is redriven, not a {status.value} one")


def effect_layout_problem(steps: Mapping[str, Step]) -> tuple[str | None, str] | None:
    """Why a definition's effects cannot keep the saga's promise (the step to point at, the reason), or None.

    Effects need a pivot (the point after which every step is retried until it succeeds), and every effect
    that can run before the pivot needs a compensation (giving up there means undoing what completed). A
    step "can run before the pivot" when it is reachable from the first step without passing a pivot.
    """
    effects = [name for name, step in steps.items() if step.effect is not None]
    if not effects:
        return None
    if not any(step.pivot for step in steps.values()):
        return (effects[0], f"steps {', '.join(effects)} have effects but no step is the pivot (`pivot: true`)")
    reached: set[str | None] = {None}
    before: list[str] = []
    grown = True
    while grown:
        grown = False
        for name, step in steps.items():
            if step.pivot or name in before or not reached.intersection(step.from_):
                continue
            before.append(name)
            if step.to not in reached:
                reached.add(step.to)
            grown = True
    for name in before:
        effect = steps[name].effect
        if effect is not None and effect.compensation is None:
            return (name, f"step {name} has an effect before the pivot but no compensation")
    return None


class EffectBodyError(ValueError):
    """A body field's CEL expression does not evaluate (a missing field, a type error)."""


def build_body(fields: Mapping[str, str], variables: Mapping[str, Any]) -> dict[str, Any]:
    """An effect's (or compensation's) body: each field's CEL expression evaluated over `variables`
    (`data`, `order`, `step`, `result`)."""
    body: dict[str, Any] = {}
    for name, source in fields.items():
        try:
            body[name] = _plain(CompiledRule.compile(source).evaluate(variables))
        except CheckSyntaxError as exc:
            raise EffectBodyError(f"body field {name}: CEL syntax error: {exc}") from exc
        except Exception as exc:  # the binding raises several types for evaluation errors
            raise EffectBodyError(f"body field {name}: {exc}") from exc
    return body


def _plain(value: Any) -> Any:
    """A CEL value as plain JSON data."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
