"""Human approval of held steps: listing, approving, denying, expiring (`/v1/approvals`, `nexus approvals`).

A step whose process asks for approval is decided HELD by the pure core; its approvals row (migration 0009)
keeps the envelope. Approving submits that envelope again through `Gateway.submit`'s transaction with the
answer attached: under the order's advisory lock the row goes from pending to approved exactly once, and the
step applies in order and drains its successors; denying (or the expiry sweeper) makes it REJECTED with
APPROVAL_DENIED. The decision log records who answered (`actor`: the approver's key `key:<id>`, with its
name beside it; `system:expiry` for the expiry sweeper; `cli` for `nexus approvals`, with its `--by`).

Who may answer: `approver_of` turns the caller's principal (nexus.auth, from its API key) into an
`Approver`; `can_answer` keeps the rule in one place: the `approver` role (else 403 FORBIDDEN), and the
approval's tenant (another tenant's approval answers 404, as an unknown one: nothing leaks across tenants).
Listing (`GET /v1/approvals`, approvers and operators) shows the caller's tenant only.

Every approval shows what it binds (`event_id`, `data_sha256`, `process_version`, `seq_id`); an answer may
`expect` them, and when any differs (the pure `binding_mismatch`) it is refused 409 APPROVAL_MISMATCH before
anything is decided.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from nexus.auth.roles import Principal, Role
from nexus.core.actors import SYSTEM_EXPIRY
from nexus.core.decide.answers import Outcome
from nexus.core.decide.approvals import ApprovalBinding, ApprovalStatus, binding_mismatch
from nexus.core.decide.items import Incoming
from nexus.core.envelope import parse_envelope
from nexus.core.process_model import Verdict
from nexus.errors import ApprovalMismatchError, ApprovalNotPendingError, ErrorCode, NotFoundError
from nexus.gateway import Gateway
from nexus.store.database import Database
from nexus.store.lifecycle import ApprovalDecision
from nexus.store.queries import query
from nexus.store.rows import row_json

log = logging.getLogger(__name__)

EXPIRY_ACTOR = "expiry"


@dataclasses.dataclass(frozen=True, slots=True)
class Approver:
    """Who answers an approval: a name (the approvals row's `decided_by`), the tenant it acts for (None:
    every tenant), and the decision log's actor (core/actors.py) with the name of the key it stands for."""

    name: str
    tenant_id: str | None
    roles: frozenset[Role] = frozenset({Role.APPROVER})
    actor: str | None = None
    actor_name: str | None = None


class ApproverRefused(Exception):
    """The caller may not answer approvals (no approver role)."""


def approver_of(principal: Principal) -> Approver:
    """The caller (`request.state.principal`, from its API key) as an approver: the decision log's actor
    `key:<id>` or `oauth:<sub>@<issuer host>` (a key's name beside it); `decided_by` the name, or the actor."""
    actor = principal.actor
    return Approver(principal.name or actor, principal.tenant_id, frozenset(principal.roles), actor, principal.name)


def can_answer(approver: Approver, tenant_id: str) -> bool:
    """The one rule: ApproverRefused without the approver role; False for another tenant's approval."""
    if Role.APPROVER not in approver.roles:
        raise ApproverRefused(f"{approver.name} has no {Role.APPROVER.value} role")
    return approver.tenant_id is None or approver.tenant_id == tenant_id


def binding_of(row: Any, data: Any = None) -> ApprovalBinding:
    """What an approvals row binds: its step's event_id, data (`data`: read from its envelope when not
    given), process version and seq."""
    data = json.loads(row["envelope"]).get("data", {}) if data is None else data
    return ApprovalBinding.of(row["event_id"], data, row["process_version"], row["seq_id"])


def approval_json(row: Any) -> dict[str, Any]:
    data = json.loads(row["envelope"]).get("data", {})
    bound = binding_of(row, data)
    return row_json(
        row, _APPROVAL_FIELDS, seq=row["seq_id"], data=data, seq_id=row["seq_id"],
        data_sha256=bound.data_sha256, process_version=bound.process_version,
    )  # fmt: skip


_APPROVAL_FIELDS = (
    "approval_id", "tenant_id", "order_id", "plan_id", "seq", "event_type", "event_id", "data", "status",
    "created_at", "expires_at", "decided_at", "decided_by", "seq_id", "data_sha256", "process_version",
)  # fmt: skip


async def pending(db: Database, approver: Approver, *, limit: int = 100) -> list[dict[str, Any]]:
    """Pending approvals of the caller's tenant (every tenant for a key spanning them), oldest first."""
    rows = await db.fetch(query("lifecycle.sql", "pending_approvals"), approver.tenant_id, limit)
    return [approval_json(r) for r in rows]


async def answer(
    gateway: Gateway,
    approval_id: uuid.UUID,
    approver: Approver,
    *,
    approve: bool,
    expired: bool = False,
    expect: Mapping[str, Any] | None = None,
) -> Outcome:
    """Approve or deny one pending approval; the held step's decision (APPLY, or REJECTED APPROVAL_DENIED).
    `expect`: what the approver saw (any of event_id, data_sha256, process_version, seq_id); a field that
    differs raises ApprovalMismatchError and nothing is decided."""
    can_answer(approver, "")  # the role first: its refusal says nothing about whether the approval exists
    row = await gateway.db.fetchrow(query("lifecycle.sql", "approval"), approval_id)
    if row is None or not can_answer(approver, row["tenant_id"]):
        raise NotFoundError(f"no approval {approval_id}")  # another tenant's: as if it did not exist
    if row["status"] != ApprovalStatus.PENDING:
        raise ApprovalNotPendingError(f"approval {approval_id} is {row['status']}")
    mismatch = binding_mismatch(binding_of(row), expect) if expect else None
    if mismatch is not None:
        raise ApprovalMismatchError(f"approval {approval_id}: {mismatch}")
    envelope = parse_envelope(row["envelope"])
    if approve:
        verdict = None
    elif expired:
        verdict = Verdict(ErrorCode.APPROVAL_DENIED, f"approval {approval_id} expired unanswered")
    else:
        verdict = Verdict(ErrorCode.APPROVAL_DENIED, f"denied by {approver.name}")
    status = ApprovalStatus.APPROVED if approve else (ApprovalStatus.EXPIRED if expired else ApprovalStatus.DENIED)
    decision = ApprovalDecision(approval_id, verdict, status, approver.name)
    item = Incoming(
        envelope.model_dump_json(), envelope, None, row["traceparent"], tenant_id=row["tenant_id"],
        actor=approver.actor, actor_name=approver.actor_name,
    )  # fmt: skip
    [outcome] = await gateway.submit_approval(item, decision)
    outcome = dataclasses.replace(outcome, seq_id=outcome.seq_id or row["seq_id"])  # the held step's seq
    log.info(
        "approval answered",
        extra={
            "action": "approval",
            "approval_id": str(approval_id),
            "order_id": envelope.order_id,
            "tenant_id": envelope.tenant_id,
            "status": status,
            "by": approver.name,
        },
    )
    return outcome


async def expire(gateway: Gateway, *, limit: int = 100) -> int:
    """Deny approvals past their `expires_s` (REJECTED APPROVAL_DENIED, by "expiry"); return how many."""
    done = 0
    for row in await gateway.db.fetch(query("lifecycle.sql", "expired_approvals"), limit):
        try:
            expiry = Approver(EXPIRY_ACTOR, None, actor=SYSTEM_EXPIRY)
            await answer(gateway, row["approval_id"], expiry, approve=False, expired=True)
            done += 1
        except (ApprovalNotPendingError, NotFoundError):
            pass  # answered meanwhile, here or by another gateway
    return done
