"""The MCP server on a real `nexus serve`, driven by the official `mcp` clients over streamable HTTP at /mcp
and over stdio (`nexus mcp --stdio`), with agent keys of non-default tenants: the SDK's 2.x client (protocol
2026-07-28) in process, its 1.x clients (2025-11-25, and 1.22's 2025-06-18) as processes of their own venvs
(`make mcp-old-clients`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.mcp_client import answer_of, mcp_client
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
CURRENT = "2026-07-28"
# The venvs of the SDK's old line (the Makefile's mcp-old-clients target), by the protocol their client speaks.
OLD_CLIENTS = {"2025-11-25": ROOT / ".venv-mcp-old", "2025-06-18": ROOT / ".venv-mcp-2025-06-18"}
OLD_SCRIPTS = Path(__file__).resolve().parent / "mcp_old"
Answer = tuple[dict[str, Any], str, bool]


async def agent_key(settings: Settings, tenant: str, roles: frozenset[Role] = frozenset({Role.AGENT})) -> str:
    db = await Database(settings).open(migrate=False)
    try:
        _, key = await create_key(db, tenant, roles)
    finally:
        await db.close()
    return key


async def call(session: Client, tool: str, **arguments: Any) -> Answer:
    """A tool call's structuredContent, text and isError."""
    return answer_of(await session.call_tool(tool, arguments))


def plan_calls(order_id: str) -> list[tuple[str, dict[str, Any]]]:
    """A full order plan: a hallucinated step (to be REJECTED) then corrected, a retried call (DUPLICATE), a
    keyed repeat after the end, and get_order."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("start_plan", {"process": "order", "order_id": order_id}),
        ("propose_step", {"order_id": order_id, "step": "OrderCreated", "data": CREATED}),
        (
            "propose_step",
            {
                "order_id": order_id,
                "step": "PaymentProcessed",
                "data": {"amount": 10},
                "idempotency_key": "pay-too-soon",
            },
        ),
    ]
    for step, data, key in (
        ("InventoryValidated", {"warehouse_id": "w"}, "inv"),
        ("InventoryValidated", {"warehouse_id": "w"}, "inv"),  # the agent retries the same call
        ("PaymentProcessed", {"payment_id": "x", "amount": 10, "currency": "USD"}, "pay"),
        ("OrderShipped", {"carrier": "ups"}, "ship"),
        ("OrderCompleted", {}, "done"),
        ("InventoryValidated", {"warehouse_id": "w"}, "inv"),  # a keyed repeat once the order completed
    ):
        calls.append(("propose_step", {"order_id": order_id, "step": step, "data": data, "idempotency_key": key}))
    return [*calls, ("get_order", {"order_id": order_id})]


def check_plan(answers: list[Answer], order_id: str) -> None:
    """The answers to `plan_calls(order_id)`, as the gateway must give them."""
    (started, text, error), (applied, applied_text, applied_error), (wrong, wrong_text, wrong_error) = answers[:3]
    assert not error and started["order_id"] == order_id, text
    assert (applied["decision"], applied["seq_id"], applied_error) == ("APPLY", 1, False), applied_text
    assert "InventoryValidated" in applied_text
    assert wrong_error and wrong["decision"] == "REJECTED" and wrong["code"] == "INVALID_TRANSITION"
    assert "Correct the step" in wrong_text and "InventoryValidated" in wrong_text
    assert all(not error for _, _, error in answers[3:8]), answers[3:8]
    last = answers[7][0]
    assert last["decision"] == "APPLY" and last["status"] == "completed" and last["last_seq"] == 5
    repeat, text, error = answers[8]
    assert (repeat["decision"], repeat["first"]["decision"], error) == ("DUPLICATE", "APPLY", False), text
    order, _, error = answers[9]
    assert (order["status"], order["last_seq"], error) == ("completed", 5, False)


async def run_order(session: Client, order_id: str) -> None:
    """`plan_calls` through one client of the current SDK, checked."""
    check_plan([await call(session, tool, **arguments) for tool, arguments in plan_calls(order_id)], order_id)


def old_client(version: str, plan: dict[str, Any], *options: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The 1.x official client of protocol `version` run on `plan` (official_client.py): its JSON report."""
    python = OLD_CLIENTS[version] / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: `make mcp-old-clients` makes the old line's venvs")
    run = subprocess.run(
        [str(python), str(OLD_SCRIPTS / "official_client.py"), *options],
        input=json.dumps(plan),
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report: dict[str, Any] = json.loads(run.stdout)
    return report


def stdio_env(key: str, base: str) -> dict[str, str]:
    """The environment of `nexus mcp --stdio` (and of an old client that starts it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    return env | {"NEXUS_API_KEY": key, "NEXUS_GATEWAY_URL": base, "PYTHONPATH": str(ROOT / "src")}


async def test_official_client_over_http_runs_a_plan_and_reads_resources(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """Over streamable HTTP: the eight tools are listed; a plan runs to completion (REJECTED then corrected,
    a retried call DUPLICATE); wait_for_order answers once last_seq passed after_seq; describe_process gives
    each step's data schema; the resources answer."""
    _, base = start_gateway("--no-dispatcher")
    async with mcp_client(base, await agent_key(settings, "acme")) as session:
        assert session.protocol_version == CURRENT
        assert {t.name for t in (await session.list_tools()).tools} == TOOLS
        processes, _, _ = await call(session, "list_processes")
        assert "order" in {p["name"] for p in processes["processes"]}
        described, text, _ = await call(session, "describe_process", name="order")
        assert "total_amount" in described["steps"]["OrderCreated"]["data_schema"]["properties"]
        assert described["mermaid"].startswith("stateDiagram") and "OrderCreated" in text
        await run_order(session, "mcp-http-1")
        waited, _, error = await call(session, "wait_for_order", order_id="mcp-http-1", after_seq=4, timeout_s=5)
        assert (waited["status"], waited["last_seq"], error) == ("completed", 5, False)
        order = await session.read_resource("nexus://orders/mcp-http-1")
        assert '"status": "completed"' in order.contents[0].text  # type: ignore[union-attr]
        assert '"decision": "REJECTED"' in order.contents[0].text  # type: ignore[union-attr]
        process = await session.read_resource("nexus://processes/order")
        assert "OrderCreated" in process.contents[0].text  # type: ignore[union-attr]


async def test_another_tenant_sees_nothing_over_mcp(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """globex's key cannot read, step or abort acme's order (NOT_FOUND, isError), nor read its resource; a key
    spanning every tenant may read but not propose (403)."""
    _, base = start_gateway("--no-dispatcher")
    async with mcp_client(base, await agent_key(settings, "acme")) as acme:
        await call(acme, "start_plan", order_id="secret")
        await call(acme, "propose_step", order_id="secret", step="OrderCreated", data=CREATED)
    async with mcp_client(base, await agent_key(settings, "globex")) as globex:
        for tool, arguments in (
            ("get_order", {"order_id": "secret"}),
            ("propose_step", {"order_id": "secret", "step": "InventoryValidated", "data": {}}),
            ("abort_plan", {"order_id": "secret", "reason": "mine now"}),
        ):
            answer, text, error = await call(globex, tool, **arguments)
            assert error and answer["code"] == "NOT_FOUND", (tool, text)
        with pytest.raises(MCPError):
            await globex.read_resource("nexus://orders/secret")
    ops = await agent_key(settings, "*", frozenset({Role.OPERATOR, Role.AGENT}))
    async with mcp_client(base, ops) as spanning:
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
    """`nexus mcp --stdio` with NEXUS_API_KEY and NEXUS_GATEWAY_URL runs the same plan through the REST API,
    for the current client (2026-07-28)."""
    _, base = start_gateway("--no-dispatcher")
    env = stdio_env(await agent_key(settings, "acme"), base)
    server = StdioServerParameters(command=sys.executable, args=["-m", "nexus_cli", "mcp", "--stdio"], env=env)
    async with Client(server) as session:
        assert session.protocol_version == CURRENT
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
        async with mcp_client(base, key) as session:
            answer, text, error = await call(session, tool, **arguments)
        assert not error, text
    assert (answer["decision"], answer["status"], answer["last_seq"]) == ("APPLY", "completed", 5)


async def test_clients_of_every_protocol_revision_complete_a_plan(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """Over streamable HTTP, the current client speaks 2026-07-28 and the 1.x clients (their own venvs)
    2025-11-25 and 2025-06-18 with the same server: each lists the eight tools and completes a plan (REJECTED
    then corrected, DUPLICATE on a retry), and reads an order's resource; another tenant's resource is an error."""
    _, base = start_gateway("--no-dispatcher")
    key = await agent_key(settings, "acme")
    async with mcp_client(base, key) as session:
        assert session.protocol_version == CURRENT
        await run_order(session, "rev-current")
    for version in OLD_CLIENTS:
        order_id = f"rev-{version}"
        plan = {"calls": plan_calls(order_id), "resources": [f"nexus://orders/{order_id}", "nexus://orders/rev-none"]}
        report = old_client(version, plan, "--url", f"{base}/mcp", "--key", key)
        assert report["protocol_version"] == version and set(report["tools"]) == TOOLS
        check_plan([tuple(a) for a in report["answers"]], order_id)  # type: ignore[misc]
        assert '"status": "completed"' in report["resources"][f"nexus://orders/{order_id}"]
        assert "error" in report["resources"]["nexus://orders/rev-none"]


async def test_old_clients_over_stdio(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """`nexus mcp --stdio` (the 2.x server) initializes with the 1.x clients of 2025-11-25 and 2025-06-18 and
    each completes a plan through the REST API."""
    _, base = start_gateway("--no-dispatcher")
    env = stdio_env(await agent_key(settings, "acme"), base)
    for version in OLD_CLIENTS:
        order_id = f"stdio-{version}"
        report = old_client(version, {"calls": plan_calls(order_id)}, "--stdio", sys.executable, env=env)
        assert report["protocol_version"] == version and set(report["tools"]) == TOOLS
        check_plan([tuple(a) for a in report["answers"]], order_id)  # type: ignore[misc]
