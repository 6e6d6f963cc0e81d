"""The agent's planner: a LangGraph graph whose nodes generate one order's events, one node per step.

    START -> generate_plan -> create_order -> validate_inventory -> process_payment -> ship_order
          -> complete_order -> END
    generate_plan / validate_inventory / process_payment --(invalid plan, stock out, payment refused)-->
          abort_plan -> END

Each node that produces an event hands it to `AgentContext.publish` and waits for the transport's
acknowledgement before returning, so an event is on the wire as soon as its node has made it and the next
node runs only once it was acknowledged. Without a context (LangGraph Studio) the events only go to the
state's `events` list.

The simulated failures depend only on the plan's seed: `random.Random(seed)` draws the inventory roll, then
the payment roll, always both and in that order, so the same seed and rates always take the same path; the
order's content comes from `Random(f"{seed}/order")` and hostile modes from `Random(f"{seed}/hostile")`, so
changing one never moves the others. A rejected payment produces no PaymentProcessed event.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import enum
import operator
import random
import uuid
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from nexus.core import definitions, step_data
from nexus.core.envelope import EventEnvelope
from nexus.core.process_model import ABORTED
from nexus.processes import shipped
from nexus_lab.agent.paths import Expected
from nexus_wire.codes import ABORT_STEP, AbortCode
from nexus_wire.envelope import AbortPlanData

# The order process as its definition says (processes/order.yaml): the graph has one node per step of its
# plan, and the statuses it expects are the states those steps lead to.
ORDER = shipped("order")
STEPS: tuple[str, ...] = definitions.main_plan(ORDER)
ABORT = ABORT_STEP
LAST_SEQ = len(STEPS)
COMPLETED = definitions.status_after(ORDER, STEPS) or ""
(CREATE, VALIDATE, PAY, SHIP, COMPLETE) = STEPS  # the graph's nodes, in the definition's order


def seq_of(event_type: str) -> int | None:
    """A step's position in the order's plan, from 1; None for ABORT_PLAN."""
    return None if event_type == ABORT else STEPS.index(event_type) + 1


class Outcome(enum.StrEnum):
    """How a plan ends, decided by the simulation before any event is sent."""

    COMPLETED = "completed"
    INVENTORY_FAILED = "inventory_failed"
    PAYMENT_REJECTED = "payment_rejected"
    INVALID_PLAN = "invalid_plan"


EXPECTED: dict[Outcome, Expected] = {
    Outcome.COMPLETED: Expected(COMPLETED, LAST_SEQ, LAST_SEQ),
    Outcome.INVENTORY_FAILED: Expected(ABORTED, 1, 2),
    Outcome.PAYMENT_REJECTED: Expected(ABORTED, 2, 3),
    # ABORT_PLAN before any step: a tombstone, which writes no notification.
    Outcome.INVALID_PLAN: Expected(ABORTED, 0, 0),
}


@dataclasses.dataclass(frozen=True, slots=True)
class Simulation:
    """Failure rates and the seed that decides them."""

    inventory_failure_rate: float = 0.0
    payment_rejection_rate: float = 0.0
    seed: str = "0"

    @classmethod
    def from_state(cls, raw: dict[str, Any] | None) -> Simulation:
        raw = raw or {}
        return cls(
            inventory_failure_rate=float(raw.get("inventory_failure_rate", 0.0)),
            payment_rejection_rate=float(raw.get("payment_rejection_rate", 0.0)),
            seed=str(raw.get("seed", "0")),
        )

    def outcome(self) -> Outcome:
        """The path of a valid plan: both rolls are always drawn, inventory first."""
        rng = random.Random(self.seed)
        inventory_roll, payment_roll = rng.random(), rng.random()
        if inventory_roll < self.inventory_failure_rate:
            return Outcome.INVENTORY_FAILED
        if payment_roll < self.payment_rejection_rate:
            return Outcome.PAYMENT_REJECTED
        return Outcome.COMPLETED


Publish = Callable[[EventEnvelope], Awaitable[None]]


@dataclasses.dataclass(frozen=True, slots=True)
class AgentContext:
    """Run-scoped wiring: where events go (awaited until acknowledged) and the pause between steps."""

    publish: Publish | None = None
    step_delay_s: float = 0.0


class PlanState(TypedDict, total=False):
    """The graph's state; the field names are those of the LangGraph Studio inputs."""

    order_id: str
    plan_id: str
    user_id: str
    items: list[dict[str, Any]]
    total_amount: float | str
    currency: str
    current_seq: int
    events: Annotated[list[dict[str, Any]], operator.add]
    status: str
    abort_reason: str
    abort_code: str
    outcome: str
    simulation: dict[str, Any]
    correlation_id: str


def sample_order(seed: str) -> dict[str, Any]:
    """The order a plan places (user, items, total), drawn from the plan seed only."""
    rng = random.Random(f"{seed}/order")
    items: list[dict[str, Any]] = []
    total = Decimal(0)
    for _ in range(rng.randint(1, 3)):
        price = Decimal(rng.randint(100, 20_000)) / 100
        quantity = rng.randint(1, 4)
        total += price * quantity
        items.append({"product_id": f"prod_{rng.randrange(16**6):06x}", "quantity": quantity, "unit_price": str(price)})
    return {
        "user_id": f"usr_{rng.randrange(16**6):06x}",
        "items": items,
        "total_amount": str(total),
        "currency": rng.choice(["BRL", "USD", "EUR"]),
    }


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _envelope(state: PlanState, event_type: str, data: dict[str, Any]) -> EventEnvelope:
    return EventEnvelope(
        event_id=uuid.uuid4(),
        event_type=event_type,
        plan_id=state["plan_id"],
        order_id=state["order_id"],
        seq_id=seq_of(event_type),
        timestamp=_now(),
        data=data,
        correlation_id=state.get("correlation_id") or state["plan_id"],
    )


async def _emit(
    state: PlanState, runtime: Runtime[AgentContext], event_type: str, data: dict[str, Any]
) -> dict[str, Any]:
    """Build one event, publish it and wait for its acknowledgement; the state update that records it."""
    envelope = _envelope(state, event_type, data)
    ctx = runtime.context
    if ctx is not None and ctx.publish is not None:
        if ctx.step_delay_s > 0 and state.get("events"):
            await asyncio.sleep(ctx.step_delay_s)
        await ctx.publish(envelope)
    update: dict[str, Any] = {"events": [envelope.model_dump(mode="json")]}
    if envelope.seq_id is not None:
        update["current_seq"] = envelope.seq_id
    return update


def _order_data(state: PlanState) -> dict[str, Any]:
    return {
        "user_id": state.get("user_id"),
        "items": state.get("items", []),
        "total_amount": state.get("total_amount", 0),
        "currency": state.get("currency", "USD"),
    }


def _plan_problem(state: PlanState) -> str | None:
    """Why the order cannot be placed, or None: the agent checks items and total before any step."""
    data = _order_data(state)
    problem = step_data.problem(ORDER.steps[CREATE].data_schema, data)
    if problem is not None:
        return f"invalid order: {problem}"
    if not data["items"]:
        return "the order has no items"
    total = sum((Decimal(str(i["unit_price"])) * i["quantity"] for i in data["items"]), Decimal(0))
    if total != Decimal(str(data["total_amount"])):
        return f"total_amount {data['total_amount']} is not the sum of the items ({total})"
    return None


async def generate_plan(state: PlanState) -> dict[str, Any]:
    """Validate the order and decide, from the seed, how the plan ends."""
    problem = _plan_problem(state)
    if problem is not None:
        return _aborting(AbortCode.MANUAL, problem, outcome=Outcome.INVALID_PLAN.value, current_seq=0)
    outcome = Simulation.from_state(state.get("simulation")).outcome()
    return {"status": "running", "outcome": outcome.value, "current_seq": state.get("current_seq", 0)}


def _aborting(code: AbortCode, reason: str, **more: Any) -> dict[str, Any]:
    """The state update that ends the plan at `abort_plan` with this abort code and reason."""
    return {"status": "aborting", "abort_code": code.value, "abort_reason": reason, **more}


async def create_order(state: PlanState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
    """OrderCreated (seq 1)."""
    return await _emit(state, runtime, CREATE, _order_data(state))


async def validate_inventory(state: PlanState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
    """InventoryValidated (seq 2), unless the simulation says the stock is out."""
    if state["outcome"] == Outcome.INVENTORY_FAILED:
        return _aborting(AbortCode.INVENTORY_FAILED, "inventory unavailable for at least one item")
    items = [{"product_id": i["product_id"], "quantity": i["quantity"], "unit_price": str(i["unit_price"])}
             for i in state["items"]]  # fmt: skip
    return await _emit(state, runtime, VALIDATE, {"warehouse_id": "wh_main", "reserved_items": items})


async def process_payment(state: PlanState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
    """PaymentProcessed (seq 3), unless the simulation says the payment is refused: then no event."""
    if state["outcome"] == Outcome.PAYMENT_REJECTED:
        return _aborting(AbortCode.PAYMENT_REJECTED, "payment rejected by the issuer")
    data = {
        "payment_id": f"pay_{uuid.uuid4().hex[:12]}",
        "amount": str(Decimal(str(state["total_amount"]))),
        "currency": state.get("currency", "USD"),
        "method": "credit_card",
    }
    return await _emit(state, runtime, PAY, data)


async def ship_order(state: PlanState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
    """OrderShipped (seq 4)."""
    data = {"carrier": "correios", "tracking_number": f"BR{uuid.uuid4().hex[:10].upper()}"}
    return await _emit(state, runtime, SHIP, data)


async def complete_order(state: PlanState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
    """OrderCompleted (seq 5): the plan is done."""
    update = await _emit(state, runtime, COMPLETE, {"completed_at": _now().isoformat()})
    return {**update, "status": COMPLETED}


async def abort_plan(state: PlanState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
    """ABORT_PLAN at the step where the plan failed (aborted_at_seq = the last step sent)."""
    data = AbortPlanData(
        reason=state.get("abort_reason") or "aborted",
        abort_code=AbortCode(state.get("abort_code") or AbortCode.MANUAL.value),
        aborted_at_seq=state.get("current_seq", 0),
    )
    update = await _emit(state, runtime, ABORT, data.model_dump(mode="json"))
    return {**update, "status": ABORTED}


def _go_on_or_abort(next_node: str) -> Callable[[PlanState], str]:
    def route(state: PlanState) -> str:
        return "abort_plan" if state.get("status") == "aborting" else next_node

    return route


def build_graph() -> Any:
    """The compiled planner graph (also what LangGraph Studio loads as `graph`)."""
    builder = StateGraph(PlanState, context_schema=AgentContext)
    builder.add_node("generate_plan", generate_plan)
    builder.add_node("create_order", create_order)
    builder.add_node("validate_inventory", validate_inventory)
    builder.add_node("process_payment", process_payment)
    builder.add_node("ship_order", ship_order)
    builder.add_node("complete_order", complete_order)
    builder.add_node("abort_plan", abort_plan)
    builder.add_edge(START, "generate_plan")
    builder.add_conditional_edges("generate_plan", _go_on_or_abort("create_order"), ["create_order", "abort_plan"])
    builder.add_edge("create_order", "validate_inventory")
    builder.add_conditional_edges(
        "validate_inventory", _go_on_or_abort("process_payment"), ["process_payment", "abort_plan"]
    )
    builder.add_conditional_edges("process_payment", _go_on_or_abort("ship_order"), ["ship_order", "abort_plan"])
    builder.add_edge("ship_order", "complete_order")
    builder.add_edge("complete_order", END)
    builder.add_edge("abort_plan", END)
    return builder.compile(name="nexus-planner")


graph = build_graph()


def initial_state(
    *,
    order_id: str,
    plan_id: str,
    seed: str,
    inventory_failure_rate: float = 0.0,
    payment_rejection_rate: float = 0.0,
) -> PlanState:
    """The input of one plan: the order drawn from the seed, nothing sent yet."""
    state: PlanState = {
        "order_id": order_id,
        "plan_id": plan_id,
        "current_seq": 0,
        "events": [],
        "status": "idle",
        "abort_reason": "",
        "simulation": {
            "inventory_failure_rate": inventory_failure_rate,
            "payment_rejection_rate": payment_rejection_rate,
            "seed": seed,
        },
    }
    state.update(sample_order(seed))  # type: ignore[typeddict-item]  # a plain dict of the state's order keys
    return state


def shape_of(outcome: Outcome) -> tuple[str, ...]:
    """The event types a plan with this outcome sends, in order (what the graph's nodes produce)."""
    if outcome is Outcome.COMPLETED:
        return STEPS
    if outcome is Outcome.INVENTORY_FAILED:
        return (CREATE, ABORT)
    if outcome is Outcome.PAYMENT_REJECTED:
        return (CREATE, VALIDATE, ABORT)
    return (ABORT,)
