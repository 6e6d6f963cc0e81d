"""The console in headless Chromium, short (the version `make test` runs; `make console-test` has the long one):
one sign-in, one order page with a rejected step, one redrive with the button, seen live on the order page."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import async_playwright

from nexus.settings import Settings
from nexus_lab.sink import Faults, start_sink
from tests.browser.test_console_browser import ARGS, CHROMIUM, shot
from tests.conftest import TEST_API_KEY, api_headers
from tests.factories import step_json


async def test_sign_in_see_a_rejected_step_redrive_and_watch_the_order_page_update(
    start_gateway: Any, settings: Settings, tmp_path: Path
) -> None:
    """Signed in through the form, an order's page shows its REJECTED step and a dead delivery; the Redrive
    button (in a second tab) sends it again, and the open order page, never reloaded, turns it delivered
    by its live refresh."""
    sink = await start_sink(Faults(fail_rate=1.0, fail_status=(400,)))
    _, base = start_gateway(settings_=settings.replace(console_poll_s=0.3))
    order = f"brs{uuid.uuid4().hex[:5]}"
    out = tmp_path / "screenshots"
    out.mkdir()
    try:
        async with httpx.AsyncClient(base_url=base, headers=api_headers()) as api:
            created = await api.post("/v1/subscriptions", json={"name": "short-hook", "url": sink.url + "/hook"})
            assert created.status_code == 201, created.text
            plan = f"{order}-plan"
            load = [step_json(order, plan, 1), step_json(order, plan, 2, event_type="OrderShipped")]
            answer = await api.post("/v1/events", content=json.dumps({"events": load}),
                                    headers={"content-type": "application/json"})  # fmt: skip
            assert [r["decision"] for r in answer.json()["results"]] == ["APPLY", "REJECTED"]
            dead: list[Any] = []
            for _ in range(100):  # the 400 makes the delivery dead at once
                dead = (await api.get("/v1/deliveries/dead")).json()["deliveries"]
                if dead:
                    break
                await asyncio.sleep(0.1)
            assert len(dead) == 1
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            context = await browser.new_context(viewport={"width": 1400, "height": 900})
            page = await context.new_page()
            await page.goto(base + "/console/login")
            await page.fill("input[name=api_key]", TEST_API_KEY)
            await page.click("button[type=submit]")
            await page.wait_for_url("**/console/orders")
            await page.goto(f"{base}/console/orders/default/{order}")
            rejected = page.locator("#timeline tr.REJECTED")
            assert await rejected.count() == 1 and "INVALID_TRANSITION" in await rejected.inner_text()
            assert await page.locator("#notifications tr.dead").count() == 1
            await shot(page, out, "order-dead")
            sink.sink.faults = Faults()  # the receiver is healed; the redrive sends it again
            other = await context.new_page()
            await other.goto(base + "/console/dead")
            row = other.locator("#dead-deliveries tr", has_text=order).first
            await row.locator("button", has_text="Redrive").click()
            await other.wait_for_selector("#note")
            assert "redriven" in await other.locator("#note").inner_text()
            await other.close()
            await page.bring_to_front()
            # No reload: the page's live refresh (htmx polling its fragment) brings the delivery in.
            await page.wait_for_selector("#notifications tr.delivered", timeout=20_000)
            attempts = await page.locator("#notifications li.attempt").all_inner_texts()
            assert [a.split()[3] for a in attempts] == ["400", "200"]  # every attempt: the dead one, the redriven one
            await shot(page, out, "order-delivered")
            await browser.close()
    finally:
        await sink.aclose()
    assert sorted(p.name for p in out.iterdir()) == ["order-dead.png", "order-delivered.png"]
