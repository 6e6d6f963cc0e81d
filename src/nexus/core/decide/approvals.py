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

What an approval binds (`ApprovalBinding`): the held step's `event_id`, `data_sha256` (SHA-256 of its data
as canonical JSON: sorted keys, no whitespace, UTF-8), `process_version` and `seq_id`. An approver may
send back what it saw (`expect`); `binding_mismatch` names each field that differs, and the answer is
then refused (409 APPROVAL_MISMATCH) with nothing decided.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import uuid
from collections.abc import Mapping
from typing import Any

from nexus.core.audit_chain import canonical_json
from nexus.core.decide.position import ReorderBuffer
from nexus.core.envelope import EventEnvelope
from nexus.core.process_checks import needs_approval
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


BINDING_FIELDS = ("event_id", "data_sha256", "process_version", "seq_id")


def data_sha256(data: Mapping[str, Any]) -> str:
    """The hex SHA-256 of a step's data as canonical JSON (what an approval binds)."""
    return hashlib.sha256(canonical_json(data)).hexdigest()


@dataclasses.dataclass(frozen=True, slots=True)
class ApprovalBinding:
    """What an approval binds: the exact held step (`process_version` None for an approval held before
    migration 0026 recorded it)."""

    event_id: uuid.UUID
    data_sha256: str
    process_version: int | None
    seq_id: int

    @classmethod
    def of(
        cls, event_id: uuid.UUID, data: Mapping[str, Any], process_version: int | None, seq_id: int
    ) -> ApprovalBinding:
        return cls(event_id, data_sha256(data), process_version, seq_id)

    def as_json(self) -> dict[str, Any]:
        return {
            "event_id": str(self.event_id), "data_sha256": self.data_sha256,
            "process_version": self.process_version, "seq_id": self.seq_id,
        }  # fmt: skip


def binding_mismatch(binding: ApprovalBinding, expect: Mapping[str, Any]) -> str | None:
    """Why an answer expecting `expect` (any of BINDING_FIELDS; an omitted one is not compared) does not
    fit the approval's step, naming each field that differs with the approval's value; None when it fits."""
    actual = binding.as_json()
    wrong = [
        f"{name} is {actual[name]!r}"
        for name in BINDING_FIELDS
        if expect.get(name) is not None and _normal(name, expect[name]) != actual[name]
    ]
    if not wrong:
        return None
    return "the approval binds another step: " + "; ".join(wrong)


def _normal(name: str, value: Any) -> Any:
    """An expected value as the binding writes it (a UUID in any accepted spelling, a hash in lower case)."""
    if name == "event_id":
        try:
            return str(uuid.UUID(str(value)))
        except ValueError:
            return value
    if name == "data_sha256" and isinstance(value, str):
        return value.lower()
    return value
