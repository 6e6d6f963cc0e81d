"""The MCP server on a real `nexus serve`, driven by the official `mcp` client over streamable HTTP at
/mcp and over stdio (`nexus mcp --stdio`), with agent keys of non-default tenants."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from pydantic import AnyUrl

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import ROOT

TOOLS = {
    "list_processes",
    "describe_process",
    "start_plan",
    "propose_step",
    "get_order",
    "abort_plan",
    "replan",
    "wait_for_order",
}
CREATED = {"items": [{"product_id": "p", "quantity": 2, "unit_price": 5}], "total_amount": 10, "currency": "USD"}


async def agent_key(settings: Settings, tenant: str, roles: frozenset[Role] = frozenset({Role.AGENT})) -> str:
    db = await Database(settings).open(migrate=False)
    try:
        _, key = await create_key(db, tenant, roles)
    finally:
        await db.close()
    return key


@contextlib.asynccontextmanager
async def http_session(base: str, key: str) -> AsyncIterator[ClientSession]:
    """An initialized MCP session over streamable HTTP at `{base}/mcp`, with `key` as its Bearer key."""
    async with (
        httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http,
        streamable_http_client(f"{base}/mcp", http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> tuple[dict[str, Any], str, bool]:
    """A tool call's structuredContent, text and isError."""
    answer = await session.call_tool(tool, arguments)
    text = answer.content[0].text if answer.content else ""  # type: ignore[union-attr]
    return answer.structuredContent or {}, text, bool(answer.isError)


async def run_order(session: ClientSession, order_id: str) -> None:
    """A full order plan with a hallucinated step REJECTED then corrected and a retried call DUPLICATE."""
    started, text, error = await call(session, "start_plan", process="order", order_id=order_id)
    assert not error and started["order_id"] == order_id, text
    applied, text, error = await call(session, "propose_step", order_id=order_id, step="OrderCreated", data=CREATED)
    assert (applied["decision"], applied["seq_id"], error) == ("APPLY", 1, False), text
    assert "InventoryValidated" in text
    wrong, text, error = await call(
        session,
        "propose_step",
        order_id=order_id,
        step="PaymentProcessed",
        data={"amount": 10},
        idempotency_key="pay-too-soon",
    )
    assert error and wrong["decision"] == "REJECTED" and wrong["code"] == "INVALID_TRANSITION"
    assert "Correct the step" in text and "InventoryValidated" in text
    for step, data, key in (
        ("InventoryValidated", {"warehouse_id": "w"}, "inv"),
        ("InventoryValidated", {"warehouse_id": "w"}, "inv"),  # the agent retries the same call
        ("PaymentProcessed", {"payment_id": "x", "amount": 10, "currency": "USD"}, "pay"),
        ("OrderShipped", {"carrier": "ups"}, "ship"),
        ("OrderCompleted", {}, "done"),
    ):
        answer, text, error = await call(
            session, "propose_step", order_id=order_id, step=step, data=data, idempotency_key=key
        )
        assert not error, text
    assert answer["decision"] == "APPLY" and answer["status"] == "completed" and answer["last_seq"] == 5
    repeat, text, error = await call(
        session,
        "propose_step",
        order_id=order_id,
        step="InventoryValidated",
        data={"warehouse_id": "w"},
        idempotency_key="inv",
    )
    assert (repeat["decision"], repeat["first"]["decision"], error) == ("DUPLICATE", "APPLY", False), text
    order, text, error = await call(session, "get_order", order_id=order_id)
    assert (order["status"], order["last_seq"], error) == ("completed", 5, False)


async def test_official_client_over_http_runs_a_plan_and_reads_resources(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """Over streamable HTTP: the eight tools are listed; a plan runs to completion (REJECTED then corrected,
    a retried call DUPLICATE); wait_for_order answers once last_seq passed after_seq; describe_process gives
    each step's data schema; the resources answer."""
    _, base = start_gateway("--no-dispatcher")
    async with http_session(base, await agent_key(settings, "acme")) as session:
        assert {t.name for t in (await session.list_tools()).tools} == TOOLS
        processes, _, _ = await call(session, "list_processes")
        assert "order" in {p["name"] for p in processes["processes"]}
        described, text, _ = await call(session, "describe_process", name="order")
        assert "total_amount" in described["steps"]["OrderCreated"]["data_schema"]["properties"]
        assert described["mermaid"].startswith("stateDiagram") and "OrderCreated" in text
        await run_order(session, "mcp-http-1")
        waited, _, error = await call(session, "wait_for_order", order_id="mcp-http-1", after_seq=4, timeout_s=5)
        assert (waited["status"], waited["last_seq"], error) == ("completed", 5, False)
        order = await session.read_resource(AnyUrl("nexus://orders/mcp-http-1"))
        assert '"status": "completed"' in order.contents[0].text  # type: ignore[union-attr]
        assert '"decision": "REJECTED"' in order.contents[0].text  # type: ignore[union-attr]
        process = await session.read_resource(AnyUrl("nexus://processes/order"))
        assert "OrderCreated" in process.contents[0].text  # type: ignore[union-attr]


async def test_another_tenant_sees_nothing_over_mcp(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """globex's key cannot read, step or abort acme's order (NOT_FOUND, isError), nor read its resource; a key
    spanning every tenant may read but not propose (403)."""
    _, base = start_gateway("--no-dispatcher")
    async with http_session(base, await agent_key(settings, "acme")) as acme:
        await call(acme, "start_plan", order_id="secret")
        await call(acme, "propose_step", order_id="secret", step="OrderCreated", data=CREATED)
    async with http_session(base, await agent_key(settings, "globex")) as globex:
        for tool, arguments in (
            ("get_order", {"order_id": "secret"}),
            ("propose_step", {"order_id": "secret", "step": "InventoryValidated", "data": {}}),
            ("abort_plan", {"order_id": "secret", "reason": "mine now"}),
        ):
            answer, text, error = await call(globex, tool, **arguments)
            assert error and answer["code"] == "NOT_FOUND", (tool, text)
        with pytest.raises(McpError):
            await globex.read_resource(AnyUrl("nexus://orders/secret"))
    ops = await agent_key(settings, "*", frozenset({Role.OPERATOR, Role.AGENT}))
    async with http_session(base, ops) as spanning:
        refused, _, error = await call(spanning, "propose_step", order_id="secret", step="InventoryValidated", data={})
        assert error and refused["code"] == "FORBIDDEN"


async def test_mcp_refusals_use_the_api_error_shape(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """Without a key /mcp answers 401 in the REST error shape with WWW-Authenticate: Bearer; an unknown
    JSON-RPC method is a JSON-RPC error; /mcp is not in the OpenAPI document."""
    _, base = start_gateway("--no-dispatcher")
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}
    anonymous = httpx.post(f"{base}/mcp", json=rpc, headers=headers)
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"] == "Bearer"
    assert set(anonymous.json()) >= {"code", "message", "request_id"}
    key = await agent_key(settings, "acme")
    headers["Authorization"] = f"Bearer {key}"
    unknown = httpx.post(f"{base}/mcp", json={**rpc, "method": "no/such"}, headers=headers)
    assert unknown.json()["error"]["code"] == -32601 or "error" in unknown.json(), unknown.text
    openapi = httpx.get(f"{base}/openapi.json", headers=headers).json()
    assert "/mcp" not in openapi["paths"] and "/v1/orders/{order_id}/steps" in openapi["paths"]


async def test_official_client_over_stdio(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """`nexus mcp --stdio` with NEXUS_API_KEY and NEXUS_GATEWAY_URL runs the same plan through the REST API."""
    _, base = start_gateway("--no-dispatcher")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env |= {
        "NEXUS_API_KEY": await agent_key(settings, "acme"),
        "NEXUS_GATEWAY_URL": base,
        "PYTHONPATH": str(ROOT / "src"),
    }
    server = StdioServerParameters(command=sys.executable, args=["-m", "nexus_cli", "mcp", "--stdio"], env=env)
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        assert {t.name for t in (await session.list_tools()).tools} == TOOLS
        await run_order(session, "mcp-stdio-1")
        missing, _, error = await call(session, "get_order", order_id="nobody")
        assert error and missing["code"] == "NOT_FOUND"


async def test_any_worker_answers_any_mcp_call(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """With `nexus serve --workers 2`, a plan whose every call is a new connection (and so any worker process)
    runs to completion: the server keeps no session."""
    _, base = start_gateway("--no-dispatcher", "--workers", "2")
    key = await agent_key(settings, "acme")
    calls: list[tuple[str, dict[str, Any]]] = [("start_plan", {"order_id": "mcp-w-1"})]
    calls += [
        ("propose_step", {"order_id": "mcp-w-1", "step": step, "data": data, "idempotency_key": step})
        for step, data in (
            ("OrderCreated", CREATED),
            ("InventoryValidated", {}),
            ("PaymentProcessed", {"payment_id": "x", "amount": 10, "currency": "USD"}),
            ("OrderShipped", {}),
            ("OrderCompleted", {}),
        )
    ]
    for tool, arguments in calls:
        async with http_session(base, key) as session:
            answer, text, error = await call(session, tool, **arguments)
        assert not error, text
    assert (answer["decision"], answer["status"], answer["last_seq"]) == ("APPLY", "completed", 5)
