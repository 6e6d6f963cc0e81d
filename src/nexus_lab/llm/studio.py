"""The planner's wiring when LangGraph Studio (`langgraph dev`) runs the graph without a context: read
once from the environment (`NEXUS_GATEWAY_URL`, `NEXUS_API_KEY`, `NEXUS_LLM_*`), like `nexus agent`."""

from __future__ import annotations

import os

from nexus_client import AsyncNexusClient, ClientConfig
from nexus_lab.llm import settings as llm_settings
from nexus_lab.llm.client import LlmClient
from nexus_lab.llm.planner import PlannerContext, build_graph, use_default_context

_CONTEXT: PlannerContext | None = None


async def default_context() -> PlannerContext:
    """The one context of this process, made on first use."""
    global _CONTEXT
    if _CONTEXT is None:
        settings = llm_settings.from_env(os.environ)
        gateway = AsyncNexusClient(ClientConfig.from_env())
        process = (await gateway.process(settings.process)).model_dump()
        _CONTEXT = PlannerContext(llm=LlmClient(settings), gateway=gateway, process=process, settings=settings)
    return _CONTEXT


# What `langgraph.json` names: the planner graph, wired from the environment on its first run.
use_default_context(default_context)
graph = build_graph(context_schema=None)
