"""HTTP ingress and status API (ASGI, FastAPI). Contract: DESIGN.md section 4."""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from nexus import metrics
from nexus.core.sequencing import Decision
from nexus.errors import ErrorCode, NexusError, NotFoundError
from nexus.gateway import Gateway, Incoming, Outcome
from nexus.ingress.batcher import GroupCommitter
from nexus.store.database import Database
from nexus.store.queries import query

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024


def error_body(code: ErrorCode, message: str, **extra: Any) -> dict[str, Any]:
    return {"code": code.value, "message": message, **extra}


def create_app(db: Database, gateway: Gateway, committer: GroupCommitter | None = None) -> FastAPI:
    """The ASGI app. `committer` shares transactions between concurrent requests (group commit)."""
    app = FastAPI(title="Nexus Event Gateway", version="1.0")
    submitter = committer or GroupCommitter(gateway, workers=1)

    @app.exception_handler(NexusError)
    async def _nexus_error(_: Request, exc: NexusError) -> JSONResponse:
        if exc.transient:
            return JSONResponse(
                error_body(exc.code, exc.message, retryable=True),
                status_code=503,
                headers={"Retry-After": "1"},
            )
        status = 404 if isinstance(exc, NotFoundError) else 500
        return JSONResponse(error_body(exc.code, exc.message, retryable=False), status_code=status)

    @app.post("/v1/events", summary="Submit one envelope or {'events': [...]}")
    async def post_events(request: Request) -> JSONResponse:
        body = await _read_limited(request)
        if body is None:
            return JSONResponse(
                error_body(ErrorCode.PAYLOAD_TOO_LARGE, f"body exceeds {MAX_BODY_BYTES} bytes"),
                status_code=413,
            )
        traceparent = request.headers.get("traceparent")
        try:
            obj = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            obj = None
            items = [Incoming.parse(body, traceparent)]
            single = True
        else:
            if isinstance(obj, dict) and "events" in obj and isinstance(obj["events"], list):
                items = [Incoming.parse(e, traceparent) for e in obj["events"]]
                single = False
            elif isinstance(obj, list):
                items = [Incoming.parse(e, traceparent) for e in obj]
                single = False
            else:
                items = [Incoming.parse(obj if isinstance(obj, dict) else body, traceparent)]
                single = True
        outcomes = await submitter.submit(items)
        results = [o.as_json() for o in outcomes]
        status = _single_status(outcomes[0]) if single and outcomes else 200
        content: dict[str, Any] = {"results": results}
        if status >= 400:
            first = outcomes[0]
            code = first.code or ErrorCode.INVALID_EVENT
            extra = {"check": first.check} if first.decision is Decision.REJECTED else {}
            content = {**error_body(code, first.message or first.error or code.value, **extra), "results": results}
        return JSONResponse(content, status_code=status)

    @app.get("/v1/orders/{order_id}")
    async def get_order(order_id: str) -> dict[str, Any]:
        row = await db.fetchrow(query("api.sql", "order"), order_id)
        buffered = await db.fetch(query("api.sql", "order_buffered"), order_id)
        if row is None and not buffered:
            raise NotFoundError(f"no order {order_id!r}")
        return {
            "order_id": order_id,
            "plan_id": row["plan_id"] if row else buffered[0]["plan_id"],
            "status": row["status"] if row else None,
            "last_seq": row["last_seq"] if row else 0,
            "buffered": [r["seq_id"] for r in buffered],
            "notifications": row["outbox_count"] if row else 0,
            "tombstone": row["tombstone"] if row else False,
        }

    @app.get("/v1/plans/{plan_id}")
    async def get_plan(plan_id: str) -> dict[str, Any]:
        rows = await db.fetch(query("api.sql", "plan_orders"), plan_id)
        if not rows:
            raise NotFoundError(f"no plan {plan_id!r}")
        orders = [
            {
                "order_id": r["order_id"],
                "status": r["status"],
                "last_seq": r["last_seq"],
                "buffered": list(r["buffered"]),
                "notifications": r["outbox_count"],
            }
            for r in rows
        ]
        terminal = all(o["status"] in ("completed", "aborted") for o in orders)
        return {"plan_id": plan_id, "terminal": terminal, "orders": orders}

    @app.get("/v1/processes")
    async def list_processes() -> dict[str, Any]:
        from nexus.processes import builtin_catalog, describe

        catalog = gateway.catalog or builtin_catalog()
        return {"processes": [describe(p) for _, p in sorted(catalog.versions.items())]}

    @app.get("/v1/processes/{name}")
    async def get_process(name: str, version: int | None = None) -> dict[str, Any]:
        from nexus.processes import builtin_catalog, describe, mermaid

        catalog = gateway.catalog or builtin_catalog()
        process = catalog.get(name, version)
        if process is None:
            raise NotFoundError(f"no process {name!r}" + (f" version {version}" if version else ""))
        return {**describe(process), "mermaid": mermaid(process)}

    @app.get("/v1/dead-letters")
    async def list_dead_letters(
        code: str | None = None,
        source: str | None = None,
        include_redriven: bool = True,
        limit: int = Query(100, ge=1, le=1000),
        offset: int = Query(0, ge=0),
    ) -> dict[str, Any]:
        rows = await db.fetch(query("api.sql", "dead_letters"), code, source, include_redriven, limit, offset)
        return {"dead_letters": [dead_letter_json(r) for r in rows]}

    @app.post("/v1/dead-letters/{dead_letter_id}/redrive")
    async def redrive(dead_letter_id: int) -> dict[str, Any]:
        outcome = await redrive_dead_letter(db, gateway, dead_letter_id)
        return {"dead_letter_id": dead_letter_id, "result": outcome.as_json()}

    @app.get("/metrics")
    async def get_metrics() -> Response:
        await refresh_db_gauges(db)
        return Response(generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        try:
            await db.fetchval("SELECT 1")
        except NexusError as exc:
            return JSONResponse({"status": "unavailable", "code": exc.code.value}, status_code=503)
        return JSONResponse({"status": "ready"})

    from nexus.delivery.api import router as delivery_router

    app.include_router(delivery_router)
    app.state.db = db
    app.state.gateway = gateway
    return app


def _single_status(outcome: Outcome) -> int:
    if outcome.decision is Decision.DEAD_LETTER:
        return 400 if outcome.code is ErrorCode.PARSE_ERROR else 422
    if outcome.decision is Decision.PLAN_MISMATCH:
        return 409
    if outcome.decision is Decision.REJECTED:
        return 422
    return 200


async def _read_limited(request: Request) -> bytes | None:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def dead_letter_json(row: Any) -> dict[str, Any]:
    """A dead_letters row as the API and `nexus dlq` show it."""
    return {
        "id": row["id"],
        "source": row["source"],
        "code": row["code"],
        "error": row["error"],
        "event_id": row["event_id"],
        "order_id": row["order_id"],
        "plan_id": row["plan_id"],
        "payload": row["payload"],
        "created_at": row["created_at"].isoformat(),
        "redriven_at": row["redriven_at"].isoformat() if row["redriven_at"] else None,
    }


async def redrive_dead_letter(db: Database, gateway: Gateway, dead_letter_id: int) -> Outcome:
    """Submit a dead letter's original payload again; it is marked redriven whatever the new outcome."""
    row = await db.fetchrow(query("api.sql", "dead_letter"), dead_letter_id)
    if row is None:
        raise NotFoundError(f"no dead letter {dead_letter_id}")
    [outcome] = await gateway.submit([Incoming.parse(row["payload"])], source="http")
    await db.execute(query("api.sql", "mark_redriven"), dead_letter_id)
    return outcome


async def refresh_db_gauges(db: Database) -> None:
    try:
        row = await db.fetchrow(query("api.sql", "gauges"))
    except NexusError:
        return
    if row is not None:
        metrics.PENDING_EVENTS.set(row["pending_events"])
        metrics.OUTBOX_ENTRIES.labels(state="pending").set(row["outbox_pending"])
        metrics.OUTBOX_ENTRIES.labels(state="dead").set(row["outbox_dead"])
