"""Agent frameworks' own MCP clients against a real `nexus serve`, their model `nexus fake-llm --behaviours
mcp_agent` (a model that hallucinates a step once and retries a call once): LangChain's MCP adapters
loading the tools into a LangGraph agent, and the OpenAI Agents SDK's streamable-HTTP MCP client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from langchain_core.messages import ToolMessage
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from nexus.settings import Settings
from tests.e2e.test_llm_planner_e2e import Fake
from tests.e2e.test_mcp import CREATED, agent_key

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


def react_agent(model: ChatOpenAI, tools: list[Any]) -> Any:
    """A LangGraph ReAct loop: the model proposes tool calls, a ToolNode runs them, until a plain answer."""
    bound = model.bind_tools(tools)

    async def think(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", think)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile()


def mcp_connection(base: str, key: str) -> dict[str, Any]:
    return {"url": f"{base}/mcp", "transport": "streamable_http", "headers": {"Authorization": f"Bearer {key}"}}


async def test_langgraph_agent_through_langchain_mcp_adapters(  # type: ignore[no-untyped-def]
    start_gateway, nexus_procs, tmp_path: Path, settings: Settings
) -> None:
    """A LangGraph ReAct agent with the gateway's tools loaded by langchain-mcp-adapters completes an order:
    its hallucinated step is REJECTED then corrected, its retried call is a DUPLICATE (decision log); another
    tenant's key loaded the same way sees nothing of it."""
    _, base = start_gateway("--no-dispatcher")
    fake = Fake(nexus_procs, tmp_path, "--behaviours", "mcp_agent")
    client = MultiServerMCPClient({"nexus": mcp_connection(base, await agent_key(settings, "acme"))})  # type: ignore[dict-item]
    tools = await client.get_tools()
    assert {"propose_step", "start_plan", "wait_for_order"} <= {t.name for t in tools}
    model = ChatOpenAI(model="nexus-fake-1", base_url=fake.url, api_key="sk-fake", max_retries=0)  # type: ignore[arg-type]
    agent = react_agent(model, tools)
    state = await agent.ainvoke({"messages": [("user", order_prompt("lg-1"))]}, {"recursion_limit": 40})
    results = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert any("REJECTED" in str(m.content) and "Correct the step" in str(m.content) for m in results)
    assert "completed" in str(state["messages"][-1].content)
    assert await decisions_of(settings, "acme", "lg-1") == EXPECTED_LOG
    other = MultiServerMCPClient({"nexus": mcp_connection(base, await agent_key(settings, "globex"))})  # type: ignore[dict-item]
    get_order = next(t for t in await other.get_tools() if t.name == "get_order")
    seen = await get_order.ainvoke({"order_id": "lg-1"})
    assert "NOT_FOUND" in str(seen) and "completed" not in str(seen)


# The Agents SDK (0.24) still calls mcp's older name of the streamable-HTTP client: theirs to update.
@pytest.mark.filterwarnings("ignore:Use `streamable_http_client` instead:DeprecationWarning")
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
    assert seen.isError and (seen.structuredContent or {})["code"] == "NOT_FOUND"
