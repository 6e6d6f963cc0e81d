"""The delivery of one notification to one subscription, as a pure state machine. Randomness passed in.

A `deliveries` row is PENDING until its subscriber has it (DELIVERED) or never will (DEAD). The
dispatcher claims a pending row, sends it, and asks `next_step` what the attempt's outcome makes of
it; the adapter only writes the answer (``finish`` in delivery.sql). Every transition lives here::

    PENDING --(2xx)------------------------------------------------------> DELIVERED
    PENDING --(5xx, 408, 429, timeout, no connection; attempts < max)----> PENDING  (retry after a backoff)
    PENDING --(the same, the last allowed attempt)-----------------------> DEAD     (max_attempts)
    PENDING --(any other status: the subscriber will never take it)------> DEAD     (rejected)
    PENDING --(our own shutdown cancelled the request)-------------------> PENDING  (attempt not counted)
    DEAD    --(an operator redrives it)----------------------------------> PENDING  (attempts from 0)

DELIVERED is final. A delivery that leaves PENDING also stops being its order's head: the order's next
notification for that subscription becomes the one to send (see ``promote_heads``). The schedule of
retries is `core.backoff`'s, honouring ``Retry-After`` up to its cap.
"""

from __future__ import annotations

import dataclasses
import enum

from nexus.core.backoff import RetryPolicy, decide


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
