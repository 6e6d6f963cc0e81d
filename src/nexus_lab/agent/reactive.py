"""The reactive agent: it proposes one step of a `fulfilment` order, waits for the gateway to
perform its effect, and decides the next step from the outcome. The agent never touches a service.

    START -> propose -> await_outcome --(the step's status reached)--------------> propose (next step)
                        await_outcome --(order completed)----------------------------> END
                        await_outcome --(aborted by the gateway: effect failed)-------> END
                        await_outcome --(still held; its effect is being compensated)-> abort_plan -> END
                        await_outcome --(still running)-------------------------------> await_outcome

Waiting goes through the client SDK's `wait(order_id, after_status=...)` (a long poll where the gateway
offers one). A reservation that failed ends the plan as `inventory_failed`, a declined charge as
`payment_rejected`: the gateway compensated and aborted it; the agent only reads the outcome.
"""

from __future__ import annotations

import datetime as dt
import operator
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from nexus.core import definitions
from nexus.core.envelope import EventEnvelope
from nexus.processes import shipped
from nexus_client import AsyncNexusClient
from nexus_client.errors import WaitTimeout
from nexus_wire.codes import AbortCode

PROCESS = "fulfilment"
_FULFILMENT = shipped(PROCESS)
STEPS = definitions.main_plan(_FULFILMENT)
STATUS_OF = {name: _FULFILMENT.steps[name].step.to for name in STEPS}
"""The status each step leaves the order in once its effect succeeded (the definition's `to`)."""
CREATE, RESERVE, CHARGE, SHIP, _ = STEPS
FAILURE_OF = {RESERVE: AbortCode.INVENTORY_FAILED, CHARGE: AbortCode.PAYMENT_REJECTED}


class ReactiveState(TypedDict, total=False):
    order_id: str
    plan_id: str
    seq: int
    """The seq of the last step proposed."""
    status: str | None
    effect: dict[str, Any] | None
    waits: int
    outcome: str | None
    log: Annotated[list[str], operator.add]


def _data(event_type: str) -> dict[str, Any]:
    if event_type == CREATE:
        return {"user_id": "u-reactive", "items": [{"product_id": "p-1", "quantity": 2, "unit_price": 12.5}],
                "total_amount": 25, "currency": "USD"}  # fmt: skip
    if event_type == RESERVE:
        return {"warehouse_id": "w-1"}
    if event_type == CHARGE:
        return {"payment_id": f"pay-{uuid.uuid4().hex[:8]}", "amount": 25, "currency": "USD", "method": "card"}
    if event_type == SHIP:
        return {"carrier": "ACME", "tracking_number": f"T{uuid.uuid4().hex[:10]}"}
    return {}


def step_envelope(order_id: str, plan_id: str, seq: int) -> EventEnvelope:
    event_type = STEPS[seq - 1]
    return EventEnvelope.model_validate(
        {
            "event_id": str(uuid.uuid4()),
            "event_type": event_type,
            "plan_id": plan_id,
            "order_id": order_id,
            "seq_id": seq,
            "timestamp": dt.datetime.now(dt.UTC).isoformat(),
            "process": PROCESS,
            "data": _data(event_type),
        }
    )


def abort_envelope(order_id: str, plan_id: str, seq: int, code: AbortCode) -> EventEnvelope:
    return EventEnvelope.model_validate(
        {
            "event_id": str(uuid.uuid4()),
            "event_type": "ABORT_PLAN",
            "plan_id": plan_id,
            "order_id": order_id,
            "timestamp": dt.datetime.now(dt.UTC).isoformat(),
            "data": {"reason": f"the effect of step {seq} failed", "abort_code": code.value, "aborted_at_seq": seq},
        }
    )


async def _finish(state: ReactiveState) -> ReactiveState:
    if state.get("status") == "completed":
        return {"outcome": "completed"}
    step = STEPS[state["seq"] - 1]
    return {"outcome": FAILURE_OF.get(step, AbortCode.MANUAL).value}


def build_reactive_graph(client: AsyncNexusClient, *, wait_s: float = 10.0, max_waits: int = 30) -> Any:
    """The compiled graph; nodes call the gateway through `client`."""

    async def propose(state: ReactiveState) -> ReactiveState:
        seq = state.get("seq", 0) + 1
        event = step_envelope(state["order_id"], state["plan_id"], seq)
        result = (await client.submit(event)).results[0]
        extra = result.model_extra or {}
        status = result.order.status if result.order is not None else None
        return {"seq": seq, "status": status, "effect": extra.get("effect"), "waits": 0,
                "log": [f"propose {event.event_type} -> {result.decision}"]}  # fmt: skip

    async def await_outcome(state: ReactiveState) -> ReactiveState:
        if state.get("effect") is None and state.get("status") == STATUS_OF[STEPS[state["seq"] - 1]]:
            return {"log": ["applied at once"]}
        try:
            order = await client.wait(state["order_id"], after_status=state.get("status"), timeout=wait_s)
        except WaitTimeout:
            order = await client.order(state["order_id"])
        extra = order.model_extra or {}
        return {"status": order.status, "effect": extra.get("effect"), "waits": state.get("waits", 0) + 1,
                "log": [f"wait -> {order.status}"]}  # fmt: skip

    def route(state: ReactiveState) -> str:
        step = STEPS[state["seq"] - 1]
        status = state.get("status")
        if status == "completed":
            return "finish"
        if status == "aborted":
            return "finish"
        if status == STATUS_OF[step] and not state.get("effect"):
            return "propose"
        effect = state.get("effect") or {}
        if effect.get("status") in ("compensating", "failed") or state.get("waits", 0) >= max_waits:
            return "abort_plan"
        return "await_outcome"

    async def abort_plan(state: ReactiveState) -> ReactiveState:
        step = STEPS[state["seq"] - 1]
        code = FAILURE_OF.get(step, AbortCode.MANUAL)
        result = (await client.submit(abort_envelope(state["order_id"], state["plan_id"], state["seq"], code))).results
        return {"outcome": code.value, "log": [f"abort ({code.value}) -> {result[0].decision}"]}

    graph = StateGraph(ReactiveState)
    graph.add_node("propose", propose)
    graph.add_node("await_outcome", await_outcome)
    graph.add_node("abort_plan", abort_plan)
    graph.add_node("finish", _finish)
    graph.add_edge(START, "propose")
    graph.add_edge("propose", "await_outcome")
    graph.add_conditional_edges(
        "await_outcome",
        route,
        {"propose": "propose", "await_outcome": "await_outcome", "abort_plan": "abort_plan", "finish": "finish"},
    )
    graph.add_edge("abort_plan", END)
    graph.add_edge("finish", END)
    return graph.compile()


async def run_reactive(
    client: AsyncNexusClient,
    orders: int,
    *,
    prefix: str | None = None,
    on_done: Callable[[], Awaitable[None]] | None = None,
) -> list[dict[str, Any]]:
    """Run `orders` plans one after the other; one report row per plan."""
    graph = build_reactive_graph(client)
    prefix = prefix or uuid.uuid4().hex[:8]
    rows = []
    for i in range(orders):
        order_id, plan_id = f"r-{prefix}-{i}", f"rp-{prefix}-{i}"
        final = await graph.ainvoke({"order_id": order_id, "plan_id": plan_id, "log": []}, {"recursion_limit": 200})
        rows.append({"order_id": order_id, "plan_id": plan_id, "outcome": final.get("outcome"),
                     "status": final.get("status"), "log": final.get("log", [])})  # fmt: skip
        if on_done is not None:
            await on_done()
    return rows
