"""Server-numbered steps over REST: `POST /v1/plans` and `POST /v1/orders/{order_id}/steps` (DESIGN.md
"Server-numbered steps and MCP"), plus `.../abort` and `.../replan` so an agent that never counts can also
end or replace its plan. The MCP tools (nexus.mcp) call the same functions.

A step is built here without a number: an envelope with a placeholder `seq_id` and a `Proposal`, which
`Gateway.submit` numbers under the order's lock (nexus.plan_steps, nexus.core.numbering). Each proposal is
group-committed with other requests' steps (`GroupCommitter`), but an order's second proposal in one
shared transaction is decided in the next (nexus.plan_steps): parallel proposals of one order are each
numbered from the state the previous one left, so a REJECTED proposal frees its number for the next. With an
idempotency key its event id is `uuid5(tenant, order_id, key)`; without one, a fresh uuid4. A step is
answered as the same envelope on `/v1/events` would be: data its order's process refuses is DEAD_LETTER
INVALID_EVENT naming the field (decided in the fold), the envelope kept as the dead letter's payload.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Body, Path, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from nexus import metrics
from nexus.auth import quotas
from nexus.auth.roles import Principal, Role, read_tenant
from nexus.core import wording
from nexus.core.decide.answers import Outcome
from nexus.core.decide.items import Incoming
from nexus.core.decide.plan_end import PlanEnd
from nexus.core.decide.plan_start import PlanStart
from nexus.core.definitions import DEFAULT_PROCESS
from nexus.core.envelope import parse_envelope
from nexus.core.numbering import Proposal, data_digest, event_id_for
from nexus.error_shape import error_body, error_response
from nexus.errors import ErrorCode, InvalidEventError, NexusError
from nexus.gateway import Gateway
from nexus.ingress.fast_events import single_status
from nexus.store.database import Database
from nexus.store.queries import query
from nexus_wire.codes import ABORT_STEP, REPLAN_STEP, Decision
from nexus_wire.envelope import SAFE_IDENTIFIER_PATTERN

router = APIRouter()

Identifier = Annotated[str, Field(pattern=SAFE_IDENTIFIER_PATTERN, max_length=200)]
OrderId = Annotated[str, Path(pattern=SAFE_IDENTIFIER_PATTERN, max_length=200)]


class Submitter(Protocol):
    """What decides steps and starts plans: the gateway, or the app's group committer in front of it."""

    async def submit(self, items: Sequence[Incoming]) -> list[Outcome]: ...

    async def start_plan(self, start: PlanStart) -> ErrorCode | None: ...


class StepsApiError(NexusError):
    """The request cannot be served (its HTTP status and code say why)."""

    def __init__(self, status: int, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class StartPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    process: Identifier = DEFAULT_PROCESS
    order_id: Identifier | None = None
    deadline_s: Annotated[float, Field(gt=0, le=10 * 365 * 86400)] | None = None


class ProposeStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z][A-Za-z0-9_.:-]*$")]
    data: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: Annotated[str, Field(min_length=1, max_length=200)] | None = None


class EndPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Annotated[str, Field(min_length=1, max_length=2000)]
    idempotency_key: Annotated[str, Field(min_length=1, max_length=200)] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class StepCaller:
    """What every step operation is called with, by the REST routes and the MCP tools alike: the store, the
    gateway (its processes), the key that calls, and what decides (the app's group committer, or else the
    gateway itself)."""

    db: Database
    gateway: Gateway
    principal: Principal
    submitter: Submitter | None = None

    @property
    def decider(self) -> Submitter:
        return self.submitter or self.gateway


def step_tenant(principal: Principal) -> str:
    """The tenant a step is proposed for: an agent key's one tenant (a key spanning every tenant cannot)."""
    if Role.AGENT not in principal.roles:
        raise StepsApiError(403, ErrorCode.FORBIDDEN, "proposing steps needs an agent key")
    if principal.tenant_id is None:
        raise StepsApiError(403, ErrorCode.FORBIDDEN, "a key spanning every tenant cannot propose steps")
    return principal.tenant_id


async def start_plan(caller: StepCaller, request: StartPlan) -> dict[str, Any]:
    """Create the plan row of a new order (201 body); ORDER_EXISTS if the tenant knows the order already."""
    tenant = step_tenant(caller.principal)
    catalog = caller.gateway.catalog
    if catalog is not None and catalog.get(request.process) is None:
        known = ", ".join(sorted(catalog.latest)) or "none"
        raise StepsApiError(422, ErrorCode.UNKNOWN_PROCESS, f"no such process; known: {known}")
    await quotas.check_plan(caller.db, tenant)  # 429 QUOTA_EXCEEDED unstarted_plans, nothing written
    order_id = request.order_id or f"order-{uuid.uuid4().hex[:16]}"
    plan_id = f"plan-{uuid.uuid4().hex[:16]}"
    deadline = (
        dt.datetime.now(dt.UTC) + dt.timedelta(seconds=request.deadline_s) if request.deadline_s is not None else None
    )
    start = PlanStart(tenant, order_id, plan_id, request.process, deadline, caller.principal.actor)
    if await caller.decider.start_plan(start) is ErrorCode.ORDER_EXISTS:
        raise StepsApiError(409, ErrorCode.ORDER_EXISTS, wording.order_exists())
    body: dict[str, Any] = {"order_id": order_id, "plan_id": plan_id, "process": request.process}
    if deadline is not None:
        body["deadline"] = deadline.isoformat()
    return body


async def propose_step(caller: StepCaller, order_id: str, request: ProposeStep) -> tuple[int, dict[str, Any]]:
    """Decide one proposed step: its HTTP status and the result object."""
    tenant = step_tenant(caller.principal)
    if request.step in (ABORT_STEP, REPLAN_STEP):
        message = "ABORT_PLAN and REPLAN are not steps to propose: use abort or replan"
        raise StepsApiError(422, ErrorCode.INVALID_REQUEST, message)
    plan = await _plan_of(caller.db, tenant, order_id)
    await quotas.check_numbered_step(caller.db, tenant, plan["order_plan"] is not None)  # 429 QUOTA_EXCEEDED
    if request.idempotency_key is not None:
        event_id = event_id_for(tenant, order_id, request.idempotency_key)
    else:
        event_id = uuid.uuid4()
    proposal = Proposal(event_id, data_digest(request.step, request.data), request.idempotency_key is not None)
    envelope: dict[str, Any] = {
        "event_id": str(event_id),
        "event_type": request.step,
        "plan_id": plan["order_plan"] or plan["started_plan"],
        "order_id": order_id,
        "seq_id": 1,  # a placeholder: numbered under the order's lock
        "timestamp": dt.datetime.now(dt.UTC).isoformat(),
        "data": request.data,
        "tenant_id": tenant,
    }
    if plan["process"]:
        envelope["process"] = plan["process"]
    status, body = await _submit(caller, envelope, tenant, proposal)
    body["next_steps"] = next_steps(caller.gateway, plan["process"], body["order"]["status"])
    return status, body


async def end_plan(caller: StepCaller, order_id: str, request: EndPlan, *, replan: bool) -> tuple[int, dict[str, Any]]:
    """ABORT_PLAN (abort code `manual`) or REPLAN (a new plan id) of the order's live plan: a command of the
    fold, which takes the plan id and the abort's position from the order's state under its lock
    (`core/decide/plan_end.py`). Read here only: whether the order exists, and (a replan) has a step."""
    tenant = step_tenant(caller.principal)
    plan = await _plan_of(caller.db, tenant, order_id)
    if replan and plan["order_plan"] is None:
        raise StepsApiError(409, ErrorCode.INVALID_REQUEST, "the plan has no step yet: nothing to replace")
    key = request.idempotency_key
    event_id = event_id_for(tenant, order_id, key) if key else uuid.uuid4()
    envelope: dict[str, Any] = {
        "event_id": str(event_id),
        "plan_id": plan["order_plan"] or plan["started_plan"],  # the fold takes the live plan's, under the lock
        "order_id": order_id,
        "timestamp": dt.datetime.now(dt.UTC).isoformat(),
        "tenant_id": tenant,
    }
    if replan:
        new_plan = f"plan-{uuid.uuid4().hex[:16]}"
        envelope |= {"event_type": REPLAN_STEP, "data": {"new_plan_id": new_plan, "reason": request.reason}}
    else:
        data = {"reason": request.reason, "abort_code": "manual", "aborted_at_seq": 0}  # 0: filled in the fold
        envelope |= {"event_type": ABORT_STEP, "data": data}
    status, body = await _submit(caller, envelope, tenant, None, PlanEnd(replan=replan))
    if replan and body["decision"] == Decision.APPLY.value:
        body["plan_id"] = envelope["data"]["new_plan_id"]
    return status, body


async def plan_of(db: Database, tenant: str, order_id: str) -> dict[str, Any]:
    """The plan an order follows: `{order_id, plan_id, process, status, last_seq}` (NOT_FOUND if none)."""
    plan = await _plan_of(db, tenant, order_id)
    return {
        "order_id": order_id,
        "plan_id": plan["order_plan"] or plan["started_plan"],
        "process": plan["process"] or DEFAULT_PROCESS,
        "status": plan["status"],
        "last_seq": plan["last_seq"],
    }


def next_steps(gateway: Gateway, process_name: str | None, status: str | None) -> list[str] | None:
    """The steps the order's process allows from `status` (None when unknown: no catalog, or no process)."""
    process = gateway.catalog.get(process_name or DEFAULT_PROCESS) if gateway.catalog is not None else None
    if process is None:
        return None
    return [] if process.is_terminal(status) else list(process.allowed.get(status, ()))


async def _plan_of(db: Database, tenant: str, order_id: str) -> Any:
    plan = await db.fetchrow(query("steps.sql", "plan_of_order"), tenant, order_id)
    if plan is None:
        raise StepsApiError(404, ErrorCode.NOT_FOUND, "no such order: start a plan first (start_plan)")
    return plan


async def _submit(
    caller: StepCaller, envelope: dict[str, Any], tenant: str, proposal: Proposal | None, ending: PlanEnd | None = None
) -> tuple[int, dict[str, Any]]:
    principal = caller.principal
    actor = principal.actor
    try:
        parsed = parse_envelope(envelope)
    except InvalidEventError as exc:  # e.g. an integer of the data beyond 64 bits: a dead letter, as an envelope's
        item = Incoming(envelope, None, exc, tenant_id=tenant, actor=actor, actor_name=principal.name)
    else:
        item = Incoming(
            envelope, parsed, tenant_id=tenant, actor=actor, actor_name=principal.name, proposal=proposal, ending=ending
        )
    [outcome] = await caller.decider.submit([item])
    return single_status(outcome), result_json(outcome)


def result_json(outcome: Outcome) -> dict[str, Any]:
    """The one result object of a numbered step; on a 4xx also the error shape (`code`, `message`,
    `request_id`)."""
    body: dict[str, Any] = {
        "event_id": outcome.event_id,
        "seq_id": outcome.seq_id,
        "decision": outcome.decision.value,
        "code": outcome.code.value if outcome.code else None,
        "check": outcome.check,
        "message": outcome.message or outcome.error,
        "approval_id": str(outcome.approval_id) if outcome.approval_id else None,
        "first": dict(outcome.first) if outcome.first else None,
        "order": {"status": str(outcome.status) if outcome.status else None, "last_seq": outcome.last_seq},
    }
    if outcome.effect is not None:
        body["effect"] = dict(outcome.effect)
    if single_status(outcome) >= 400:
        code = outcome.code or ErrorCode.INVALID_EVENT
        body |= error_body(code, body["message"] or code.value)
    return body


def _error(exc: StepsApiError) -> JSONResponse:
    return error_response(exc.status, exc.code, exc.message)


def _caller(request: Request) -> StepCaller:
    state = request.app.state
    return StepCaller(state.db, state.gateway, _principal(request), state.submitter)


def _principal(request: Request) -> Principal:
    principal: Principal = request.state.principal
    return principal


@router.post("/v1/plans", status_code=201, summary="Start a plan: the order exists before its first step")
async def post_plan(request: Request, body: Annotated[StartPlan, Body()]) -> Any:
    try:
        return JSONResponse(await start_plan(_caller(request), body), status_code=201)
    except StepsApiError as exc:
        return _error(exc)


_HELD: dict[int | str, dict[str, Any]] = {
    202: {"description": "HELD: the step waits for a person's approval (`approval_id`)"}
}


@router.post(
    "/v1/orders/{order_id}/steps", summary="Propose the order's next step; the gateway numbers it", responses=_HELD
)
async def post_step(request: Request, order_id: OrderId, body: Annotated[ProposeStep, Body()]) -> Any:
    return await _answer(lambda: propose_step(_caller(request), order_id, body))


@router.get("/v1/orders/{order_id}/plan", summary="The plan an order follows (an agent resuming after a restart)")
async def get_plan_of_order(request: Request, order_id: OrderId) -> Any:
    state = request.app.state
    try:
        return await plan_of(state.db, read_tenant(_principal(request), None), order_id)
    except StepsApiError as exc:
        return _error(exc)


@router.post("/v1/orders/{order_id}/abort", summary="Abort the order's plan (abort code manual)")
async def post_abort(request: Request, order_id: OrderId, body: Annotated[EndPlan, Body()]) -> Any:
    return await _end_plan(request, order_id, body, replan=False)


@router.post("/v1/orders/{order_id}/replan", summary="Replace the order's plan by a new one (REPLAN)")
async def post_replan(request: Request, order_id: OrderId, body: Annotated[EndPlan, Body()]) -> Any:
    return await _end_plan(request, order_id, body, replan=True)


async def _end_plan(request: Request, order_id: str, body: EndPlan, *, replan: bool) -> Any:
    return await _answer(lambda: end_plan(_caller(request), order_id, body, replan=replan))


async def _answer(call: Callable[[], Awaitable[tuple[int, dict[str, Any]]]]) -> Any:
    """The call's (status, body) as the answer, or the error body of the StepsApiError it raised."""
    try:
        status, content = await call()
    except StepsApiError as exc:
        return _error(exc)
    if status >= 400 and "code" in content:
        metrics.record_http_error(content["code"])
    return JSONResponse(content, status_code=status)
