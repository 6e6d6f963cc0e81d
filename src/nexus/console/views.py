"""The console's pages (a FastAPI router under /console), server-rendered from Jinja2 templates, no script.

Authentication is the auth middleware's (`nexus.auth.roles.uses_session`): a page is reached only with a
live session whose key holds the operator role; the principal's tenant scopes every query. Every form
carries the session's CSRF token and every POST checks it before doing anything.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import hmac
import importlib.resources
import secrets
import time
import urllib.parse
import uuid
from typing import Any

import jinja2
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from markupsafe import Markup

from nexus.audit.report import Filters, _bar_chart, blocked_actions, blocked_summary
from nexus.auth.keys import Refusal, hash_key
from nexus.auth.middleware import principal_of
from nexus.auth.roles import Principal, Role
from nexus.auth.sessions import COOKIE, LOGIN_COOKIE, Session, SessionStore, cookie_of, same_token
from nexus.console.diagram import state_svg
from nexus.delivery import subscriptions as subs
from nexus.errors import NexusError
from nexus.gateway import trace_id_of
from nexus.store.database import Database
from nexus.store.queries import query

router = APIRouter(prefix="/console", include_in_schema=False)

_templates = jinja2.Environment(
    loader=jinja2.PackageLoader("nexus.console", "templates"),
    autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
    undefined=jinja2.StrictUndefined,
)
HTMX = "htmx-2.0.11.min.js"
STATUSES = ("created", "inventory_validated", "payment_processed", "shipped", "completed", "aborted")
_NO_STORE = {"cache-control": "no-store"}


def _db(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


def _sessions(request: Request) -> SessionStore:
    store: SessionStore = request.app.state.console_sessions
    return store


def _session(request: Request) -> Session:
    session: Session = request.state.console_session
    return session


def _page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    started = time.perf_counter()
    principal = getattr(request.state, "principal", None)
    session = getattr(request.state, "console_session", None)
    body = _templates.get_template(template).render(
        request_path=request.url.path,
        principal=principal,
        tenant=(principal.tenant_id or "every tenant") if principal else None,
        csrf=session.csrf if session else context.pop("csrf", ""),
        htmx=HTMX,
        **context,
    )
    headers = {**_NO_STORE, "server-timing": f"render;dur={(time.perf_counter() - started) * 1000:.1f}"}
    return HTMLResponse(body, status_code=status, headers=headers)


async def _form(request: Request) -> dict[str, str]:
    body = (await request.body())[:65536].decode("utf-8", "replace")
    return {k: v[0] for k, v in urllib.parse.parse_qs(body, keep_blank_values=True).items()}


def _csrf_refused(request: Request, form: dict[str, str]) -> Response | None:
    if same_token(form.get("csrf"), _session(request).csrf):
        return None
    return _page(request, "message.html", 403, title="Refused", message="The form's CSRF token is missing or wrong.")


def _back(request: Request, path: str, note: str) -> RedirectResponse:
    """Back to `path`, showing `note`: signed with the session's secret, so a page shows only the notes
    the console wrote itself (never text a link put into the URL)."""
    query_ = urllib.parse.urlencode({"note": note, "sig": _note_signature(request, note)})
    return RedirectResponse(f"{path}?{query_}", status_code=303, headers=_NO_STORE)


def _note_signature(request: Request, note: str) -> str:
    return hmac.new(_session(request).csrf.encode(), note.encode(), hashlib.sha256).hexdigest()


def _note(request: Request) -> str | None:
    """The note `_back` sent this page, if its signature is this session's; else none."""
    note, sig = request.query_params.get("note"), request.query_params.get("sig")
    if note is None or sig is None or not hmac.compare_digest(sig, _note_signature(request, note)):
        return None
    return note


def _secure(request: Request) -> bool:
    """Whether cookies are `Secure`: NEXUS_CONSOLE_SECURE, or the request came over https."""
    return bool(request.app.state.settings.console_secure) or request.url.scheme == "https"


# -- sign in / out ---------------------------------------------------------------------------------------


@router.get("/login")
async def login_form(request: Request) -> Response:
    token = secrets.token_urlsafe(24)
    response = _page(request, "login.html", csrf=token, error=None)
    response.set_cookie(
        LOGIN_COOKIE, token, httponly=True, samesite="strict", path="/console/login", secure=_secure(request)
    )
    return response


@router.post("/login")
async def login(request: Request) -> Response:
    form = await _form(request)
    expected = cookie_of(request.scope["headers"], LOGIN_COOKIE)
    if not same_token(form.get("csrf"), expected):
        return _page(request, "login.html", 403, csrf=expected or "", error="The form expired; try again.")
    key = form.get("api_key", "").strip()
    found = await request.app.state.keys.check_hash(hash_key(key)) if key else Refusal.UNKNOWN
    principal = found if isinstance(found, Principal) else None
    if principal is None and request.app.state.gate.record_failure(request.scope, found) > 0:
        error = "Too many failed sign-ins from this address; try again in a minute."
        return _page(request, "login.html", 429, csrf=expected or "", error=error)
    if principal is None or Role.OPERATOR not in principal.roles:
        error = "Unknown or revoked key." if principal is None else "This key lacks the operator role."
        return _page(request, "login.html", 401 if principal is None else 403, csrf=expected or "", error=error)
    sid, _ = await _sessions(request).create(hash_key(key))
    response = RedirectResponse("/console/orders", status_code=303, headers=_NO_STORE)
    response.set_cookie(COOKIE, sid, httponly=True, samesite="strict", path="/console", secure=_secure(request))
    response.delete_cookie(LOGIN_COOKIE, path="/console/login", secure=_secure(request))
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    form = await _form(request)
    if (refused := _csrf_refused(request, form)) is not None:
        return refused
    await _sessions(request).drop(cookie_of(request.scope["headers"], COOKIE))
    response = RedirectResponse("/console/login", status_code=303, headers=_NO_STORE)
    response.delete_cookie(COOKIE, path="/console", secure=_secure(request))
    return response


@router.get("")
async def home() -> Response:
    return RedirectResponse("/console/orders", status_code=303)


# -- orders ----------------------------------------------------------------------------------------------


@router.get("/orders")
async def orders(
    request: Request,
    status: str = "",
    tenant: str = "",
    process: str = "",
    q: str = "",
    after: str = "",
) -> Response:
    viewer = principal_of(request).tenant_id
    after_at, after_tenant, after_order = _after(after)
    size = request.app.state.settings.console_page_size
    rows = await _db(request).fetch(
        query("console.sql", "orders"),
        viewer,
        status or None,
        tenant or None,
        process or None,
        q.strip()[:200] or None,
        after_at,
        after_tenant,
        after_order,
        size + 1,
    )
    more = len(rows) > size
    rows = rows[:size]
    filters = {"status": status, "tenant": tenant, "process": process, "q": q}
    next_url = None
    if more and rows:
        last = rows[-1]
        next_url = "/console/orders?" + urllib.parse.urlencode(
            {
                **{k: v for k, v in filters.items() if v},
                "after": f"{last['created_at'].isoformat()}|{last['tenant_id']}/{last['order_id']}",
            }
        )
    return _page(request, "orders.html", rows=rows, filters=filters, statuses=STATUSES, next_url=next_url, after=after)


def _after(after: str) -> tuple[dt.datetime | None, str, str]:
    """The previous page's last order (`<created_at ISO>|<tenant>/<order_id>`); (None, "", "") for the
    first page or a value that does not parse."""
    at, _, key = after.partition("|")
    tenant, _, order_id = key.partition("/")
    try:
        when = dt.datetime.fromisoformat(at)
    except ValueError:
        return None, "", ""
    return (when, tenant, order_id) if when.tzinfo is not None else (None, "", "")


@router.get("/orders/{tenant}/{order_id}")
async def order_page(request: Request, tenant: str, order_id: str) -> Response:
    context = await _order_context(request, tenant, order_id)
    if context is None:
        return _page(request, "message.html", 404, title="Not found", message=f"No order {order_id} of {tenant}.")
    return _page(request, "order.html", **context, note=_note(request))


@router.get("/orders/{tenant}/{order_id}/live")
async def order_fragment(request: Request, tenant: str, order_id: str, digest: str = "") -> Response:
    """The order page's changing part alone, for its live refresh (templates/live.html); 204 (htmx keeps
    the page as it is) while it is the same as the page's `digest`."""
    context = await _order_context(request, tenant, order_id)
    if context is None:
        return Response(status_code=404, headers=_NO_STORE)
    if digest and digest == context["digest"]:
        return Response(status_code=204, headers=_NO_STORE)
    return _page(request, "order_live.html", **context)


async def _order_context(request: Request, tenant: str, order_id: str) -> dict[str, Any] | None:
    """What the order page shows: the order, its timeline, buffered steps, saga (steps and compensations),
    notifications with every delivery attempt per subscriber; None if the viewer may not see it."""
    viewer = principal_of(request).tenant_id
    db = _db(request)
    order = await db.fetchrow(query("console.sql", "order"), viewer, tenant, order_id)
    timeline = await db.fetch(query("console.sql", "timeline"), tenant, order_id) if order or viewer is None else []
    if order is None and not timeline:
        return None
    buffered = await db.fetch(query("console.sql", "buffered"), tenant, order_id)
    notes = await db.fetch(query("console.sql", "notifications"), tenant, order_id)
    tried: dict[tuple[Any, int], list[Any]] = {}
    for a in await db.fetch(query("console.sql", "attempts"), tenant, order_id):
        tried.setdefault((a["outbox_id"], a["subscription_id"]), []).append(a)
    saga = await db.fetchrow(query("console.sql", "saga"), tenant, order_id)
    saga_steps = await db.fetch(query("console.sql", "saga_steps"), tenant, order_id) if saga else []
    traceparents = [n["traceparent"] for n in notes] + [b["traceparent"] for b in buffered]
    trace_ids = sorted({t for t in (trace_id_of(tp) for tp in traceparents) if t})
    grouped: dict[int, dict[str, Any]] = {}
    for n in notes:
        entry = grouped.setdefault(n["position"], {"n": n, "deliveries": []})
        if n["subscription_id"] is not None:
            entry["deliveries"].append({"d": n, "attempts": tried.get((n["outbox_id"], n["subscription_id"]), [])})
    context: dict[str, Any] = {
        "order": order,
        "tenant_id": tenant,
        "order_id": order_id,
        "timeline": timeline,
        "buffered": buffered,
        "saga": saga,
        "saga_steps": saga_steps,
        "notifications": list(grouped.values()),
        "trace_ids": trace_ids,
        "live_url": f"/console/orders/{urllib.parse.quote(tenant)}/{urllib.parse.quote(order_id)}/live",
        "poll_s": request.app.state.settings.console_poll_s,
    }
    # The fragment's own rendering, hashed: the live refresh swaps only when something shown changed.
    body = _templates.get_template("order_live.html").render(csrf="", digest="", **context)
    context["digest"] = hashlib.sha256(body.encode()).hexdigest()[:32]
    return context


@router.get("/static/{name}")
async def static(name: str) -> Response:
    """The console's one script, htmx (vendored, no build step: static/README.md), cached for a day."""
    if name != HTMX:
        return Response(status_code=404)
    return Response(_htmx(), media_type="text/javascript", headers={"cache-control": "private, max-age=86400"})


@functools.cache
def _htmx() -> bytes:
    return importlib.resources.files("nexus.console").joinpath("static", HTMX).read_bytes()


# -- blocked actions --------------------------------------------------------------------------------------


@router.get("/blocked")
async def blocked(request: Request, code: str | None = None) -> Response:
    filters = Filters(tenant=principal_of(request).tenant_id, code=code or None)
    summary = await blocked_summary(_db(request), filters)
    items, _ = await blocked_actions(_db(request), filters, limit=100)
    chart = Markup(_bar_chart(summary["by_code"], "blocked actions by code"))  # noqa: S704 - escaped by the report
    return _page(request, "blocked.html", summary=summary, items=items, chart=chart, code=code or "")


# -- dead letters and dead deliveries, with redrive -------------------------------------------------------


@router.get("/dead")
async def dead(request: Request) -> Response:
    viewer = principal_of(request).tenant_id
    db = _db(request)
    rows = await db.fetch(query("api.sql", "dead_letters"), None, None, False, 200, 0, viewer)
    letters = [{**dict(r), "payload_text": _shown_payload(r["payload"])} for r in rows]
    deliveries = await subs.list_dead_deliveries(db, None, 200, 0, viewer)
    return _page(request, "dead.html", letters=letters, deliveries=deliveries, note=_note(request))


PAYLOAD_SHOWN = 4000
"""Characters of a dead letter's payload the page shows (the API and `nexus dlq` give it whole)."""


def _shown_payload(payload: str | None) -> str:
    """A dead letter's payload as sent, pretty-printed when it is JSON, cut at PAYLOAD_SHOWN characters."""
    import contextlib
    import json

    text = payload or ""
    with contextlib.suppress(ValueError):  # UnicodeEncodeError too: an escaped lone surrogate stays as sent
        pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        pretty.encode("utf-8")
        text = pretty
    return text if len(text) <= PAYLOAD_SHOWN else text[:PAYLOAD_SHOWN] + f"\n... ({len(text)} characters)"


@router.post("/dead-letters/{dead_letter_id}/redrive")
async def redrive_letter(request: Request, dead_letter_id: int) -> Response:
    form = await _form(request)
    if (refused := _csrf_refused(request, form)) is not None:
        return refused
    redrive, gateway = request.app.state.redrive_dead_letter, request.app.state.gateway
    try:
        principal = principal_of(request)  # the signed-in operator's key: the decision log's actor
        outcome = await redrive(_db(request), gateway, dead_letter_id, principal.tenant_id, principal)
    except NexusError as exc:
        return _back(request, "/console/dead", f"dead letter {dead_letter_id}: {exc.code.value} {exc}")
    return _back(request, "/console/dead", f"dead letter {dead_letter_id} redriven: {outcome.decision.value}")


@router.post("/deliveries/{outbox_id}/{subscription_id}/redrive")
async def redrive_delivery(request: Request, outbox_id: uuid.UUID, subscription_id: int) -> Response:
    form = await _form(request)
    if (refused := _csrf_refused(request, form)) is not None:
        return refused
    try:
        await subs.redrive_delivery(_db(request), outbox_id, subscription_id, principal_of(request).tenant_id)
    except NexusError as exc:
        return _back(request, "/console/dead", f"delivery {outbox_id}: {exc.code.value} {exc}")
    return _back(request, "/console/dead", f"delivery {outbox_id} to subscription {subscription_id} redriven: pending")


# -- approvals (read-only: an approver answers through the API, the CLI or MCP) ---------------------------


@router.get("/approvals")
async def approvals(request: Request) -> Response:
    from nexus.lifecycle.approvals import Approver, pending

    viewer = principal_of(request)
    items = await pending(_db(request), Approver(viewer.name or "console", viewer.tenant_id), limit=200)
    return _page(request, "approvals.html", approvals=items)


# -- subscriptions and processes --------------------------------------------------------------------------


@router.get("/subscriptions")
async def subscriptions(request: Request) -> Response:
    viewer = principal_of(request).tenant_id
    rows = await subs.list_subscriptions(_db(request), viewer)
    counts = {r["subscription_id"]: r for r in await subs.accounting(_db(request), viewer)}
    return _page(request, "subscriptions.html", subscriptions=rows, counts=counts)


@router.get("/processes")
async def processes(request: Request) -> Response:
    from nexus.processes import builtin_catalog, describe, mermaid

    catalog = request.app.state.gateway.catalog or builtin_catalog()
    shown = [
        {**describe(p), "mermaid": mermaid(p), "svg": Markup(state_svg(p))}  # noqa: S704 - built from escaped text
        for _, p in sorted(catalog.versions.items())
    ]
    return _page(request, "processes.html", processes=shown)


def fmt_time(value: dt.datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else ""


_templates.filters["t"] = fmt_time
