"""A malformed MCP tool argument answers as every refusal does: structuredContent with code INVALID_REQUEST
and a message naming the argument (never its value), `isError: true`; not the SDK's raw pydantic text."""

from __future__ import annotations

import sys
from typing import Any

from mcp import Client, StdioServerParameters

from nexus.mcp.server import STANDARD_FIELDS
from nexus.settings import Settings
from nexus_lab.mcp_client import answer_of, mcp_client
from tests.e2e.test_mcp import agent_key, stdio_env

# (tool, arguments, the argument the message must name, what of the input must not appear)
MALFORMED: list[tuple[str, dict[str, Any], str, str]] = [
    ("start_plan", {"order_id": "args-1", "deadline_s": 1e308}, "deadline_s", "e+308"),
    ("start_plan", {"order_id": "args-1", "deadline_s": "whenever-you-like"}, "deadline_s", "whenever"),
    ("propose_step", {"order_id": "args-0", "step": "ship it to 12 Main St now", "data": {}}, "step", "Main St"),
    ("propose_step", {"order_id": "args-0", "step": "OrderCreated", "data": "card 4242-4242"}, "data", "4242"),
    ("propose_step", {"order_id": "args-0"}, "step", "args-0"),
    ("wait_for_order", {"order_id": "args-0", "timeout_s": 1e308}, "timeout_s", "e+308"),
]


async def check_malformed(session: Client) -> None:
    """Each MALFORMED call: isError, the standard fields with INVALID_REQUEST, the argument named, no input."""
    for tool, arguments, named, secret in MALFORMED:
        answer, text, error = answer_of(await session.call_tool(tool, arguments))
        assert error and answer["code"] == "INVALID_REQUEST", (tool, arguments, text)
        assert set(STANDARD_FIELDS) <= set(answer) and answer["decision"] is None
        assert named in answer["message"] and named in text, (tool, text)
        for shown in (text, answer["message"]):
            assert secret not in shown and "validation error" not in shown and "pydantic" not in shown, shown


async def test_malformed_arguments_over_http_answer_invalid_request(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """Over /mcp (the current client), free text as a step name, `deadline_s: 1e308`, a non-object `data`, a
    missing argument and an out-of-range `timeout_s` each answer INVALID_REQUEST naming the argument, and the
    gateway logs no traceback for them."""
    proc, base = start_gateway("--no-dispatcher")
    async with mcp_client(base, await agent_key(settings, "acme")) as session:
        await check_malformed(session)
    assert "Traceback" not in proc.log_path.read_text()


async def test_malformed_arguments_over_stdio_answer_invalid_request(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """`nexus mcp --stdio` answers the same malformed calls the same way (the REST API's 422 or the schema's
    own check, as a refusal naming the argument)."""
    _, base = start_gateway("--no-dispatcher")
    env = stdio_env(await agent_key(settings, "acme"), base)
    server = StdioServerParameters(command=sys.executable, args=["-m", "nexus_cli", "mcp", "--stdio"], env=env)
    async with Client(server) as session:
        await check_malformed(session)
