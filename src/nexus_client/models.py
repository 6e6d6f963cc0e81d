"""What the public API answers, as frozen models. Unknown fields are kept (`extra="allow"`), so a gateway
that adds fields does not break an older client."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from nexus_wire.codes import Decision


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")


class OrderSummary(_Model):
    """The order as a submission left it."""

    status: str | None = None
    last_seq: int | None = None


class StepResult(_Model):
    """The gateway's decision about one submitted item: `code` names a refusal (REJECTED, dead letter),
    `check` the failed check of a CHECK_FAILED, `message` says why, `approval_id` names a HELD step's
    approval."""

    event_id: str | None = None
    decision: Decision
    code: str | None = None
    check: str | None = None
    """REJECTED: the id of the failed check."""
    message: str | None = None
    """REJECTED: why, in words (INVALID_TRANSITION lists the allowed next steps)."""
    approval_id: str | None = None
    """HELD: the approval that will decide the step."""
    order: OrderSummary | None = None
    error: str | None = None
    seq_id: int | None = None
    """A numbered step (`PlanRun.step`): the number the gateway gave it."""
    first: dict[str, Any] | None = None
    """A repeated numbered step (DUPLICATE): the first verdict (decision, code, check, message)."""


class SubmitResult(_Model):
    """The answer to one POST /v1/events: a result per item, the HTTP status, and how many attempts it took.

    A 4xx whose body carries `results` is here too, not raised: the gateway decided about the item (a
    dead letter, e.g. INVALID_EVENT or PLAN_MISMATCH) and recorded it."""

    results: list[StepResult]
    http_status: int
    attempts: int = 1

    @property
    def first(self) -> StepResult:
        return self.results[0]


class Order(_Model):
    """GET /v1/orders/{order_id}."""

    order_id: str
    plan_id: str
    status: str | None = None
    last_seq: int = 0
    buffered: list[int] = []
    notifications: int = 0
    tombstone: bool = False


class PlanOrder(_Model):
    """One order of a plan."""

    order_id: str
    status: str | None = None
    last_seq: int = 0
    buffered: list[int] = []
    notifications: int = 0


class Plan(_Model):
    """GET /v1/plans/{plan_id}."""

    plan_id: str
    terminal: bool
    orders: list[PlanOrder]


class Process(_Model):
    """GET /v1/processes/{name}: a process definition as the gateway describes it (steps, states...)."""

    name: str
    version: int
    states: list[str] = []
    terminal: list[str] = []
    initial: list[str] = []
    steps: dict[str, dict[str, Any]] = {}


class Approval(_Model):
    """One held step waiting for a person (an item of GET /v1/approvals)."""

    approval_id: str
    order_id: str
    event_id: str
    status: str
    seq: int | None = None
    event_type: str | None = None
    seq_id: int | None = None
    data_sha256: str | None = None
    process_version: int | None = None

    def expect(self) -> dict[str, Any]:
        """What this approval binds, as an answer's `expect` (`answer_approval(..., expect=a.expect())`)."""
        bound: dict[str, Any] = {"event_id": self.event_id, "data_sha256": self.data_sha256}
        bound |= {"process_version": self.process_version, "seq_id": self.seq_id}
        return {k: v for k, v in bound.items() if v is not None}


class Approvals(_Model):
    """GET /v1/approvals: the caller's tenant's pending approvals, oldest first."""

    approvals: list[Approval] = []


class ApprovalAnswer(_Model):
    """POST /v1/approvals/{approval_id}/approve|deny: the held step's decision (`result`)."""

    approval_id: str
    status: str
    result: StepResult
