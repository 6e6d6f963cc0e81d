"""HTTP API of the plan lifecycle: history, SSE stream, approvals (a FastAPI router the app
includes; Database, gateway, settings and the decision listener from app.state)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from nexus.auth.middleware import principal_of
from nexus.auth.roles import read_tenant
from nexus.error_shape import error_response
from nexus.errors import ErrorCode, KeyRevokedError, NexusError
from nexus.lifecycle.approvals import ApproverRefused, answer, approver_of, pending
from nexus.lifecycle.history import history_item, order_history, plan_history
from nexus.lifecycle.waiting import RECHECK_S, DecisionListener, WaitSlots, current_client
from nexus.retrying import sleep_until_set
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.queries import query
from nexus_wire.envelope import SAFE_IDENTIFIER_PATTERN

router = APIRouter(tags=["lifecycle"])
OrderId = Annotated[str, Path(pattern=SAFE_IDENTIFIER_PATTERN, max_length=200)]
PlanId = Annotated[str, Path(pattern=SAFE_IDENTIFIER_PATTERN, max_length=200)]


@router.get("/v1/orders/{order_id}/history")
async def get_order_history(
    order_id: OrderId, request: Request, tenant: Annotated[str | None, Query(max_length=200)] = None
) -> dict[str, Any]:
    """Every decision taken for the caller's tenant's order, from the decision log, oldest first."""
    db: Database = request.app.state.db
    tenant_id = read_tenant(principal_of(request), tenant)
    return {"order_id": order_id, "items": await order_history(db, tenant_id, order_id)}


@router.get("/v1/plans/{plan_id}/history")
async def get_plan_history(plan_id: PlanId, request: Request) -> dict[str, Any]:
    """Every decision taken for the plan's steps (its REPLAN included), from the decision log, oldest first."""
    db: Database = request.app.state.db
    return {"plan_id": plan_id, "items": await plan_history(db, plan_id, principal_of(request).tenant_id)}


@router.get(
    "/v1/orders/{order_id}/stream",
    response_class=StreamingResponse,
    responses={200: {"description": "Server-sent events (`event: decision`)", "content": {"text/event-stream": {}}}},
)
async def stream_order(
    order_id: OrderId,
    request: Request,
    after: Annotated[int, Query(ge=0, le=2**31)] = 0,
    tenant: Annotated[str | None, Query(max_length=200)] = None,
) -> StreamingResponse:
    """Server-sent events: each decision about the order as it commits (`event: decision`, `id:` its
    position in the order's decision log, `data:` the history item). Resume with `Last-Event-ID` or `after`.
    A stream counts against its key's `NEXUS_MAX_WAITS_PER_KEY` (429 TOO_MANY_WAITS beyond) and ends within
    the auth cache's TTL plus a second after its key is revoked."""
    db: Database = request.app.state.db
    listener: DecisionListener = request.app.state.decision_listener
    settings: Settings = request.app.state.settings
    slots: WaitSlots = request.app.state.wait_slots
    last = request.headers.get("last-event-id")
    # ASCII digits only: a header is read as latin-1, and "²".isdigit() is true where int() refuses it.
    start = int(last) if last is not None and last.isascii() and last.isdigit() and len(last) < 10 else after
    principal = principal_of(request)
    tenant_id = read_tenant(principal, tenant)
    client = current_client()

    async def alive() -> bool:
        if await request.is_disconnected():
            return False
        try:
            return await client.check()
        except KeyRevokedError:
            return False

    slots.take(principal.key_id)
    return _HeldStream(
        lambda: slots.give_back(principal.key_id),
        decision_events(db, listener, (tenant_id, order_id), start, settings.stream_keepalive_s, alive),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


class _HeldStream(StreamingResponse):
    """A streamed answer that gives its wait slot back when it ends, however it ends."""

    def __init__(self, release: Callable[[], None], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._release: Callable[[], None] | None = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self._release is not None:
                release, self._release = self._release, None
                release()


async def decision_events(
    db: Database,
    listener: DecisionListener,
    order: tuple[str, str],
    position: int,
    keepalive_s: float,
    alive: Callable[[], Awaitable[bool]],
) -> AsyncIterator[str]:
    """The SSE body: decisions after `position`, read from the log whenever the listener wakes us, while
    `alive()` (the client is connected, its key not revoked: asked at least every RECHECK_S)."""
    loop = asyncio.get_running_loop()
    with listener.watch(*order) as woken:
        yield ": stream of order decisions\n\n"
        quiet_since = loop.time()
        read = True  # the log is read at the start and when woken, not at every check of the client
        while not listener.ending and await alive():  # ending: the process stops, the client resumes elsewhere
            if read:
                woken.clear()
                try:
                    rows = await db.fetch(query("lifecycle.sql", "order_history_after"), *order, position)
                except NexusError:
                    rows = []  # PostgreSQL away: the listener wakes us when it is back
                for row in rows:
                    position = row["position"]
                    data = json.dumps(history_item(row), separators=(",", ":"))
                    yield f"id: {position}\nevent: decision\ndata: {data}\n\n"
                    quiet_since = loop.time()
                if len(rows) == 500:
                    continue
            read = await sleep_until_set(woken, min(keepalive_s, RECHECK_S))
            if not read and loop.time() - quiet_since >= keepalive_s:
                yield ": keepalive\n\n"
                quiet_since = loop.time()


# --- approvals ----------------------------------------------------------------------------------------


@router.get("/v1/approvals")
async def list_approvals(request: Request, limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> Any:
    """Pending approvals of the caller's tenant, oldest first (approvers and operators)."""
    items = await pending(request.app.state.db, approver_of(principal_of(request)), limit=limit)
    return {"approvals": items}


async def _answer(request: Request, approval_id: uuid.UUID, body: ApprovalAnswer | None, *, approve: bool) -> Any:
    # 404 for another tenant's approval as for an unknown one; 409 APPROVAL_NOT_PENDING once answered,
    # 409 APPROVAL_MISMATCH when `expect` names another step (nothing decided)
    expect = body.expect.model_dump(exclude_none=True) if body is not None and body.expect is not None else None
    try:
        outcome = await answer(
            request.app.state.gateway, approval_id, approver_of(principal_of(request)), approve=approve, expect=expect
        )
    except ApproverRefused as exc:
        return error_response(403, ErrorCode.FORBIDDEN, str(exc))
    return {
        "approval_id": str(approval_id),
        "status": "approved" if approve else "denied",
        "result": outcome.as_json(),
    }


class ApprovalExpect(BaseModel):
    """What the approver saw (from `GET /v1/approvals`): each field given must match the approval's, else 409
    APPROVAL_MISMATCH and nothing is decided; an omitted field is not compared."""

    model_config = ConfigDict(extra="forbid")

    event_id: uuid.UUID | None = None
    data_sha256: Annotated[str | None, Field(pattern="^[0-9a-fA-F]{64}$")] = None
    process_version: Annotated[int | None, Field(ge=1)] = None
    seq_id: Annotated[int | None, Field(ge=1)] = None


class ApprovalAnswer(BaseModel):
    """The optional body of an approve or deny: `expect`, the step the approver means (an unknown field is
    refused, 422 INVALID_REQUEST, rather than silently ignored)."""

    model_config = ConfigDict(extra="forbid")

    expect: ApprovalExpect | None = None


@router.post("/v1/approvals/{approval_id}/approve")
async def approve(request: Request, approval_id: uuid.UUID, body: ApprovalAnswer | None = None) -> Any:
    """Apply the held step in order (and its waiting successors); the decision log records who approved."""
    return await _answer(request, approval_id, body, approve=True)


@router.post("/v1/approvals/{approval_id}/deny")
async def deny(request: Request, approval_id: uuid.UUID, body: ApprovalAnswer | None = None) -> Any:
    """REJECTED with code APPROVAL_DENIED: the order waits at the same seq for a corrected step."""
    return await _answer(request, approval_id, body, approve=False)
