"""The delivery of one notification to one subscription, as a pure state machine. Randomness passed in.

A `deliveries` row is PENDING until its subscriber has it (DELIVERED) or never will (DEAD). The
dispatcher claims a pending row, sends it, and asks `next_step` what the attempt's outcome makes of
it; `written` turns that answer into every value ``finish`` (delivery.sql) writes, and the adapter only writes
them. Every transition lives here::

    PENDING --(2xx)------------------------------------------------------> DELIVERED
    PENDING --(5xx, 408, 429, timeout, no connection; attempts < max)----> PENDING  (retry after a backoff)
    PENDING --(the same, the last allowed attempt)-----------------------> DEAD     (max_attempts)
    PENDING --(any other status: the subscriber will never take it)------> DEAD     (rejected)
    PENDING --(our own shutdown cancelled the request)-------------------> PENDING  (attempt not counted)
    DEAD    --(an operator redrives it)----------------------------------> PENDING  (attempts from 0)

DELIVERED is final. A delivery that leaves PENDING also stops being its order's head: the order's next
notification for that subscription becomes the one to send (see ``promote_heads``). The schedule of
retries is `nexus_wire.backoff`'s, honouring ``Retry-After`` up to its cap.

A removed order's marker keeps a summary of its deliveries (`summarise`): OPEN while one is pending, else DEAD
if one died, else DELIVERED if one was delivered, else NONE (the order wrote no notification a subscription
took).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum

from nexus_wire.backoff import RetryPolicy, decide


class DeliveryState(enum.StrEnum):
    """The `state` column of a `deliveries` row."""

    PENDING = "pending"
    DELIVERED = "delivered"
    DEAD = "dead"


class AttemptOutcome(enum.StrEnum):
    """How one attempt ended, as the subscriber answered it (or did not)."""

    DELIVERED = "delivered"  # 2xx
    RETRYABLE = "retryable"  # 5xx, 408, 429, timeout, connection error
    REJECTED = "rejected"  # any other status: the subscriber will never take it
    RELEASED = "released"  # cancelled by our shutdown: no answer, no evidence
    UNSENDABLE = "unsendable"  # the request cannot even be built: dead, and no evidence about the subscriber

    @property
    def is_evidence(self) -> bool:
        """Whether the attempt says anything about the subscriber (for its circuit breaker)."""
        return self not in (AttemptOutcome.RELEASED, AttemptOutcome.UNSENDABLE)


def outcome_of_status(status: int) -> AttemptOutcome:
    """The outcome of an attempt the subscriber answered with HTTP `status`."""
    if 200 <= status < 300:
        return AttemptOutcome.DELIVERED
    if status >= 500 or status in (408, 429):
        return AttemptOutcome.RETRYABLE
    return AttemptOutcome.REJECTED


@dataclasses.dataclass(frozen=True, slots=True)
class DeliveryDecision:
    """What one attempt's outcome makes of its delivery: the values `finish` writes."""

    state: DeliveryState
    counted: bool = True
    """Whether the attempt counts (a released one is given back: it never reached the subscriber)."""
    delay_ms: float | None = None
    """When PENDING again after a failure: wait this long before the next attempt; None keeps the schedule."""
    dead_reason: str | None = None
    label: str = ""
    """The `result` label of `nexus_webhook_deliveries_total`."""

    @property
    def leaves_pending(self) -> bool:
        """The delivery is settled: its order's next notification becomes the head."""
        return self.state is not DeliveryState.PENDING


def next_step(
    state: DeliveryState,
    outcome: AttemptOutcome,
    attempts: int,
    policy: RetryPolicy,
    *,
    rand: float,
    retry_after_ms: float | None = None,
    error: str | None = None,
) -> DeliveryDecision:
    """After attempt number `attempts` (from 1) of a PENDING delivery ended with `outcome`: its next state.

    `rand` is a uniform draw in [0, 1) for the retry's jitter; `error` describes the failure for the
    dead reason.
    """
    if state is not DeliveryState.PENDING:
        raise ValueError(f"only a pending delivery is attempted, not a {state.value} one")
    if outcome is AttemptOutcome.DELIVERED:
        return DeliveryDecision(DeliveryState.DELIVERED, label="delivered")
    if outcome is AttemptOutcome.RELEASED:
        return DeliveryDecision(DeliveryState.PENDING, counted=False, label="released")
    if outcome is AttemptOutcome.REJECTED:
        return DeliveryDecision(DeliveryState.DEAD, dead_reason=f"rejected: {error}", label="dead_rejected")
    if outcome is AttemptOutcome.UNSENDABLE:
        # A permanent property of the notification: retrying cannot help, and the subscriber is not to blame.
        return DeliveryDecision(DeliveryState.DEAD, dead_reason=f"unsendable: {error}", label="dead_rejected")
    retry = decide(policy, attempts, rand, retry_after_ms)
    if retry.retry:
        return DeliveryDecision(DeliveryState.PENDING, delay_ms=retry.delay_ms, label="retry_scheduled")
    return DeliveryDecision(
        DeliveryState.DEAD,
        dead_reason=f"max_attempts: {attempts} attempts, last {error}",
        label="dead_max_attempts",
    )


def redrive(state: DeliveryState) -> DeliveryState:
    """An operator's redrive: only a DEAD delivery goes back to PENDING (with its attempts reset)."""
    if state is not DeliveryState.DEAD:
        raise ValueError(f"only a dead delivery is redriven, not a {state.value} one")
    return DeliveryState.PENDING


@dataclasses.dataclass(frozen=True, slots=True)
class DeliveryWrite:
    """Every value ``finish`` writes over a claimed delivery, decided here: the SQL writes them as given, only
    over the attempts the claim left (`read_attempts`) and under this instance's lease."""

    state: DeliveryState
    read_attempts: int
    """The attempts as the claim left them: the row is written only while it still has these."""
    attempts: int
    delay_ms: float | None
    """The next attempt this long after the write; None keeps the schedule."""
    last_status: int | None
    last_error: str | None
    delivered_at: dt.datetime | None
    """None keeps the column (a pending row has none)."""
    dead_at: dt.datetime | None
    dead_reason: str | None
    """None keeps the column (a pending row has none: a redrive clears it)."""
    head: bool
    """Whether the row may stay its order's head: only while PENDING (a redrive may have cleared it since the
    claim, so the flag is only ever lowered by this write)."""


def written(
    decision: DeliveryDecision,
    *,
    attempt: int,
    status: int | None,
    error: str | None,
    last_status: int | None,
    last_error: str | None,
    now: dt.datetime,
) -> DeliveryWrite:
    """The values `decision` writes over claimed attempt number `attempt` (the claim counted it), sent with the
    answer `status`/`error`; `last_status`/`last_error` are the row's as the claim read them.

    A counted attempt keeps its answer; a released one gives its attempt back and keeps the last answer. The
    state reached is stamped with `now` (delivered or dead); a pending one keeps both stamps.
    """
    counted = decision.counted
    return DeliveryWrite(
        state=decision.state,
        read_attempts=attempt,
        attempts=attempt if counted else max(attempt - 1, 0),
        delay_ms=decision.delay_ms,
        last_status=status if counted else last_status,
        last_error=error if counted else last_error,
        delivered_at=now if decision.state is DeliveryState.DELIVERED else None,
        dead_at=now if decision.state is DeliveryState.DEAD else None,
        dead_reason=decision.dead_reason if decision.state is DeliveryState.DEAD else None,
        head=decision.state is DeliveryState.PENDING,
    )


class DeliverySummary(enum.StrEnum):
    """How a removed order's deliveries ended, as its marker keeps it (`removed_orders.delivery_state`)."""

    OPEN = "open"
    DEAD = "dead"
    DELIVERED = "delivered"
    NONE = "none"


def summarise(*, delivered: int, dead: int, pending: int) -> DeliverySummary:
    """The summary of an order's deliveries from how many are in each state (the docstring's order)."""
    if pending > 0:
        return DeliverySummary.OPEN
    if dead > 0:
        return DeliverySummary.DEAD
    if delivered > 0:
        return DeliverySummary.DELIVERED
    return DeliverySummary.NONE
