"""The console's pages as a newcomer reads them: orders newest first, who took each decision, a dead
letter's tenant, order and payload, ABORT_PLAN in the process diagrams, and a favicon (no 401 for it)."""

from __future__ import annotations

import html
import json
import re

import httpx

from nexus.auth.roles import Principal, Role
from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.lifecycle.approvals import answer, approver_of
from nexus.processes import register
from nexus.store.database import Database
from tests.factories import step_json
from tests.integration.test_console import browser, sign_in

__all__ = ["browser"]  # the fixture, imported for pytest


async def test_orders_are_listed_newest_first_across_pages(db: Database, browser: httpx.AsyncClient) -> None:
    """Three orders made one after the other: the list starts with the last one made, and the next page
    (keyset on creation time) goes on with the older ones, none twice."""
    gateway = Gateway(db)
    for name in ("zz-old", "aa-mid", "mm-new"):
        await gateway.submit([Incoming.parse(step_json(name, f"plan-{name}", 1))])
    await sign_in(browser)
    first = await browser.get("/console/orders")
    assert first.text.index("mm-new") < first.text.index("aa-mid") and "zz-old" not in first.text
    next_url = re.search(r'href="([^"]+)" rel="next"', first.text)
    assert next_url is not None
    second = await browser.get(html.unescape(next_url.group(1)))
    assert "zz-old" in second.text and "mm-new" not in second.text and "aa-mid" not in second.text
    assert (await browser.get("/console/orders", params={"after": "not-a-time|x/y"})).status_code == 200


async def test_the_timeline_names_who_took_each_decision(db: Database, browser: httpx.AsyncClient) -> None:
    """A held payment approved by a person: its APPLY row names the approver's key and its name; rows
    without an actor say so."""
    catalog = await register(db, None)
    gateway = Gateway(db, catalog=catalog)
    steps = [step_json("held-1", "hp", s, process="order_reviewed") for s in (1, 2, 3)]
    steps[0]["data"].update(items=[{"product_id": "p", "quantity": 1, "unit_price": 1500}], total_amount=1500)
    steps[2]["data"]["amount"] = 1500
    outcomes = await gateway.submit([Incoming.parse(s) for s in steps])
    assert outcomes[-1].approval_id is not None
    alice = approver_of(Principal(42, None, frozenset({Role.APPROVER}), "ops-alice"))  # as the API makes it
    await answer(gateway, outcomes[-1].approval_id, alice, approve=True)
    await sign_in(browser)
    page = await browser.get("/console/orders/default/held-1")
    timeline = page.text.split('id="timeline"')[1].split("</table>")[0]
    actors = re.findall(r'<td class="actor">(.*?)</td>', timeline)
    assert any("key:42" in a and "ops-alice" in a for a in actors), actors  # the key, its name beside
    assert "<th>by</th>" in timeline and all(a for a in actors)


async def test_a_dead_letter_shows_its_tenant_order_and_payload(db: Database, browser: httpx.AsyncClient) -> None:
    """A step of another plan (PLAN_MISMATCH) is a dead letter: its row names the tenant, links the order,
    and shows the payload that was sent."""
    gateway = Gateway(db)
    await gateway.submit([Incoming.parse(step_json("dl-1", "plan-a", 1))])
    await gateway.submit([Incoming.parse(step_json("dl-1", "plan-b", 2, correlation_id="corr-xyz"))])
    await sign_in(browser)
    page = await browser.get("/console/dead")
    row = next(r for r in page.text.split('<tr class="dead-letter">')[1:] if "dl-1" in r)
    assert '<td class="tenant">default</td>' in row
    assert 'href="/console/orders/default/dl-1"' in row
    payload = html.unescape(row.split("<pre>")[1].split("</pre>")[0])
    assert json.loads(payload)["plan_id"] == "plan-b" and "corr-xyz" in payload


async def test_process_diagrams_show_abort_edges_and_pages_carry_a_favicon(browser: httpx.AsyncClient) -> None:
    """Each process's diagram has its states as nodes with full names, dashed ABORT_PLAN edges into
    `aborted`; every page (the sign-in form too) declares an inline icon, so no /favicon.ico is asked for."""
    login = await browser.get("/console/login")
    assert 'rel="icon"' in login.text and "data:image/svg+xml" in login.text
    await sign_in(browser)
    page = await browser.get("/console/processes")
    diagrams = page.text.split('<svg xmlns="http://www.w3.org/2000/svg" class="process"')[1:]
    assert len(diagrams) >= 4
    for svg in diagrams:
        assert 'class="abort"' in svg and "ABORT_PLAN" in svg
        assert 'data-state="aborted"' in svg
    assert ">inventory_validated</text>" in page.text  # whole, not cut at 18 characters
