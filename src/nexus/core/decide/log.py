"""The decision log's entries for one order's batch, in the order the decisions were taken. Pure."""

from __future__ import annotations

from collections.abc import Mapping

from nexus.core.audit_chain import Entry
from nexus.core.decide.deadlines import is_deadline_abort
from nexus.core.decide.replan import code_of
from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import Decision, Rejection, Resolution
from nexus.errors import ErrorCode


def resolution_entries(
    resolution: Resolution,
    pending: Mapping[int, EventEnvelope],
    *,
    actor: str | None = None,
) -> list[Entry]:
    """One entry per decision of one order's batch, in the order they were taken.

    Besides each arriving step's decision: a buffered step that applies when its gap fills is logged as an
    APPLY right after the step that drained it (a drained step the process refuses as a REJECTED); an
    abort the gateway writes when a plan reaches its process's `max_rejections` as an APPLY after the
    rejection that caused it; a buffered step dropped by an abort as a DISCARD right after the abort.
    `resolution.applied` and `resolution.rejections` are chronological, so each decision consumes, in
    order, the applications and rejections it caused.
    """
    applied = list(resolution.applied)
    rejections = list(resolution.rejections)
    held = list(resolution.held)
    waiting: dict[int, EventEnvelope] = dict(pending)
    entries: list[Entry] = []

    def drop_waiting(cause: str = "abort") -> None:
        for seq in sorted(waiting):
            dropped = waiting.pop(seq)
            entries.append(_entry(dropped, Decision.DISCARD.value, None, f"buffered step dropped by {cause}", actor))

    def rejected(rejection: Rejection, note: str | None = None) -> None:
        verdict = rejection.verdict
        message = f"{verdict.message} ({note})" if note else verdict.message
        entries.append(
            _entry(rejection.event, Decision.REJECTED.value, verdict.code.value, message, actor, verdict.check)
        )

    def policy_abort() -> None:
        # Only a rejection applies an abort of the gateway's own: it follows the rejection at once.
        if applied and applied[0].event.is_abort and not applied[0].drained:
            abort = applied.pop(0).event
            entries.append(_entry(abort, Decision.APPLY.value, None, "plan aborted: max_rejections reached", actor))
            drop_waiting()

    for event, decision, after in resolution.decisions:
        if applied and is_deadline_abort(applied[0].event) and applied[0].event.event_id != event.event_id:
            # issue 13: a deadline passed before this step: the gateway's timeout abort went first
            timeout = applied.pop(0).event
            entries.append(_entry(timeout, Decision.APPLY.value, None, "plan aborted: deadline passed", actor))
            drop_waiting("deadline")
        if decision is Decision.REJECTED:
            rejected(rejections.pop(0))
            policy_abort()
            continue
        if decision is Decision.HELD:
            if held and held[0][0].event_id == event.event_id:
                held.pop(0)
            entries.append(_entry(event, decision.value, None, "awaiting approval", actor))
            continue
        code = code_of(decision, event, after)
        message = None
        if decision is Decision.PLAN_MISMATCH:
            message = f"order {event.order_id} follows plan {resolution.before.plan_id}, not {event.plan_id}"
        elif code is ErrorCode.PLAN_SUPERSEDED:
            message = f"plan {event.plan_id} was replaced by plan {after.plan_id}"
        elif decision is Decision.APPLY and event.is_replan:
            message = f"plan {event.plan_id} replaced by {event.new_plan_id} at seq {after.last_seq}"
        entries.append(_entry(event, decision.value, code.value if code else None, message, actor))
        if decision is Decision.BUFFER and event.seq_id is not None:
            waiting[event.seq_id] = event
        elif decision is Decision.TOMBSTONE:
            drop_waiting()
        elif decision is Decision.APPLY:
            applied.pop(0)  # the step itself
            if event.is_abort or event.is_replan:
                drop_waiting("replan" if event.is_replan else "abort")
                continue
            while applied and applied[0].drained:
                drained = applied.pop(0).event
                waiting.pop(drained.seq_id or 0, None)
                entries.append(_entry(drained, Decision.APPLY.value, None, "drained from the buffer", actor))
            if rejections and rejections[0].drained:
                refused = rejections.pop(0)
                waiting.pop(refused.event.seq_id or 0, None)
                rejected(refused, "drained from the buffer")
                policy_abort()
            elif held and held[0][1]:
                waiting_step = held.pop(0)[0]
                waiting.pop(waiting_step.seq_id or 0, None)
                entries.append(
                    _entry(waiting_step, Decision.HELD.value, None, "drained from the buffer; awaiting approval", actor)
                )
    return entries


def _entry(
    event: EventEnvelope,
    decision: str,
    code: str | None,
    message: str | None,
    actor: str | None,
    check: str | None = None,
) -> Entry:
    return Entry(
        tenant_id=event.tenant_id,
        order_id=event.order_id,
        decision=decision,
        event_id=str(event.event_id),
        plan_id=event.plan_id,
        seq=event.seq_id,
        event_type=str(event.event_type),
        code=code,
        check=check,
        message=message,
        actor=actor,
    )
