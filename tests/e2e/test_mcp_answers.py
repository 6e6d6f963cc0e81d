"""MCP's `propose_step` answers a step as the steps API it calls does (tests/integration/test_one_answer_per_door.py):
invalid data is DEAD_LETTER INVALID_EVENT with the field's path, on a real `nexus serve` with the official client."""

from __future__ import annotations

from nexus.settings import Settings
from nexus_lab.mcp_client import mcp_client
from tests.e2e.test_mcp import CREATED, agent_key, call


async def test_invalid_data_through_propose_step_is_a_dead_letter_naming_the_field(
    start_gateway, settings: Settings
) -> None:  # type: ignore[no-untyped-def]
    """A proposal whose data the order's process refuses (a bad currency, an amount too long for cents):
    structuredContent DEAD_LETTER INVALID_EVENT, its message naming the field, never the value, `isError`;
    the order is untouched and the corrected step then applies at seq 1."""
    _, base = start_gateway()
    async with mcp_client(base, await agent_key(settings, "acme")) as session:
        await call(session, "start_plan", process="order", order_id="mcp-bad-data")
        bad = {**CREATED, "currency": "SECRET-VALUE"}
        answer, text, error = await call(
            session, "propose_step", order_id="mcp-bad-data", step="OrderCreated", data=bad
        )
        assert (answer["decision"], answer["code"], error) == ("DEAD_LETTER", "INVALID_EVENT", True), text
        assert answer["message"] == "data.currency: String should match pattern '^[A-Z]{3}$'"
        assert "SECRET-VALUE" not in text and (answer["status"], answer["last_seq"]) == (None, 0)
        huge = {**CREATED, "total_amount": "1" * 30}
        answer, text, error = await call(
            session, "propose_step", order_id="mcp-bad-data", step="OrderCreated", data=huge
        )
        assert (answer["decision"], answer["code"], error) == ("DEAD_LETTER", "INVALID_EVENT", True), text
        assert answer["message"].startswith("data.total_amount: Input should be an amount of at most 28 digits")
        assert "1" * 30 not in text and (answer["status"], answer["last_seq"]) == (None, 0)
        fixed, text, error = await call(
            session, "propose_step", order_id="mcp-bad-data", step="OrderCreated", data=CREATED
        )
        assert (fixed["decision"], fixed["seq_id"], error) == ("APPLY", 1, False), text


async def test_an_invalid_tool_argument_is_invalid_request_naming_it(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """Free text as a step name, or `deadline_s: 1e308`: structuredContent INVALID_REQUEST naming the argument
    never its value, `isError` (not a raw validation error)."""
    _, base = start_gateway()
    async with mcp_client(base, await agent_key(settings, "acme")) as session:
        await call(session, "start_plan", process="order", order_id="mcp-bad-args")
        step = "Create the order SECRET-VALUE"
        answer, text, error = await call(session, "propose_step", order_id="mcp-bad-args", step=step, data={})
        assert (answer["code"], answer["decision"], error) == ("INVALID_REQUEST", None, True), text
        assert "step: String should match pattern" in answer["message"] and "SECRET" not in text
        answer, text, error = await call(session, "start_plan", process="order", deadline_s=1e308)
        assert (answer["code"], error) == ("INVALID_REQUEST", True), text
        assert "deadline_s: Input should be less than or equal to" in answer["message"]
