"""The web console (/console) over real HTTP handling and real PostgreSQL, without a browser: sign-in, the
session cookie, CSRF, the pages, and a dead delivery redriven with its button."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest

from nexus.auth.keys import hash_key
from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.ingress.http import create_app
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.sink import Faults, start_sink
from tests.conftest import TEST_API_KEY, api_headers
from tests.factories import step_json
from tests.helpers import wait_until
from tests.integration.test_delivery import SECRET, dispatching, settled, subscribe
from tests.integration.test_sagas import Harness, harness, services

__all__ = ["harness", "services"]  # fixtures, imported for pytest

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
    """The orders list (newest first) filters by status and id and pages by key; the order's page shows the
    REJECTED step with its code and message, the BUFFER decision, and its notifications."""
    gateway = Gateway(db)
    for i in range(5):  # one transaction each: five creation times
        await gateway.submit([Incoming.parse(step_json(f"con-{i}", f"cp-{i}", 1))])
    items = [Incoming.parse(step_json("con-0", "cp-0", 2, event_type="OrderShipped"))]  # out of turn
    items.append(Incoming.parse(step_json("con-0", "cp-0", 4)))  # ahead of a gap
    items.append(Incoming.parse(step_json("con-1", "cp-1", 2)))
    outcomes = await gateway.submit(items)
    assert [o.decision.value for o in outcomes] == ["REJECTED", "BUFFER", "APPLY"]
    await sign_in(browser)
    first = await browser.get("/console/orders")
    assert first.status_code == 200 and "con-4" in first.text and "con-3" in first.text
    assert first.text.index("con-4") < first.text.index("con-3") and "con-2" not in first.text
    next_url = re.search(r'href="([^"]+)" rel="next"', first.text)
    assert next_url is not None
    second = await browser.get(next_url.group(1).replace("&amp;", "&"))
    assert "con-2" in second.text and "con-1" in second.text and "con-4" not in second.text
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


async def test_an_order_page_shows_every_delivery_attempt_and_the_sagas_compensations(
    db: Database, settings: Settings, browser: httpx.AsyncClient, harness: Harness
) -> None:
    """A fulfilment order whose payment is refused for good: its page lists the saga's steps (the reserve
    COMPENSATED with its compensation call, the charge FAILED), and each notification with every delivery
    attempt per subscriber (503, 503, 200 for the flaky one; 200 for the other)."""
    harness.services.services.faults["payment"].permanent_fail_rate = 1.0
    flaky = await start_sink(Faults(fail_first=2, fail_status=(503,)), secret=SECRET)
    steady = await start_sink(secret=SECRET)
    try:
        await subscribe(db, flaky.url + "/hook", name="flaky")
        await subscribe(db, steady.url + "/hook", name="steady")
        await harness.send("con-saga", 1, 2, 3)
        await harness.settle()
        async with dispatching(db, settings.replace(retry_base_ms=10, retry_max_ms=20)):
            await wait_until(lambda: settled(db), 30, "deliveries")
    finally:
        await flaky.aclose()
        await steady.aclose()
    await sign_in(browser)
    page = await browser.get("/console/orders/default/con-saga")
    assert page.status_code == 200
    saga = page.text.split('id="saga"')[1].split("</table>")[0]
    reserve, charge = (row for row in saga.split("<tr")[2:])
    assert "InventoryValidated" in reserve and "COMPENSATED" in reserve and "POST /release" in reserve
    assert "PaymentProcessed" in charge and "FAILED" in charge
    notes = page.text.split('id="notifications"')[1].split("</table>")[0]
    rows = [row for row in notes.split("<tr")[2:] if "OrderCreated" in row]
    by_subscriber = {("flaky" if "flaky" in row else "steady"): row for row in rows}
    flaky_attempts = re.findall(r'<li class="attempt (\w+)">#(\d) [\d:\- ]+ (\d+)', by_subscriber["flaky"])
    assert flaky_attempts == [("retryable", "1", "503"), ("retryable", "2", "503"), ("delivered", "3", "200")]
    steady_attempts = re.findall(r'<li class="attempt (\w+)">#(\d) [\d:\- ]+ (\d+)', by_subscriber["steady"])
    assert steady_attempts == [("delivered", "1", "200")]


async def test_the_order_page_refreshes_its_fragment_only_when_the_order_changed(
    db: Database, browser: httpx.AsyncClient
) -> None:
    """The page reads in full without script and names its live fragment (htmx polling while visible);
    the fragment answers 204 while nothing changed and the new fragment once a step was applied."""
    gateway = Gateway(db)
    await gateway.submit([Incoming.parse(step_json("live-1", "lp-1", 1))])
    await sign_in(browser)
    page = await browser.get("/console/orders/default/live-1")
    assert 'id="timeline"' in page.text and "OrderCreated" in page.text
    live = re.search(
        r'hx-get="(/console/orders/default/live-1/live\?digest=(\w+))" hx-trigger="every 2.0s \[', page.text
    )
    assert live is not None and "document.visibilityState" in page.text
    script = re.search(r'<script src="(/console/static/[^"]+)"', page.text)
    assert script is not None
    js = await browser.get(script.group(1))
    assert (
        js.status_code == 200 and "htmx" in js.text[:2000] and js.headers["content-type"].startswith("text/javascript")
    )
    same = await browser.get(live.group(1))
    assert same.status_code == 204
    await gateway.submit([Incoming.parse(step_json("live-1", "lp-1", 2))])
    changed = await browser.get(live.group(1))
    assert changed.status_code == 200 and "InventoryValidated" in changed.text and "<html" not in changed.text
    digest = re.search(r'data-digest="(\w+)"', changed.text)
    assert digest is not None and digest.group(1) != live.group(2)
    again = await browser.get(f"/console/orders/default/live-1/live?digest={digest.group(1)}")
    assert again.status_code == 204
    assert (await browser.get("/console/orders/default/no-such/live")).status_code == 404
