"""Buffer expiry: a buffered step whose gap never filled.

| situation                                               | decision    | code           | effect             |
|---------------------------------------------------------|-------------|----------------|--------------------|
| a buffered step waited more than `buffer_timeout` (1 h) | DEAD_LETTER | BUFFER_TIMEOUT | leaves the buffer (1) |
| a buffered step younger than that                       | -           |                | stays              |

(1) dead-lettered once, under its order's lock, in the transaction that removes it: never applied after.

A step buffered behind an effect (the saga step before it, read with it) waits from the effect's end, not
its own arrival (`waiting_since`): while the effect is performed or retried (its step PENDING or RUNNING)
its wait starts now, so it never expires; once the effect ended, from then (its `executed_at`, else its
last change).

Decided inside the batch fold (`plan_batch(..., expiry=Expiry(...))`), so the sweeper's plan (deletes, dead
letters, log entries, wake-ups) is a `BatchPlan` the gateway writes like any other.
Pure: the clock is passed in (the database's, with the steps' arrival times).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from nexus.core.actors import SYSTEM_EXPIRY
from nexus.core.audit_chain import Entry
from nexus.core.decide.items import IngressKind
from nexus.core.decide.rows import DeadLetterRow, PendingDelete
from nexus.core.envelope import parse_envelope
from nexus.core.saga import StepStatus
from nexus.errors import ErrorCode
from nexus_wire.codes import Decision


@dataclasses.dataclass(frozen=True, slots=True)
class BufferedStep:
    """A buffered step as read under its order's lock."""

    tenant_id: str
    order_id: str
    seq_id: int
    event_id: str
    plan_id: str
    envelope: str
    received_at: dt.datetime
    effect_status: str | None = None
    """The status of the saga step before it (None: none), with when it was executed and last changed."""
    effect_executed_at: dt.datetime | None = None
    effect_updated_at: dt.datetime | None = None


def waiting_since(step: BufferedStep, now: dt.datetime) -> dt.datetime:
    """Since when `step` waits (see the module docstring): its arrival, or its effect's end if later, or
    `now` while its effect is performed."""
    if step.effect_status is None:
        return step.received_at
    if step.effect_status in (StepStatus.PENDING, StepStatus.RUNNING):
        return now
    ended = step.effect_executed_at or step.effect_updated_at
    return max(step.received_at, ended) if ended is not None else step.received_at


@dataclasses.dataclass(frozen=True, slots=True)
class Expiry:
    """The buffer sweeper's question to the batch fold: which of these buffered steps (of orders locked
    by the sweeper) waited more than `timeout_s`."""

    steps: tuple[BufferedStep, ...]
    timeout_s: float


def expired_rows(expiry: Expiry, now: dt.datetime) -> tuple[list[PendingDelete], list[DeadLetterRow], list[Entry]]:
    """The deletes, dead letters and log entries of the steps that waited more than the timeout at `now`."""
    timeout_s = expiry.timeout_s
    expired = [s for s in expiry.steps if waiting_since(s, now) < now - dt.timedelta(seconds=timeout_s)]
    dead: list[DeadLetterRow] = []
    entries: list[Entry] = []
    for step in expired:
        message = f"seq {step.seq_id} waited more than {timeout_s:g}s for its predecessor"
        dead.append(
            DeadLetterRow(
                IngressKind.BUFFER.value, ErrorCode.BUFFER_TIMEOUT.value, message, step.event_id, step.order_id,
                step.plan_id, step.envelope, step.tenant_id,
            )
        )  # fmt: skip
        envelope = parse_envelope(step.envelope)
        entries.append(
            Entry(
                tenant_id=envelope.tenant_id, order_id=step.order_id, decision=Decision.DEAD_LETTER.value,
                event_id=step.event_id, plan_id=step.plan_id, seq=step.seq_id, event_type=str(envelope.event_type),
                code=ErrorCode.BUFFER_TIMEOUT.value, message=message, actor=SYSTEM_EXPIRY,
            )
        )  # fmt: skip
    return [PendingDelete(s.order_id, s.seq_id, s.tenant_id) for s in expired], dead, entries
