"""The console in a real browser (headless Chromium) on a `nexus serve` that took a hostile load."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import Page, async_playwright

from nexus_lab.sink import Faults, start_sink
from tests.conftest import TEST_API_KEY, api_headers
from tests.factories import step_json

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def hostile_load(prefix: str) -> list[Any]:
    """A demo-like load with an agent misbehaving: good plans, steps out of turn, an invented step type, a
    wrong total (a failed check), a repeated step, and bodies that are not envelopes at all."""
    load: list[Any] = []
    for i in range(6):
        order, plan = f"{prefix}-{i}", f"{prefix}-plan-{i}"
        steps = [step_json(order, plan, s) for s in (1, 2, 3)]
        load.extend(steps)
        load.append(steps[1])  # repeated
        load.append(step_json(order, plan, 4, event_type="OrderCompleted"))  # out of turn: REJECTED
    load.append(step_json(f"{prefix}-x", f"{prefix}-plan-x", 1, event_type="OrderTeleported"))
    bad_total = step_json(f"{prefix}-t", f"{prefix}-plan-t", 1)
    bad_total["data"]["total_amount"] = 999
    load.append(bad_total)
    load.append({"event_id": "not-a-uuid", "event_type": "OrderCreated"})
    return load


async def shot(page: Page, out: Path, name: str) -> None:
    await page.screenshot(path=str(out / f"{name}.png"), full_page=True)
    assert (out / f"{name}.png").stat().st_size > 1000


async def test_console_in_chromium_shows_a_rejected_step_and_redrives_a_dead_delivery(
    start_gateway: Any, tmp_path: Path
) -> None:
    """Sign in through the form, find a REJECTED step on an order's page, redrive a dead delivery with its
    button and see it delivered; a screenshot of every page lands in the test's tmp directory."""
    sink = await start_sink(Faults(fail_rate=1.0, fail_status=(400,)))
    _, base = start_gateway()
    prefix = f"br{uuid.uuid4().hex[:5]}"
    out = tmp_path / "screenshots"
    out.mkdir()
    try:
        async with httpx.AsyncClient(base_url=base, headers=api_headers()) as api:
            created = await api.post("/v1/subscriptions", json={"name": "browser-hook", "url": sink.url + "/hook"})
            assert created.status_code == 201, created.text
            body = json.dumps({"events": hostile_load(prefix)})
            answer = await api.post("/v1/events", content=body, headers={"content-type": "application/json"})
            decisions = {r["decision"] for r in answer.json()["results"]}
            assert {"APPLY", "REJECTED", "DUPLICATE", "DEAD_LETTER"} <= decisions
            for _ in range(200):  # the 400s make every delivery dead at once
                dead = (await api.get("/v1/deliveries/dead", params={"limit": 1000})).json()["deliveries"]
                if len(dead) >= 18:
                    break
                await asyncio.sleep(0.1)
            assert len(dead) >= 18  # three notifications of each of the six plans
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = await browser.new_page(viewport={"width": 1400, "height": 900})
            await page.goto(base + "/console/orders")
            assert page.url.endswith("/console/login")
            await shot(page, out, "login")
            await page.fill("input[name=api_key]", TEST_API_KEY)
            await page.click("button[type=submit]")
            await page.wait_for_url("**/console/orders")
            await page.fill("input[name=q]", f"{prefix}-0")
            await page.click("text=Filter")
            await shot(page, out, "orders")
            await page.click(f"a:text-is('{prefix}-0')")
            await page.wait_for_selector("#timeline")
            rejected = page.locator("#timeline tr.REJECTED")
            assert await rejected.count() == 1
            assert "INVALID_TRANSITION" in await rejected.inner_text()
            await shot(page, out, "order")
            for name in ("blocked", "subscriptions", "processes"):
                await page.goto(f"{base}/console/{name}")
                await shot(page, out, name)
            assert await page.locator("svg").count() >= 1
            await page.goto(base + "/console/dead")
            await shot(page, out, "dead")
            sink.sink.faults = Faults()  # the receiver is healed; the redrive button sends it again
            row = page.locator("#dead-deliveries tr", has_text=f"{prefix}-0").first
            await row.locator("button", has_text="Redrive").click()
            await page.wait_for_selector("#note")
            assert "redriven" in await page.locator("#note").inner_text()
            await shot(page, out, "redriven")
            delivered = 0
            for _ in range(100):
                await page.goto(f"{base}/console/orders/default/{prefix}-0")
                delivered = await page.locator("#notifications tr.delivered").count()
                if delivered:
                    break
                await asyncio.sleep(0.1)
            assert delivered == 1
            await shot(page, out, "delivered")
            await browser.close()
    finally:
        await sink.aclose()
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{n}.png"
        for n in ("login", "orders", "order", "blocked", "subscriptions", "processes", "dead", "redriven", "delivered")
    )
