"""Agent frameworks' own MCP clients against a real `nexus serve`, their model `nexus fake-llm --behaviours
mcp_agent` (a model that hallucinates a step once and retries a call once): LangChain's MCP adapters
loading the tools into a LangGraph agent (they require mcp<2: run from the old line's venv, protocol
2025-11-25), and the OpenAI Agents SDK's streamable-HTTP MCP client (on the current SDK)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import asyncpg
import pytest

from nexus.settings import Settings
from tests.e2e.test_llm_planner_e2e import Fake
from tests.e2e.test_mcp import CREATED, OLD_CLIENTS, OLD_SCRIPTS, agent_key

PROMPT = "Run this order through the gateway's order process, step by step: <order>{}</order>"


def order_prompt(order_id: str) -> str:
    return PROMPT.format(json.dumps({"order_id": order_id, "user_id": "u-1", **CREATED}))


async def decisions_of(settings: Settings, tenant: str, order_id: str) -> list[tuple[str, str | None]]:
    """The order's decision log: (decision, code) in order."""
    conn = await asyncpg.connect(settings.database_url)
    try:
        rows = await conn.fetch(
            "SELECT decision, code FROM decision_log WHERE tenant_id = $1 AND order_id = $2 ORDER BY position",
            tenant,
            order_id,
        )
    finally:
        await conn.close()
    return [(r["decision"], r["code"]) for r in rows]


EXPECTED_LOG = [
    ("APPLY", None),
    ("REJECTED", "INVALID_TRANSITION"),
    ("APPLY", None),
    ("DUPLICATE", None),
    ("APPLY", None),
    ("APPLY", None),
    ("APPLY", None),
]


async def test_langgraph_agent_through_langchain_mcp_adapters(  # type: ignore[no-untyped-def]
    start_gateway, nexus_procs, tmp_path: Path, settings: Settings
) -> None:
    """A LangGraph ReAct agent with the gateway's tools loaded by langchain-mcp-adapters (a process of the old
    line's venv) completes an order: its hallucinated step is REJECTED then corrected, its retried call is a
    DUPLICATE (decision log); another tenant's key loaded the same way sees nothing of it."""
    _, base = start_gateway("--no-dispatcher")
    fake = Fake(nexus_procs, tmp_path, "--behaviours", "mcp_agent")
    python = OLD_CLIENTS["2025-11-25"] / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: `make mcp-old-clients` makes the old line's venvs")
    keys = ["--key", await agent_key(settings, "acme"), "--other-key", await agent_key(settings, "globex")]
    options = ["--url", f"{base}/mcp", *keys, "--llm", fake.url, "--prompt", order_prompt("lg-1"), "--order-id", "lg-1"]
    run = subprocess.run(
        [str(python), str(OLD_SCRIPTS / "langchain_agent.py"), *options],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert {"propose_step", "start_plan", "wait_for_order"} <= set(report["tools"])
    assert any("REJECTED" in text and "Correct the step" in text for text in report["tool_results"])
    assert "completed" in report["final"]
    assert await decisions_of(settings, "acme", "lg-1") == EXPECTED_LOG
    assert "NOT_FOUND" in report["other"] and "completed" not in report["other"]


async def test_openai_agents_sdk_mcp_client(  # type: ignore[no-untyped-def]
    start_gateway, nexus_procs, tmp_path: Path, settings: Settings
) -> None:
    """The OpenAI Agents SDK's MCPServerStreamableHttp, its model the fake over Chat Completions, completes an
    order the same way (REJECTED then corrected, one DUPLICATE); another tenant's key gets NOT_FOUND."""
    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from agents.mcp import MCPServerStreamableHttp
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    _, base = start_gateway("--no-dispatcher")
    fake = Fake(nexus_procs, tmp_path, "--behaviours", "mcp_agent")
    openai_client = AsyncOpenAI(base_url=fake.url, api_key="sk-fake", max_retries=0)
    model = OpenAIChatCompletionsModel(model="nexus-fake-1", openai_client=openai_client)
    key = await agent_key(settings, "acme")
    async with MCPServerStreamableHttp(
        {"url": f"{base}/mcp", "headers": {"Authorization": f"Bearer {key}"}}, cache_tools_list=True
    ) as server:
        agent = Agent(name="orders", instructions="Use the tools.", mcp_servers=[server], model=model)
        result = await Runner.run(agent, order_prompt("oa-1"), max_turns=20)
    await openai_client.close()
    assert "completed" in str(result.final_output)
    assert await decisions_of(settings, "acme", "oa-1") == EXPECTED_LOG
    other_key = await agent_key(settings, "globex")
    async with MCPServerStreamableHttp(
        {"url": f"{base}/mcp", "headers": {"Authorization": f"Bearer {other_key}"}}
    ) as other:
        seen = await other.call_tool("get_order", {"order_id": "oa-1"})
    assert seen.is_error and (seen.structured_content or {})["code"] == "NOT_FOUND"
