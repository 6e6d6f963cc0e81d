"""HTTP ingress and status API (ASGI, FastAPI). Contract: DESIGN.md section 4."""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import FastAPI, Path, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from nexus import metrics, tracing
from nexus.auth import quotas
from nexus.auth.keys import KeyCache
from nexus.auth.middleware import AuthMiddleware, Gatekeeper, principal_of
from nexus.auth.oauth import OAuthVerifier
from nexus.auth.ratelimit import FailureThrottle, RateLimiter
from nexus.auth.roles import read_tenant
from nexus.auth.sessions import SessionStore
from nexus.auth.shares import RequestShares
from nexus.auth.slots import ProcessingSlots
from nexus.error_shape import error_response
from nexus.errors import ErrorCode, NexusError, NotFoundError
from nexus.gateway import Gateway
from nexus.ingress import http_errors, openapi
from nexus.ingress.batcher import GroupCommitter
from nexus.ingress.dead_letters import list_dead_letters, redrive_dead_letter
from nexus.ingress.events_body import Refusal, media_type_refusal, read_body
from nexus.ingress.fast_events import EventsFastPath, answer_events
from nexus.ingress.http_errors import ERROR_RESPONSES
from nexus.ingress.request_guard import RequestGuard
from nexus.ingress.wait_refusals import WaitRefusals
from nexus.lifecycle.waiting import WaitSlots
from nexus.saga.admin import effect_of, order_saga
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.queries import query
from nexus_wire.envelope import SAFE_IDENTIFIER_PATTERN

if TYPE_CHECKING:
    from nexus.ingress.drain import Drain
    from nexus.lifecycle.waiting import DecisionListener

log = logging.getLogger(__name__)

INT64_MAX = 2**63 - 1
# Path parameters naming an order or a plan: the identifier character set of the envelope.
OrderId = Annotated[str, Path(pattern=SAFE_IDENTIFIER_PATTERN, max_length=200)]
PlanId = Annotated[str, Path(pattern=SAFE_IDENTIFIER_PATTERN, max_length=200)]

_EVENTS_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "description": "One envelope (see schemas/events/) or {'events': [envelope, ...]}",
                    "type": "object",
                }
            }
        },
    }
}


class _GatewayApp(FastAPI):
    """FastAPI with the events fast path in front of all of its layers, its own included (the error,
    telemetry and body-limit middlewares FastAPI puts around every app cost 3 % of the server under wrk)."""

    fast_path: EventsFastPath | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.fast_path is None:
            await super().__call__(scope, receive, send)
        else:
            await self.fast_path(scope, receive, send)

    async def framework(self, scope: Any, receive: Any, send: Any) -> None:
        """The app as FastAPI serves it: what the fast path hands every other request to."""
        await super().__call__(scope, receive, send)


def create_app(
    db: Database,
    gateway: Gateway,
    committer: GroupCommitter | None = None,
    *,
    settings: Settings | None = None,
    decision_listener: DecisionListener | None = None,
    drain: Drain | None = None,
) -> FastAPI:
    """The ASGI app. `committer` shares transactions between concurrent requests (group commit)."""
    # Keys, rates and failed authentications follow the given settings, else the database's (as always).
    limits = settings or db.settings
    settings = settings or Settings()
    app = _GatewayApp(title="Nexus Event Gateway", version="1.0", responses=ERROR_RESPONSES)
    # No trailing-slash redirects: Starlette builds them from the Host header, which the caller chooses.
    app.router.redirect_slashes = False
    openapi.install(app)
    submitter = committer or GroupCommitter(gateway, workers=1)
    http_errors.install(app)
    keys, sessions, gate = _install_layers(app, db, limits, settings, submitter)
    _add_events_route(app, settings, submitter, gate, db)
    _add_order_routes(app, db, settings)
    _add_process_routes(app, gateway)
    _add_operator_routes(app, db, gateway)
    _include_routers(app)
    app.state.submitter = submitter
    from nexus.ingress.mcp_api import install as install_mcp

    app.state.mcp = install_mcp(app, db, gateway, settings, read_order)
    if decision_listener is None:
        from nexus.lifecycle.waiting import DecisionListener

        decision_listener = DecisionListener(db.url, settings)
    app.state.decision_listener = decision_listener
    app.state.keys = keys
    app.state.gate = gate  # the console's sign-in form records its failed attempts through it
    app.state.console_sessions = sessions
    app.state.settings = settings
    app.state.redrive_dead_letter = redrive_dead_letter  # the console's button; it must not import this module
    app.state.db = db
    app.state.gateway = gateway
    app.state.drain = drain  # `nexus serve`'s stop: /readyz answers 503 while it drains
    return app


def _install_layers(
    app: _GatewayApp, db: Database, limits: Settings, settings: Settings, submitter: GroupCommitter
) -> tuple[KeyCache, SessionStore, Gatekeeper]:
    """The middlewares around the framework and the events fast path in front of it."""
    # Every route but /healthz and /readyz needs a key (see nexus.auth.roles for who may call what)
    keys = KeyCache(db, ttl_s=limits.auth_cache_ttl_s)
    sessions = SessionStore(db, db.settings.console_session_ttl_s)  # in PostgreSQL
    # One set of buckets (per key, per tenant) for both paths below
    limiter = RateLimiter(rate_limits(limits), tenant_rate=limits.rate_limit_tenant)
    failures = FailureThrottle(limits.auth_failures_per_minute, processes_of(limits))
    oauth = OAuthVerifier.of(limits)  # access tokens beside keys while NEXUS_PUBLIC_URL is set
    slots = ProcessingSlots(limits.processing_slots)  # the requests worked on at once, granted fairly
    gate = Gatekeeper(keys, limiter, sessions, failures, RequestShares.of(limits), oauth, slots)  # fair shares
    app.state.oauth = oauth
    app.state.processing_slots = slots
    # Inside the key check: no body read for a stranger; a processing slot once the body is read
    app.add_middleware(RequestGuard, settings=settings, keys=keys, slots=slots)
    # Right behind the key check: a wait over its share is refused before a slot, routing or validation
    app.state.wait_slots = WaitSlots(settings.max_waits_per_key, settings.max_waits_per_tenant)
    app.add_middleware(WaitRefusals, slots=app.state.wait_slots)
    app.add_middleware(AuthMiddleware, gate=gate)
    app.add_middleware(http_errors.RequestContext)  # outermost: the request id is set before anything answers
    if tracing.active():  # The maintained ASGI instrumentation, outermost; absent when tracing is off
        tracing.instrument(app)
    # POST /v1/events without the framework's layers (it steps aside while tracing is on)
    app.fast_path = EventsFastPath(app.framework, gate=gate, submitter=submitter, settings=settings, db=db)
    return keys, sessions, gate


def _add_events_route(
    app: FastAPI, settings: Settings, submitter: GroupCommitter, gate: Gatekeeper, db: Database
) -> None:
    """POST /v1/events as the framework serves it (the fast path's, while tracing is on)."""

    @app.post("/v1/events", summary="Submit one envelope or {'events': [...]}", openapi_extra=_EVENTS_BODY)
    async def post_events(request: Request) -> JSONResponse:
        refusal = media_type_refusal(request.headers.get("content-type"))
        body = refusal or await read_body(request, settings.max_body_bytes)
        if isinstance(body, Refusal):
            return error_response(body.status, body.code, body.message)
        status, content, headers = await answer_events(
            body, request.headers.get("traceparent"), principal_of(request), settings, submitter, gate, db
        )
        return JSONResponse(content, status_code=status, headers={k.decode(): v.decode() for k, v in headers})


def _add_order_routes(app: FastAPI, db: Database, settings: Settings) -> None:
    """GET /v1/orders/{id} (and its long poll) and GET /v1/plans/{id}."""

    @app.get("/v1/orders/{order_id}")
    async def get_order(
        request: Request,
        order_id: OrderId,
        tenant: Annotated[str | None, Query(max_length=200)] = None,
        wait: Annotated[float | None, Query(ge=0, le=86400)] = None,
        after_seq: Annotated[int | None, Query(ge=0, le=INT64_MAX)] = None,
        after_status: Annotated[str | None, Query(max_length=200)] = None,
    ) -> dict[str, Any]:
        """The order (with its saga, if any); with `wait=S` a long poll answering as soon as
        last_seq passes `after_seq`, the status differs from `after_status` (or, with neither, anything
        changed), or after S seconds, in the same shape."""
        principal = principal_of(request)
        tenant_id = read_tenant(principal, tenant)
        if wait is None:
            order = await read_order(db, tenant_id, order_id)
        else:
            from nexus.lifecycle.waiting import wait_for_order

            with request.app.state.wait_slots.hold(principal.key_id):  # 429 TOO_MANY_WAITS past the cap
                order = await wait_for_order(
                    request.app.state.decision_listener,
                    lambda: read_order(db, tenant_id, order_id),
                    tenant_id,
                    order_id,
                    min(wait, settings.wait_max_s),
                    after_seq=after_seq,
                    after_status=after_status,
                )
        if order is None:
            raise NotFoundError(f"no order {order_id!r}")
        return order

    @app.get("/v1/plans/{plan_id}")
    async def get_plan(request: Request, plan_id: PlanId) -> dict[str, Any]:
        rows = await db.fetch(query("api.sql", "plan_orders"), plan_id, principal_of(request).tenant_id)
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


def _add_process_routes(app: FastAPI, gateway: Gateway) -> None:
    """GET /v1/processes and GET /v1/processes/{name}."""

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


def _add_operator_routes(app: FastAPI, db: Database, gateway: Gateway) -> None:
    """The dead letters and their redrive, /metrics, /healthz and /readyz."""

    @app.get("/v1/dead-letters")
    async def dead_letters(
        request: Request,
        code: Annotated[str | None, Query(pattern=r"^[A-Z_]{1,64}$")] = None,
        source: Annotated[str | None, Query(pattern=r"^(http|kafka|buffer)$")] = None,
        include_redriven: bool = True,
        limit: int = Query(100, ge=1, le=1000),
        offset: int = Query(0, ge=0, le=INT64_MAX),
    ) -> dict[str, Any]:
        tenant = principal_of(request).tenant_id
        return {"dead_letters": await list_dead_letters(db, tenant, code, source, include_redriven, limit, offset)}

    @app.post("/v1/dead-letters/{dead_letter_id}/redrive")
    async def redrive(request: Request, dead_letter_id: Annotated[int, Path(ge=1, le=INT64_MAX)]) -> dict[str, Any]:
        principal = principal_of(request)
        outcome = await redrive_dead_letter(db, gateway, dead_letter_id, principal.tenant_id, principal)
        return {"dead_letter_id": dead_letter_id, "result": outcome.as_json()}

    @app.get("/metrics", response_class=PlainTextResponse)
    async def get_metrics(request: Request) -> Response:
        """Prometheus exposition. Its series name every tenant's subscriptions, so on the API only an
        operator key spanning every tenant reads it (a tenant's operator: 403); `NEXUS_METRICS_BIND`
        serves it without a key on an address of its own."""
        if not principal_of(request).all_tenants:
            return error_response(403, ErrorCode.FORBIDDEN, "metrics need an operator key spanning every tenant")
        await refresh_db_gauges(db)
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz(request: Request) -> JSONResponse:
        drain: Drain | None = request.app.state.drain
        if drain is not None and drain.draining:
            return error_response(503, ErrorCode.SERVER_BUSY, "draining: this instance is stopping", status="draining")
        try:
            reason = await db.not_ready()
        except NexusError as exc:
            return error_response(503, exc.code, "database unavailable", status="unavailable")
        if reason is not None:
            return error_response(503, ErrorCode.DATABASE_UNAVAILABLE, reason, status="unavailable")
        return JSONResponse({"status": "ready"})


def _include_routers(app: FastAPI) -> None:
    """The routers of the other parts of the API, in their order."""
    from nexus.auth.api import router as keys_router
    from nexus.ingress.delivery_api import router as delivery_router

    app.include_router(delivery_router)
    app.include_router(keys_router)
    from nexus.audit.api import router as audit_router  # The blocked-actions report

    app.include_router(audit_router)
    from nexus.console.views import router as console_router  # The web console

    app.include_router(console_router)
    from nexus.ingress.lifecycle_api import router as lifecycle_router  # History, waiting, approvals

    app.include_router(lifecycle_router)
    from nexus.ingress.steps_api import router as steps_router  # server-numbered steps (and MCP below)

    app.include_router(steps_router)


def rate_limits(settings: Any) -> Any:
    from nexus.auth.ratelimit import RateLimits
    from nexus.auth.roles import Role

    return RateLimits(
        {
            Role.AGENT: settings.rate_limit_agent,
            Role.OPERATOR: settings.rate_limit_operator,
            Role.APPROVER: settings.rate_limit_approver,
            Role.ADMIN: settings.rate_limit_admin,
        },
        # Unless set, the limit is divided among this serve's own HTTP processes
        processes=processes_of(settings),
    )


def processes_of(settings: Any) -> int:
    """The gateway processes sharing the load, among which rates are divided (`NEXUS_RATE_LIMIT_PROCESSES`,
    else this serve's own `workers`)."""
    return int(settings.rate_limit_processes or settings.workers)


async def read_order(db: Database, tenant_id: str, order_id: str) -> dict[str, Any] | None:
    """The tenant's order as `GET /v1/orders/{order_id}` shows it (the long poll too); None when nothing
    is known of it."""
    view = await db.fetchrow(query("api.sql", "order_view"), order_id, tenant_id)
    known = view is not None and view["last_seq"] is not None  # an order row (its last_seq is never NULL)
    buffered: list[int] = list(view["buffered"] or ()) if view is not None else []
    if view is None or (not known and not buffered):
        return None
    body: dict[str, Any] = {
        "order_id": order_id,
        "plan_id": view["plan_id"] if known else view["buffered_plan_id"],
        "status": view["status"],
        "last_seq": view["last_seq"] if known else 0,
        "buffered": buffered,
        "notifications": view["outbox_count"] if known else 0,
        "tombstone": view["tombstone"] if known else False,
    }
    saga = await order_saga(db, tenant_id, order_id)  # The saga and what holds the order
    if saga is not None:
        body["saga"] = saga
        body["effect"] = effect_of(saga)
    return body


async def refresh_db_gauges(db: Database) -> None:
    """The gauges read at scrape; `nexus_ready` says whether the database answered."""
    try:
        row = await db.fetchrow(query("api.sql", "gauges"))
    except NexusError:
        metrics.READY.set(0)
        return
    metrics.READY.set(1)
    with contextlib.suppress(NexusError):  # Sagas by status
        metrics.set_saga_counts({r["status"]: r["n"] for r in await db.fetch(query("saga.sql", "saga_gauges"))})
        retrying = await db.fetch(query("saga.sql", "saga_retrying_gauges"))
        metrics.set_saga_retrying({r["service"]: (r["n"], r["oldest_s"]) for r in retrying})
    await quotas.refresh_gauges(db)  # What each tenant stores against its quotas
    with contextlib.suppress(NexusError):  # Rows and bytes per table, from the catalog
        tables = await db.fetch(query("db.sql", "table_stats"))
        metrics.set_table_stats(
            {r["table_name"]: r["approx_rows"] for r in tables}, {r["table_name"]: r["total_bytes"] for r in tables}
        )
    if row is not None:
        metrics.PENDING_EVENTS.set(row["pending_events"])
        metrics.OUTBOX_ENTRIES.labels(state="pending").set(row["outbox_pending"])
        metrics.OUTBOX_ENTRIES.labels(state="dead").set(row["outbox_dead"])
        metrics.OUTBOX_OLDEST_PENDING.set(row["outbox_oldest_pending_s"])
