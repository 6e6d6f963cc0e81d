"""A LangGraph ReAct agent with the gateway's tools loaded by langchain-mcp-adapters (which requires mcp<2), its
model `nexus fake-llm` through langchain-openai; run by the MCP tests from the old line's venv
(`make mcp-old-clients`). It imports nothing of the project.

    python langchain_agent.py --url http://127.0.0.1:PORT/mcp --key KEY --other-key KEY2 --llm URL --prompt TEXT \
        --order-id ID

Prints one JSON object: the loaded `tools`, the texts of the agent's tool results (`tool_results`), its
`final` answer, and what `get_order` of the same order answers to `--other-key` loaded the same way (`other`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition


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


def connection(url: str, key: str) -> dict[str, Any]:
    return {"url": url, "transport": "streamable_http", "headers": {"Authorization": f"Bearer {key}"}}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tools = await MultiServerMCPClient({"nexus": connection(args.url, args.key)}).get_tools()
    model = ChatOpenAI(model="nexus-fake-1", base_url=args.llm, api_key="sk-fake", max_retries=0)
    state = await react_agent(model, tools).ainvoke({"messages": [("user", args.prompt)]}, {"recursion_limit": 40})
    results = [str(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]
    other_tools = await MultiServerMCPClient({"nexus": connection(args.url, args.other_key)}).get_tools()
    get_order = next(t for t in other_tools if t.name == "get_order")
    other = await get_order.ainvoke({"order_id": args.order_id})
    return {
        "tools": sorted(t.name for t in tools),
        "tool_results": results,
        "final": str(state["messages"][-1].content),
        "other": str(other),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("--url", "--key", "--other-key", "--llm", "--prompt", "--order-id"):
        parser.add_argument(name, required=True)
    print(json.dumps(asyncio.run(run(parser.parse_args()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
