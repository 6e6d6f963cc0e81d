"""The web console (/console) over real HTTP handling and real PostgreSQL, without a browser: sign-in, the
session cookie, CSRF, the pages, and a dead delivery redriven with its button."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest

from nexus.auth.keys import hash_key
from nexus.gateway import Gateway, Incoming
from nexus.ingress.http import create_app
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.sink import Faults, start_sink
from tests.conftest import TEST_API_KEY, api_headers
from tests.factories import step_json
from tests.helpers import wait_until
from tests.integration.test_delivery import SECRET, dispatching, settled, subscribe

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
async def browser(db: Database, settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """A cookie-keeping client of the app; it also sends the Bearer header, which the console must ignore."""
    app = create_app(db, Gateway(db), settings=settings.replace(console_page_size=2))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://console", headers=api_headers()) as client:
        yield client


async def sign_in(client: httpx.AsyncClient, key: str = TEST_API_KEY) -> httpx.Response:
    form = await client.get("/console/login")
    token = CSRF.search(form.text)
    assert token is not None
    return await client.post("/console/login", data={"csrf": token.group(1), "api_key": key})


async def csrf_of(client: httpx.AsyncClient, path: str) -> str:
    page = await client.get(path)
    token = CSRF.search(page.text)
    assert page.status_code == 200 and token is not None
    return token.group(1)


async def test_pages_need_a_session_not_a_bearer_key(browser: httpx.AsyncClient) -> None:
    """A console page with only a Bearer header is sent to the sign-in form; nothing else is shown."""
    response = await browser.get("/console/orders")
    assert response.status_code == 303 and response.headers["location"] == "/console/login"
    assert "Orders" not in response.text


async def test_sign_in_sets_a_strict_httponly_cookie_and_checks_csrf(browser: httpx.AsyncClient) -> None:
    """A wrong CSRF token or an unknown key is refused; the right ones give an HttpOnly, SameSite=Strict
    session cookie that opens the pages; signing out ends the session."""
    await browser.get("/console/login")
    bad = await browser.post("/console/login", data={"csrf": "forged", "api_key": TEST_API_KEY})
    assert bad.status_code == 403 and "nexus_console=" not in bad.headers.get("set-cookie", "")
    unknown = await sign_in(browser, "nxk_not-a-key")
    assert unknown.status_code == 401
    ok = await sign_in(browser)
    assert ok.status_code == 303 and ok.headers["location"] == "/console/orders"
    cookie = ok.headers["set-cookie"]
    assert "nexus_console=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert (await browser.get("/console/orders")).status_code == 200
    token = await csrf_of(browser, "/console/orders")
    assert (await browser.post("/console/logout", data={"csrf": token})).status_code == 303
    assert (await browser.get("/console/orders")).status_code == 303


async def test_a_key_without_the_operator_role_cannot_sign_in(db: Database, browser: httpx.AsyncClient) -> None:
    """An agent's key is refused at the sign-in form (403) and gets no session."""
    await db.execute(
        "INSERT INTO api_keys (name, tenant_id, roles, key_hash) VALUES ('agent', 'default', $1, $2)",
        ["agent"],
        hash_key("nxk_agent-only-key-000000000000000000000000"),
    )
    response = await sign_in(browser, "nxk_agent-only-key-000000000000000000000000")
    assert response.status_code == 403 and "operator" in response.text
    assert (await browser.get("/console/orders")).status_code == 303


async def test_orders_filter_paginate_and_an_order_shows_its_rejected_and_buffered_steps(
    db: Database, browser: httpx.AsyncClient
) -> None:
    """The orders list filters by status and id and pages by key; the order's page shows the REJECTED step
    with its code and message, the BUFFER decision, and its notifications."""
    gateway = Gateway(db)
    items = [Incoming.parse(step_json(f"con-{i}", f"cp-{i}", 1)) for i in range(5)]
    items.append(Incoming.parse(step_json("con-0", "cp-0", 2, event_type="OrderShipped")))  # out of turn
    items.append(Incoming.parse(step_json("con-0", "cp-0", 4)))  # ahead of a gap
    items.append(Incoming.parse(step_json("con-1", "cp-1", 2)))
    outcomes = await gateway.submit(items)
    assert [o.decision.value for o in outcomes[5:]] == ["REJECTED", "BUFFER", "APPLY"]
    await sign_in(browser)
    first = await browser.get("/console/orders")
    assert first.status_code == 200 and "con-0" in first.text and "con-1" in first.text and "con-2" not in first.text
    next_url = re.search(r'href="([^"]+)" rel="next"', first.text)
    assert next_url is not None
    second = await browser.get(next_url.group(1).replace("&amp;", "&"))
    assert "con-2" in second.text and "con-0" not in second.text
    filtered = await browser.get("/console/orders", params={"status": "inventory_validated"})
    assert "con-1" in filtered.text and "con-0" not in filtered.text
    found = await browser.get("/console/orders", params={"q": "con-3"})
    assert "con-3" in found.text and "con-4" not in found.text
    page = await browser.get("/console/orders/default/con-0")
    assert page.status_code == 200
    timeline = page.text.split('id="timeline"')[1].split("</table>")[0]
    assert 'class="REJECTED"' in timeline and "INVALID_TRANSITION" in timeline and 'class="BUFFER"' in timeline
    assert "OrderShipped" in timeline
    missing = await browser.get("/console/orders/default/no-such-order")
    assert missing.status_code == 404


async def test_report_pages_render(db: Database, browser: httpx.AsyncClient) -> None:
    """Blocked actions (with the inline SVG chart), subscriptions (breaker state) and processes (state
    diagram) render for a signed-in operator."""
    gateway = Gateway(db)
    await gateway.submit([Incoming.parse(step_json("blk-1", "bp-1", 3))])
    await gateway.submit([Incoming.parse(step_json("blk-2", "bp-2", 1, event_type="OrderShipped"))])
    await subscribe(db, "http://127.0.0.1:9/hook", name="sub-a", tenant_id="default")
    await sign_in(browser)
    blocked = await browser.get("/console/blocked")
    assert blocked.status_code == 200 and "<svg" in blocked.text and "INVALID_TRANSITION" in blocked.text
    subs = await browser.get("/console/subscriptions")
    assert "sub-a" in subs.text and 'class="closed"' in subs.text
    procs = await browser.get("/console/processes")
    assert "stateDiagram-v2" in procs.text and "<svg" in procs.text


async def test_a_dead_delivery_is_redriven_with_the_button_and_then_delivered(
    db: Database, settings: Settings, browser: httpx.AsyncClient
) -> None:
    """A delivery dead after a 4xx shows on the dead page; its form without the CSRF token is refused, with it
    the delivery goes back to pending, and once the receiver is healed it is delivered."""
    sink = await start_sink(Faults(fail_rate=1.0, fail_status=(400,)), secret=SECRET)
    try:
        await subscribe(db, sink.url + "/hook", name="hook")
        await Gateway(db).submit([Incoming.parse(step_json("red-1", "rp-1", 1))])
        async with dispatching(db, settings):
            await wait_until(lambda: settled(db), 20, "dead")
        await sign_in(browser)
        dead = await browser.get("/console/dead")
        action = re.search(r'action="(/console/deliveries/[^"]+/redrive)"', dead.text)
        assert action is not None and "red-1" in dead.text
        refused = await browser.post(action.group(1), data={"csrf": "wrong"})
        assert refused.status_code == 403
        token = await csrf_of(browser, "/console/dead")
        done = await browser.post(action.group(1), data={"csrf": token})
        assert done.status_code == 303
        assert "redriven" in (await browser.get(done.headers["location"])).text
        sink.sink.faults = Faults()
        async with dispatching(db, settings):
            await wait_until(lambda: settled(db), 20, "redelivery")
        page = await browser.get("/console/orders/default/red-1")
        notes = page.text.split('id="notifications"')[1].split("</table>")[0]
        assert 'class="delivered"' in notes and 'class="dead"' not in notes
        assert [r["status"] for r in sink.sink.records][-1] == 200
    finally:
        await sink.aclose()
