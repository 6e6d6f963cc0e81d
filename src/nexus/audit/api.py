"""HTTP API of the blocked-actions report (a FastAPI router the app includes; Database from app.state)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from nexus.audit.report import Filters, blocked_actions, blocked_summary
from nexus.error_shape import error_response
from nexus.errors import ErrorCode
from nexus.store.database import Database

router = APIRouter(tags=["audit"])

MAX_LIMIT = 1000


class _BadParameter(ValueError):
    pass


def parse_since(value: str | None) -> dt.datetime | None:
    """ISO 8601; a time without a zone is taken as UTC."""
    if value is None or value == "":
        return None
    try:
        since = dt.datetime.fromisoformat(value)
        # In UTC here: an offset that moves it outside the years 1-9999 fails now, not in the driver.
        return (since if since.tzinfo else since.replace(tzinfo=dt.UTC)).astimezone(dt.UTC)
    except (ValueError, OverflowError) as exc:
        raise _BadParameter("since: not an ISO 8601 timestamp within the years 1-9999") from exc


def _int(name: str, value: str | None, default: int | None, low: int, high: int) -> int | None:
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError as exc:
        raise _BadParameter(f"{name}: not an integer") from exc
    if not low <= number <= high:
        raise _BadParameter(f"{name}: must be between {low} and {high}")
    return number


def _filters(request: Request) -> Filters:
    """The filters of a report request. The tenant is the key's own: only a key spanning every tenant
    may choose one with `?tenant=` (a single tenant's key asking for another still sees its own)."""
    q = request.query_params
    # The principal the key check attached (read here without importing nexus.auth: the audit package
    # sits below it); None spans every tenant.
    own: str | None = request.state.principal.tenant_id
    for name in ("tenant", "order", "plan", "code"):
        if len(q.get(name) or "") > 200:
            raise _BadParameter(f"{name}: at most 200 characters")
    return Filters(
        tenant=own if own is not None else (q.get("tenant") or None),
        order=q.get("order") or None,
        plan=q.get("plan") or None,
        code=q.get("code") or None,
        since=parse_since(q.get("since")),
    )


def _bad(exc: _BadParameter) -> JSONResponse:
    return error_response(422, ErrorCode.INVALID_PARAMETER, str(exc))


@router.get("/v1/blocked-actions")
async def list_blocked_actions(request: Request) -> Any:
    """Steps the gateway REJECTED, newest first. Filters: tenant, order, plan, code, since (ISO 8601).
    Pages: `limit` (1-1000, default 100) with `cursor` (the previous page's `next_cursor`) or `offset`."""
    db: Database = request.app.state.db
    q = request.query_params
    try:
        filters = _filters(request)
        limit = _int("limit", q.get("limit"), 100, 1, MAX_LIMIT)
        offset = _int("offset", q.get("offset"), 0, 0, 10**9)
        cursor = _int("cursor", q.get("cursor"), None, 1, 2**62)
    except _BadParameter as exc:
        return _bad(exc)
    assert limit is not None and offset is not None
    items, next_cursor = await blocked_actions(db, filters, limit=limit, offset=offset, cursor=cursor)
    return {"items": items, "next_cursor": next_cursor, "limit": limit, "filters": filters.as_json()}


@router.get("/v1/blocked-actions/summary")
async def summarize_blocked_actions(request: Request) -> Any:
    """Counts of blocked actions: total, by code, by check, by step type and by agent (actor)."""
    db: Database = request.app.state.db
    try:
        filters = _filters(request)
    except _BadParameter as exc:
        return _bad(exc)
    return {**await blocked_summary(db, filters), "filters": filters.as_json()}
