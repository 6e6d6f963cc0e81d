"""Approvals: a step that needs a person's answer before it applies.

| situation                                                    | decision  | effect                         |
|--------------------------------------------------------------|-----------|--------------------------------|
| would apply, passes its checks, its `approval.when` holds    | HELD      | nothing applied (1)            |
| the same event_id sent again while held                      | HELD      | nothing                        |
| another step at the held seq                                 | DUPLICATE | nothing (position.py)          |
| approved                                                     | APPLY     | applied, successors drained    |
| denied, or expired unanswered                                | REJECTED  | APPROVAL_DENIED (2)            |
| its server-numbered successors, then                         | DISCARD   | APPROVAL_DENIED (4)            |
| an abort or a REPLAN while held                              | -         | dropped with the buffer (3)    |

(1) the order's `held` names it, its seq is taken, successors wait in the buffer, an approvals row is
written (pending). (2) the order waits at the same seq; the row is denied or expired. (3) the row is
cancelled. (4) a client numbering its own steps (`/v1/events`) can send a corrected step at the held
seq, and its buffered steps wait for it; a client the server numbers (`POST /v1/orders/{id}/steps`, MCP)
cannot: its buffered steps leave the buffer (one decision-log record each, no notification) and its next
proposal takes the refused step's number. The same holds for a numbered step REJECTED when drained after
an approval, with that step's code. A `when` that cannot be evaluated holds the step (a person looks
rather than nobody). Pure: no I/O.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from typing import Any

from nexus.core.decide.position import ReorderBuffer
from nexus.core.decide.validation import needs_approval
from nexus.core.envelope import EventEnvelope
from nexus.core.process_model import CompiledProcess, Verdict

_APPROVAL_NAMESPACE = uuid.UUID("a9f0c2d4-1b3e-4f5a-8c7d-617070726f76")


class ApprovalStatus(enum.StrEnum):
    """An approvals row's status (migration 0009): pending until answered once."""

    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


def approval_id_for(event_id: uuid.UUID, tenant_id: str = "default") -> uuid.UUID:
    """The approval of a held step: derived from its tenant and event_id, so a resend names the same one
    (two tenants' steps with one event_id get different approvals)."""
    name = str(event_id) if tenant_id == "default" else f"{tenant_id}\x1f{event_id}"
    return uuid.uuid5(_APPROVAL_NAMESPACE, name)


def must_hold(
    process: CompiledProcess | None,
    facts: Mapping[str, Any],
    event: EventEnvelope,
    limits: Mapping[str, Any],
    answers: Mapping[uuid.UUID, Verdict | None],
) -> bool:
    """Whether a judged step waits for a person: its process asks for approval and nobody answered yet."""
    if process is None or event.event_id in answers:
        return False
    return needs_approval(process, facts, event.event_type, event.seq_id, event.data, limits)


def settle_numbered(
    buffer: ReorderBuffer, refused: EventEnvelope, numbered: frozenset[uuid.UUID]
) -> list[EventEnvelope]:
    """Take out of `buffer` the server-numbered steps waiting behind `refused`, a step refused at its
    number (denied, expired, or REJECTED when drained); they are DISCARDed with its code (note (4))."""
    after = refused.seq_id or 0
    seqs = [seq for seq, step in sorted(buffer.waiting.items()) if seq > after and step.event_id in numbered]
    return [buffer.take(seq) for seq in seqs]
