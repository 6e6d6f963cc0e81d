"""The console's process diagrams in headless Chromium: every state's name fits inside its node, every
step label lies inside the drawing, ABORT_PLAN edges are drawn, and no request meets a 401 (favicon)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from playwright.async_api import async_playwright

from tests.browser.test_console_browser import ARGS, CHROMIUM, shot
from tests.conftest import TEST_API_KEY

# A node's label box, measured by the browser, may touch its border but never cross it.
TOLERANCE_PX = 0.5


async def test_state_labels_fit_their_nodes_and_abort_edges_are_drawn(start_gateway: Any, tmp_path: Path) -> None:
    """/console/processes in Chromium: for each node the text's bounding box lies within its rectangle's;
    each step label within its SVG; each diagram has ABORT_PLAN edges; nothing was answered 401."""
    _, base = start_gateway("--no-dispatcher")
    refused: list[str] = []
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = await browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("response", lambda r: refused.append(r.url) if r.status == 401 else None)
        await page.goto(base + "/console/login")
        await page.fill("input[name=api_key]", TEST_API_KEY)
        await page.click("button[type=submit]")
        await page.wait_for_url("**/console/orders")
        await page.goto(base + "/console/processes")
        boxes = await page.evaluate(
            """() => [...document.querySelectorAll('svg.process')].map(svg => {
                const outer = svg.getBoundingClientRect();
                const states = [...svg.querySelectorAll('g.state')].map(g => {
                    const r = g.querySelector('rect').getBoundingClientRect();
                    const t = g.querySelector('text').getBoundingClientRect();
                    return {state: g.dataset.state, rect: [r.left, r.top, r.right, r.bottom],
                            text: [t.left, t.top, t.right, t.bottom]};
                });
                const steps = [...svg.querySelectorAll('text.step')].map(t => {
                    const b = t.getBoundingClientRect();
                    return {label: t.textContent, box: [b.left, b.top, b.right, b.bottom]};
                });
                return {svg: [outer.left, outer.top, outer.right, outer.bottom], states, steps,
                        aborts: svg.querySelectorAll('path.abort').length};
            })"""
        )
        await shot(page, tmp_path, "processes")
        await browser.close()
    assert len(boxes) >= 4
    for diagram in boxes:
        assert diagram["aborts"] >= 2, diagram
        for node in diagram["states"]:
            (rl, rt, rr, rb), (tl, tt, tr, tb) = node["rect"], node["text"]
            inside = tl >= rl - TOLERANCE_PX and tr <= rr + TOLERANCE_PX and tt >= rt - TOLERANCE_PX
            assert inside and tb <= rb + TOLERANCE_PX, f"{node['state']}: label {node['text']} outside {node['rect']}"
        sl, st, sr, sb = diagram["svg"]
        for step in diagram["steps"]:
            left, top, right, bottom = step["box"]
            assert left >= sl and right <= sr and top >= st and bottom <= sb, f"{step['label']} clipped: {step}"
    assert not refused, f"answered 401: {refused}"
