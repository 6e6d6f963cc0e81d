"""The gateway's answer for one item (`Outcome`), as HTTP bodies, the decisions topic and dead letters
show it. Pure."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Mapping
from typing import Any

from nexus.core.decide.approvals import approval_id_for
from nexus.core.decide.replan import code_of
from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import OrderState
from nexus.core.process_model import Verdict
from nexus.errors import ErrorCode
from nexus_wire.codes import Decision


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """The gateway's answer for one item."""

    event_id: str | None
    decision: Decision
    code: ErrorCode | None = None
    error: str | None = None
    status: str | None = None
    last_seq: int | None = None
    _: dataclasses.KW_ONLY
    dead_letter_id: int | None = None
    check: str | None = None
    """REJECTED: the id of the failed check (CHECK_FAILED, LIMIT_EXCEEDED)."""
    message: str | None = None
    """REJECTED: why, in words (INVALID_TRANSITION lists the allowed next steps)."""
    effect: Any = None
    """The saga effect holding the order ({"step", "seq", "status", "attempts"}), if any."""
    deadline: tuple[dt.datetime, bool] | None = None
    """The deadline this step set for its plan, and whether it was clipped to the process's max."""
    approval_id: uuid.UUID | None = None
    """HELD: the approval that will decide the step."""
    seq_id: int | None = None
    """The step's sequence number (a server-numbered step's, or a repeat's first)."""
    first: Mapping[str, Any] | None = None
    """A repeated server-numbered step (DUPLICATE): the first verdict (decision, code, check, message)."""

    @property
    def is_dead_letter(self) -> bool:
        return self.decision in (Decision.DEAD_LETTER, Decision.PLAN_MISMATCH)

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "event_id": self.event_id,
            "decision": self.decision.value,
            "code": self.code.value if self.code else None,
            "order": None
            if self.status is None and self.last_seq is None
            else {
                "status": str(self.status) if self.status else None,
                "last_seq": self.last_seq,
            },
        }
        if self.decision is Decision.REJECTED:
            body["check"] = self.check
            body["message"] = self.message
        if self.decision is Decision.HELD:
            body["approval_id"] = str(self.approval_id) if self.approval_id else None
        if self.deadline is not None:
            body["deadline"] = self.deadline[0].isoformat()
            body["deadline_clipped"] = self.deadline[1]
        if self.error:
            body["error"] = self.error
        if self.effect is not None:
            body["effect"] = dict(self.effect)
        return body


def answer(
    event: EventEnvelope,
    decision: Decision,
    after: OrderState,
    verdict: Verdict | None,
    deadline: tuple[dt.datetime, bool] | None,
) -> Outcome:
    """The answer for a step decided with the order's state `after` it (`verdict`: a REJECTED one's)."""
    return Outcome(
        str(event.event_id),
        decision,
        verdict.code if verdict else code_of(decision, event, after),
        status=after.status,
        last_seq=after.last_seq,
        check=verdict.check if verdict else None,
        message=verdict.message if verdict else None,
        effect=after.effect,
        deadline=deadline,
        approval_id=approval_id_for(event.event_id, event.tenant_id) if decision is Decision.HELD else None,
        seq_id=event.seq_id,
    )


def dead_letter_answer(event_id: str | None, error: Exception, code: ErrorCode) -> Outcome:
    return Outcome(event_id, Decision.DEAD_LETTER, code, str(error))
