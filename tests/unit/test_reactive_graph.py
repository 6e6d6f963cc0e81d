"""The reactive agent's LangGraph graph: a waiting node with conditional edges out of it."""

from __future__ import annotations

from nexus_client import AsyncNexusClient
from nexus_client.config import ClientConfig
from nexus_lab.agent.reactive import build_reactive_graph


def test_graph_has_the_waiting_node_and_its_conditional_edges() -> None:
    """await_outcome follows propose and leads, conditionally, to propose, itself, abort_plan or finish."""
    graph = build_reactive_graph(AsyncNexusClient(ClientConfig(gateway_url="http://127.0.0.1:9")))
    drawn = graph.get_graph()
    assert {"propose", "await_outcome", "abort_plan", "finish"} <= set(drawn.nodes)
    out = {(e.target, e.conditional) for e in drawn.edges if e.source == "await_outcome"}
    assert out == {("propose", True), ("await_outcome", True), ("abort_plan", True), ("finish", True)}
    assert any(e.source == "propose" and e.target == "await_outcome" and not e.conditional for e in drawn.edges)
