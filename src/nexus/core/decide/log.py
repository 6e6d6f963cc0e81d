"""The decision log's entries: every decision of a batch, in the order it was taken, and the log as an
injected part of the gateway (`DecisionLog`, or `NoDecisionLog`, which records nothing: the cost
benchmark's baseline). Pure."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from nexus.core import wording
from nexus.core.actors import SYSTEM_DEADLINE, SYSTEM_MAX_REJECTIONS
from nexus.core.audit_chain import INGRESS_ORDER, Entry
from nexus.core.decide.deadlines import is_deadline_abort
from nexus.core.decide.items import Incoming
from nexus.core.decide.rejections import is_policy_abort
from nexus.core.decide.replan import code_of
from nexus.core.decide.rows import postgres_text
from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import Applied, OrderState, Rejection, Resolution
from nexus.errors import ErrorCode
from nexus_wire.codes import Decision

UNSTARTED_TIMEOUT = "abort_code timeout: no step before the plan's deadline (NEXUS_PLAN_START_TIMEOUT_S)"
"""The decision log's words for the deadline sweeper's TOMBSTONE of a plan that never had a step (it writes no
notification, so the log is where its abort code is kept)."""


class _OrderEntries:
    """Walks one order's decisions; `applied`, `rejections` and `held` are chronological, so each decision
    consumes, in order, the applications and rejections it caused."""

    def __init__(
        self,
        resolution: Resolution,
        pending: Mapping[int, EventEnvelope],
        actor: str | None,
        names: Mapping[str, str | None] | None = None,
    ) -> None:
        self.resolution = resolution
        self.applied: list[Applied] = list(resolution.applied)
        self.rejections: list[Rejection] = list(resolution.rejections)
        self.held: list[tuple[EventEnvelope, bool]] = list(resolution.held)
        self.waiting: dict[int, EventEnvelope] = dict(pending)
        self.settled: list[tuple[uuid.UUID, EventEnvelope]] = list(resolution.settled)
        self.entries: list[Entry] = []
        self.actor = actor
        self.names = names or {}

    def add(
        self,
        event: EventEnvelope,
        decision: str,
        code: str | None,
        message: str | None,
        check: str | None = None,
        actor: str | None = None,
    ) -> None:
        actor = actor or self.actor
        self.entries.append(
            Entry(
                tenant_id=event.tenant_id, order_id=event.order_id, decision=decision, event_id=str(event.event_id),
                plan_id=event.plan_id, seq=event.seq_id, event_type=str(event.event_type), code=code, check=check,
                message=message, actor=actor, actor_name=self.names.get(actor) if actor else None,
            )
        )  # fmt: skip

    def drop_waiting(self, cause: str = "abort", actor: str | None = None) -> None:
        for seq in sorted(self.waiting):
            self.add(
                self.waiting.pop(seq), Decision.DISCARD.value, None, f"buffered step dropped by {cause}", None, actor
            )

    def rejected(self, rejection: Rejection, note: str | None = None) -> None:
        verdict = rejection.verdict
        message = f"{verdict.message} ({note})" if note else verdict.message
        self.add(rejection.event, Decision.REJECTED.value, verdict.code.value, message, verdict.check)
        refused = rejection.event
        settled = [step for cause, step in self.settled if cause == refused.event_id]
        if settled:
            self.settled = [(cause, step) for cause, step in self.settled if cause != refused.event_id]
        for step in settled:
            self.waiting.pop(step.seq_id or 0, None)
            why = f"buffered behind seq {refused.seq_id}, refused at its number"
            self.add(step, Decision.DISCARD.value, verdict.code.value, why)

    def policy_abort(self) -> None:
        # Only a rejection applies an abort of the gateway's own: it follows the rejection at once (an agent's
        # ABORT_PLAN next in the batch is logged at its own decision).
        if self.applied and is_policy_abort(self.applied[0].event):
            message = "plan aborted: max_rejections reached"
            self.add(self.applied.pop(0).event, Decision.APPLY.value, None, message, None, SYSTEM_MAX_REJECTIONS)
            self.drop_waiting(actor=SYSTEM_MAX_REJECTIONS)

    def decided(self, event: EventEnvelope, decision: Decision, after: OrderState) -> None:
        applied = self.applied
        if applied and is_deadline_abort(applied[0].event) and applied[0].event.event_id != event.event_id:
            # a deadline passed before this step: the gateway's timeout abort went first
            message = "plan aborted: deadline passed"
            self.add(applied.pop(0).event, Decision.APPLY.value, None, message, None, SYSTEM_DEADLINE)
            self.drop_waiting("deadline", SYSTEM_DEADLINE)
        if decision is Decision.REJECTED:
            self.rejected(self.rejections.pop(0))
            self.policy_abort()
            return
        if decision is Decision.HELD:
            if self.held and self.held[0][0].event_id == event.event_id:
                self.held.pop(0)
            self.add(event, decision.value, None, "awaiting approval")
            return
        code = code_of(decision, event, after)
        self.add(event, decision.value, code.value if code else None, self.message(event, decision, after, code))
        if decision is Decision.BUFFER and event.seq_id is not None:
            self.waiting[event.seq_id] = event
        elif decision is Decision.TOMBSTONE:
            self.drop_waiting()
        elif decision is Decision.APPLY:
            self.consequences(event)

    def message(
        self, event: EventEnvelope, decision: Decision, after: OrderState, code: ErrorCode | None
    ) -> str | None:
        if decision is Decision.PLAN_MISMATCH:
            return wording.plan_mismatch(event.order_id, after.plan_id, event.plan_id)
        if code is ErrorCode.PLAN_SUPERSEDED:
            return f"plan {event.plan_id} was replaced by plan {after.plan_id}"
        if decision is Decision.TOMBSTONE and is_deadline_abort(event):
            return UNSTARTED_TIMEOUT
        if code is ErrorCode.ORDER_REMOVED:
            return f"order {event.order_id} was removed after its retention period"
        if decision is Decision.APPLY and event.is_replan:
            return f"plan {event.plan_id} replaced by {event.new_plan_id} at seq {after.last_seq}"
        return None

    def consequences(self, event: EventEnvelope) -> None:
        """What an applied step caused: buffered successors drained (or one refused, or held), or, for an
        abort or a REPLAN, the buffer dropped."""
        applied = self.applied
        applied.pop(0)  # the step itself
        if event.is_abort or event.is_replan:
            self.drop_waiting("replan" if event.is_replan else "abort")
            return
        while applied and applied[0].drained:
            drained = applied.pop(0).event
            self.waiting.pop(drained.seq_id or 0, None)
            self.add(drained, Decision.APPLY.value, None, "drained from the buffer")
        if self.rejections and self.rejections[0].drained:
            refused = self.rejections.pop(0)
            self.waiting.pop(refused.event.seq_id or 0, None)
            self.rejected(refused, "drained from the buffer")
            self.policy_abort()
        elif self.held and self.held[0][1]:
            step = self.held.pop(0)[0]
            self.waiting.pop(step.seq_id or 0, None)
            self.add(step, Decision.HELD.value, None, "drained from the buffer; awaiting approval")


def resolution_entries(
    resolution: Resolution,
    pending: Mapping[int, EventEnvelope],
    *,
    actor: str | None = None,
    actors: Mapping[uuid.UUID, str | None] | None = None,
    names: Mapping[str, str | None] | None = None,
) -> list[Entry]:
    """One entry per decision of one order's batch, in the order they were taken.

    Besides each arriving step's decision: a buffered step that applies when its gap fills is logged as an
    APPLY right after the step that drained it (a drained step the process refuses as a REJECTED); an
    abort the gateway writes when a plan reaches its process's `max_rejections` as an APPLY after the
    rejection that caused it; a buffered step dropped by an abort as a DISCARD right after the abort; a
    server-numbered buffered step settled by a refused predecessor (`Resolution.settled`) as a DISCARD with
    that step's code right after its rejection.
    `actors`: who proposed each arriving step (by event_id), else `actor`; what a step causes is logged
    with its actor, except what the gateway decides of its own: the `max_rejections` abort (and the steps
    it drops) as `system:max_rejections`, a deadline's abort found due before a step as `system:deadline`.
    `names`: the name of the key each actor stands for (`Entry.actor_name`), when it has one.
    """
    walk = _OrderEntries(resolution, pending, actor, names)
    for event, decision, after in resolution.decisions:
        walk.actor = actors.get(event.event_id, actor) if actors else actor
        walk.decided(event, decision, after)
    return walk.entries


def ingress_entry(item: Incoming) -> Entry:
    """An item with no valid envelope has no trustworthy order: it is logged in the ingress chain."""
    assert item.error is not None
    event_id = item.event_id
    return Entry(
        tenant_id=item.tenant_id,
        order_id=INGRESS_ORDER,
        decision=Decision.DEAD_LETTER.value,
        event_id=postgres_text(event_id)[:200] if event_id is not None else None,
        code=item.error.code.value,
        message=postgres_text(str(item.error))[:1000],
        actor=item.actor,
        actor_name=item.actor_name,
    )


class DecisionLog:
    """The decision log a gateway keeps (injected): every decision is an entry of its order's chain."""

    records = True

    def order_entries(
        self, resolution: Resolution, pending: Mapping[int, EventEnvelope], actor: str | None,
        actors: Mapping[uuid.UUID, str | None] | None, names: Mapping[str, str | None] | None = None,
    ) -> list[Entry]:  # fmt: skip
        return resolution_entries(resolution, pending, actor=actor, actors=actors, names=names)

    def entries(self, entries: list[Entry]) -> list[Entry]:
        """Entries built elsewhere (ingress, expiry), as this log keeps them."""
        return entries


class NoDecisionLog(DecisionLog):
    """A log that records nothing: to measure what the decision log costs (benchmarks/decision_log.py)."""

    records = False

    def order_entries(self, *args: Any, **kwargs: Any) -> list[Entry]:
        return []

    def entries(self, entries: list[Entry]) -> list[Entry]:
        return []
