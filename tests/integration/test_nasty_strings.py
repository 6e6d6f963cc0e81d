"""Refused at entry, readable forever (issue 34, item 6), on a real `nexus serve`: a lone surrogate is
PARSE_ERROR and an integer beyond int64 is refused on every JSON body; the nastiest strings the decoder
accepts are stored and read back through every reader (REST, the console, MCP, the CLI) without a 5xx."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.mcp_client import mcp_client
from tests.conftest import TEST_ROOT_KEY, root_headers, settings_env
from tests.helpers import nexus_command

pytestmark = pytest.mark.slow

CREATED = {"items": [{"product_id": "p", "quantity": 2, "unit_price": 5}], "total_amount": 10, "currency": "USD"}
NASTY = [
    "\x01\x07\x08\x1b[31mred\x7f\x9f",
    "\u202eevil\u202c\u200f\u200e\u061c",
    "</script><script>alert(1)</script><!--",
    "\U0001f4a5\U0001f469\u200d\U0001f469\u200d\U0001f467 Z\u0334\u0321\u031ba\u0337l",
    "\ufeff\ufffe\uffff\U0010ffff\u2028\u2029",
    "'\"\\`${{7*7}}%s%n{0}",
    "\r\n\tX-Injected: 1\r\n\r\n",
    "<" * 20_000,
]
JSON = {"Content-Type": "application/json"}
SURROGATE_BODIES = [b'{"x": "\\ud800"}', b'{"x": "a\\uDFFF"}', b'{"\\udc00": 1}', b'{"x": "\xed\xa0\x80"}']


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def mcp_call(tool: str, arguments: dict[str, Any]) -> bytes:
    """A raw JSON-RPC tools/call body (bytes: the client's own encoder never sees the hostile text)."""
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    return json.dumps(call).encode()


MCP_HEADERS = {**JSON, "Accept": "application/json, text/event-stream"}


async def test_lone_surrogates_and_integers_beyond_int64_are_refused_on_every_json_body(  # type: ignore[no-untyped-def]
    start_gateway, db: Database
) -> None:
    """Escaped or raw lone surrogates are 400 PARSE_ERROR on the steps API, plans, MCP arguments and admin
    bodies (and a dead letter on /v1/events); an integer past int64 is 422 on the same paths; nothing applies."""
    _, base = start_gateway("--no-dispatcher")
    _, agent = await create_key(db, "acme", frozenset({Role.AGENT}), "agent")
    async with httpx.AsyncClient(base_url=base, timeout=30, headers=bearer(agent)) as api:
        assert (await api.post("/v1/plans", json={"process": "order", "order_id": "o-1"})).status_code == 201
        for escape in (b"\\ud800", b"\\uDFFF", b"\xed\xa0\x80"):
            step = b'{"step": "OrderCreated", "data": {"note": "' + escape + b'"}}'
            plan = b'{"process": "order", "order_id": "o-' + escape + b'"}'
            tool = mcp_call("propose_step", {"order_id": "o-1", "step": "OrderCreated", "data": {}})
            tool = tool.replace(b'"data": {}', b'"data": {"note": "' + escape + b'"}')
            for path, body, headers in (
                ("/v1/orders/o-1/steps", step, JSON),
                ("/v1/plans", plan, JSON),
                ("/mcp", tool, MCP_HEADERS),
                ("/v1/subscriptions", b'{"name": "h", "url": "http://127.0.0.1:9/' + escape + b'"}', JSON),
            ):
                who = root_headers() if path == "/v1/subscriptions" else {}
                answer = await api.post(path, content=body, headers={**headers, **who})
                assert (answer.status_code, answer.json()["code"]) == (400, "PARSE_ERROR"), (path, answer.text)
        for body in SURROGATE_BODIES:
            event = await api.post("/v1/events", content=body, headers=JSON)
            assert event.status_code in (400, 422) and event.json()["code"] == "PARSE_ERROR", event.text
        data = {**CREATED, "note": 2**70}
        for path, content, headers, code in (
            ("/v1/orders/o-1/steps", json.dumps({"step": "OrderCreated", "data": data}), JSON, "INVALID_EVENT"),
            (
                "/mcp",
                mcp_call("propose_step", {"order_id": "o-1", "step": "OrderCreated", "data": data}),
                MCP_HEADERS,
                "INVALID_EVENT",
            ),
            (
                "/v1/subscriptions",
                json.dumps({"name": "h", "url": "http://127.0.0.1:9/", "n": 2**64}),
                JSON,
                "INVALID_REQUEST",
            ),
        ):
            who = root_headers() if path == "/v1/subscriptions" else {}
            answer = await api.post(path, content=content, headers={**headers, **who})
            assert (answer.status_code, answer.json()["code"]) == (422, code), (path, answer.text)
        order = await api.get("/v1/orders/o-1")
        assert order.status_code == 404 or order.json()["last_seq"] == 0, order.text


async def test_the_nastiest_accepted_strings_are_readable_by_every_reader(  # type: ignore[no-untyped-def]
    start_gateway, settings: Settings, db: Database
) -> None:
    """Control characters, bidi marks, `</script>`, emoji, noncharacters and long strings stored in applied
    and rejected steps and in dead letters (one of them an escaped lone surrogate) are answered without a
    5xx by the REST API, every console page, MCP's tool and resource, and the CLI; the API gives them back."""
    _, base = start_gateway("--no-dispatcher")
    _, agent = await create_key(db, "acme", frozenset({Role.AGENT}), "agent")
    _, operator = await create_key(db, "acme", frozenset({Role.OPERATOR}), "operator")
    notes = {f"n{i}": text for i, text in enumerate(NASTY)}
    async with httpx.AsyncClient(base_url=base, timeout=30, headers=bearer(agent)) as api:
        assert (await api.post("/v1/plans", json={"process": "order", "order_id": "nasty"})).status_code == 201
        applied = await api.post("/v1/orders/nasty/steps", json={"step": "OrderCreated", "data": {**CREATED, **notes}})
        assert applied.json()["decision"] == "APPLY", applied.text
        rejected = await api.post("/v1/orders/nasty/steps", json={"step": "OrderShipped", "data": notes})
        assert rejected.json()["decision"] == "REJECTED", rejected.text
        for text in NASTY:
            dead = await api.post("/v1/events", json={"event_type": text, "nasty": text})
            assert dead.status_code < 500, dead.text
        for body in SURROGATE_BODIES:
            assert (await api.post("/v1/events", content=body, headers=JSON)).status_code < 500
        await read_everything_over_rest(api, operator)
    await read_every_console_page(base, operator)
    await read_over_mcp(base, agent)
    env = settings_env(settings)
    env["NEXUS_API_KEY"] = TEST_ROOT_KEY
    assert "PARSE_ERROR" in nexus_command("dlq", "list", "--source", "table", env=env)
    nexus_command("dlq", "list", "--source", "table", "--json", env=env)
    nexus_command("orders", "show", "nasty", "--tenant", "acme", env=env)
    nexus_command("report", "blocked", env=env)


async def read_everything_over_rest(api: httpx.AsyncClient, operator: str) -> None:
    """Every REST reader of the stored strings answers below 500; the order's data comes back unchanged."""
    for path, who in (
        ("/v1/orders/nasty", {}),
        ("/v1/orders/nasty/history", {}),
        ("/v1/dead-letters", bearer(operator)),
        ("/v1/dead-letters", root_headers()),
        ("/v1/blocked-actions", bearer(operator)),
        ("/v1/blocked-actions/summary", root_headers()),
    ):
        answer = await api.get(path, headers=who)
        assert answer.status_code == 200, (path, answer.text[:500])
    letters = (await api.get("/v1/dead-letters", params={"limit": 100}, headers=bearer(operator))).json()
    payloads = [json.loads(letter["payload"]) for letter in letters["dead_letters"] if "nasty" in letter["payload"]]
    assert sorted(p["nasty"] for p in payloads) == sorted(NASTY), "a stored string came back changed"


async def read_every_console_page(base: str, operator: str) -> None:
    """Each console page, for the tenant's operator and the every-tenant operator, is answered below 500."""
    for key in (operator, TEST_ROOT_KEY):
        async with httpx.AsyncClient(base_url=base, timeout=30) as browser:
            form = await browser.get("/console/login")
            token = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert token is not None
            signed = await browser.post("/console/login", data={"csrf": token.group(1), "api_key": key})
            assert signed.status_code == 303, signed.text[:300]
            for page in ("/console/orders", "/console/orders/acme/nasty", "/console/dead", "/console/blocked"):
                answer = await browser.get(page)
                assert answer.status_code == 200, (page, answer.text[:500])
                assert "<script>alert(1)" not in answer.text
            for page in ("/console/subscriptions", "/console/processes", "/console/dead?code=PARSE_ERROR"):
                assert (await browser.get(page)).status_code == 200, page


async def read_over_mcp(base: str, agent: str) -> None:
    """MCP's get_order and the order resource, through the official client, answer the stored strings."""
    async with mcp_client(base, agent) as session:
        order = await session.call_tool("get_order", {"order_id": "nasty"})
        assert not order.is_error, order
        resource = await session.read_resource("nexus://orders/nasty")
        text = resource.contents[0].text  # type: ignore[union-attr]
        assert '"decision": "REJECTED"' in text
