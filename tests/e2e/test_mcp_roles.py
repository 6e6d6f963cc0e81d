"""MCP tools by role, with the official client over streamable HTTP: each key lists only the tools its roles may
call (a key of several roles the union), a hidden tool answers as an unknown one, and an approver answers a held
step through its tools while an operator redrives a dead letter through its own."""

from __future__ import annotations

from typing import Any

import httpx
from mcp import Client

from nexus.auth.roles import Role
from nexus.settings import Settings
from nexus_lab.mcp_client import answer_of, mcp_client
from tests.e2e.test_mcp import TOOLS, agent_key
from tests.factories import step_json

APPROVER_TOOLS = {"list_approvals", "approve", "deny"}
OPERATOR_TOOLS = {"list_processes", "get_order", "list_dead_letters", "redrive_dead_letter"}
BIG = {"items": [{"product_id": "p", "quantity": 1, "unit_price": 1500}], "total_amount": 1500, "currency": "USD"}


async def _tools(session: Client) -> set[str]:
    return {tool.name for tool in (await session.list_tools()).tools}


async def _call(session: Client, tool: str, **arguments: Any) -> tuple[dict[str, Any], str, bool]:
    return answer_of(await session.call_tool(tool, arguments))


async def test_each_role_lists_its_tools_and_a_hidden_one_is_unknown(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """agent: the eight plan tools; approver: the three approval tools; operator: its four; agent+approver: the
    union; an approver calling propose_step gets the same answer as for a tool that does not exist."""
    _, base = start_gateway("--no-dispatcher")
    keys = {
        "agent": await agent_key(settings, "acme"),
        "approver": await agent_key(settings, "acme", frozenset({Role.APPROVER})),
        "operator": await agent_key(settings, "acme", frozenset({Role.OPERATOR})),
        "both": await agent_key(settings, "acme", frozenset({Role.AGENT, Role.APPROVER})),
    }
    expected = {"agent": TOOLS, "approver": APPROVER_TOOLS, "operator": OPERATOR_TOOLS, "both": TOOLS | APPROVER_TOOLS}
    for name, key in keys.items():
        async with mcp_client(base, key) as session:
            assert await _tools(session) == expected[name], name
    async with mcp_client(base, keys["approver"]) as session:
        hidden = await session.call_tool("propose_step", {"order_id": "o", "step": "OrderCreated", "data": {}})
        unknown = await session.call_tool("no_such_tool", {})
    assert hidden.is_error and unknown.is_error
    assert hidden.content[0].text.replace("propose_step", "X") == unknown.content[0].text.replace("no_such_tool", "X")


async def test_an_approver_answers_a_held_step_and_an_operator_redrives(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """An agent's payment of 1,500.00 is HELD; the approver's list_approvals shows it and approve applies it; an
    operator lists the tenant's dead letters and redrives one."""
    _, base = start_gateway("--no-dispatcher")
    agent = await agent_key(settings, "acme")
    approver = await agent_key(settings, "acme", frozenset({Role.APPROVER}))
    operator = await agent_key(settings, "acme", frozenset({Role.OPERATOR}))
    async with mcp_client(base, agent) as session:
        await _call(session, "start_plan", process="order_reviewed", order_id="big")
        await _call(session, "propose_step", order_id="big", step="OrderCreated", data=BIG)
        await _call(session, "propose_step", order_id="big", step="InventoryValidated", data={"warehouse_id": "w"})
        payment = {"payment_id": "p1", "amount": 1500, "currency": "USD"}
        held, _, _ = await _call(session, "propose_step", order_id="big", step="PaymentProcessed", data=payment)
    assert held["decision"] == "HELD", held
    async with mcp_client(base, approver) as session:
        listed, _, error = await _call(session, "list_approvals")
        assert not error and [a["approval_id"] for a in listed["approvals"]] == [held["approval_id"]]
        approved, text, error = await _call(session, "approve", approval_id=held["approval_id"])
        assert not error and approved["decision"] == "APPLY", text
        again, _, error = await _call(session, "approve", approval_id=held["approval_id"])
        assert error and again["code"] == "APPROVAL_NOT_PENDING"
    async with mcp_client(base, operator) as session:
        order, _, _ = await _call(session, "get_order", order_id="big")
        assert order["last_seq"] == 3 and order["status"] == "payment_processed"
    wrong = step_json("big", "another-plan", 4, tenant_id="acme")  # PLAN_MISMATCH: a dead letter of acme
    posted = httpx.post(f"{base}/v1/events", json=wrong, headers={"Authorization": f"Bearer {agent}"})
    assert posted.json()["results"][0]["decision"] == "PLAN_MISMATCH", posted.text
    async with mcp_client(base, operator) as session:
        letters, _, error = await _call(session, "list_dead_letters")
        [letter] = letters["dead_letters"]
        assert not error and letter["code"] == "PLAN_MISMATCH" and letter["order_id"] == "big"
        redriven, _, error = await _call(session, "redrive_dead_letter", dead_letter_id=letter["id"])
        assert redriven["decision"] == "PLAN_MISMATCH" and error  # its cause is still there
        twice, _, error = await _call(session, "redrive_dead_letter", dead_letter_id=letter["id"])
        assert error and twice["code"] == "ALREADY_REDRIVEN"
