"""The LangGraph planner and the runner, driven with a recording in-memory transport (the agent under test)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from nexus.core.decide.deadlines import deadline_abort
from nexus.core.envelope import EventEnvelope, parse_envelope
from nexus.core.order_state import OrderState
from nexus.core.sequencing import resolve
from nexus.processes import builtin_catalog
from nexus_lab import agent_cli
from nexus_lab.agent.graph import AgentContext, Outcome, Simulation, graph, initial_state
from nexus_lab.agent.hostile import Mode
from nexus_lab.agent.hostile_messages import Message
from nexus_lab.agent.runner import AgentConfig, run_agent, write_report
from nexus_lab.agent.transport import Ack, PublishError
from nexus_wire.codes import Decision
from tests.factories import fold_messages


class RecordingTransport:
    """Acknowledges every message at once and records it; can fail at the n-th message."""

    name = "memory"

    def __init__(self, fail_at: int | None = None) -> None:
        self.sent: list[Message] = []
        self.fail_at = fail_at
        self.in_flight: dict[str, int] = {}
        self.max_in_flight = 0

    async def send(self, message: Message) -> Ack:
        if self.fail_at is not None and len(self.sent) + 1 >= self.fail_at:
            raise PublishError("broker unreachable (simulated)")
        self.in_flight[message.key] = self.in_flight.get(message.key, 0) + 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight[message.key])
        await asyncio.sleep(0)
        self.sent.append(message)
        self.in_flight[message.key] -= 1
        return Ack()

    async def close(self) -> None:
        return None


# An approval plan needs a gateway's approver to answer its held step (tests/e2e/test_approval_agent_e2e.py)
IN_MEMORY = [m for m in Mode if m is not Mode.APPROVAL]


async def run(transport: RecordingTransport, **kwargs: Any) -> dict[str, Any]:
    return await run_agent(AgentConfig(**kwargs), transport, target="memory")


def fold(plan: dict[str, Any], messages: list[Message]) -> tuple[list[Decision], OrderState]:
    """What the pure core decides for one plan's messages, in sending order."""
    return fold_messages(plan["order_id"], messages)


def types(plan: dict[str, Any]) -> list[tuple[str | None, int | None]]:
    return [(e["event_type"], e["seq_id"]) for e in plan["events"]]


async def test_happy_path_sends_the_five_steps_in_order() -> None:
    """With no failure rates a plan sends seq 1..5 and expects completed, last_seq 5, 5 notifications."""
    transport = RecordingTransport()
    report = await run(transport, orders=3, seed="happy")
    assert report["complete"] and report["error"] is None
    for plan in report["plans"]:
        assert types(plan) == [
            ("OrderCreated", 1),
            ("InventoryValidated", 2),
            ("PaymentProcessed", 3),
            ("OrderShipped", 4),
            ("OrderCompleted", 5),
        ]
        assert plan["expected"] == {"status": "completed", "last_seq": 5, "notifications": 5}
        assert plan["last_seq"] == 5 and plan["finished"]
    assert len({p["order_id"] for p in report["plans"]}) == 3


async def test_inventory_failure_aborts_after_order_created() -> None:
    """An inventory failure sends OrderCreated then ABORT_PLAN(aborted_at_seq 1, inventory_failed)."""
    transport = RecordingTransport()
    report = await run(transport, orders=2, seed="inv", inventory_failure_rate=1.0)
    for plan in report["plans"]:
        assert types(plan) == [("OrderCreated", 1), ("ABORT_PLAN", None)]
        assert plan["expected"] == {"status": "aborted", "last_seq": 1, "notifications": 2}
    abort = transport.sent[-1].envelope
    assert abort is not None
    assert abort.data["abort_code"] == "inventory_failed" and abort.data["aborted_at_seq"] == 1


async def test_payment_rejection_sends_no_payment_processed() -> None:
    """A rejected payment sends OrderCreated, InventoryValidated, ABORT_PLAN(2, payment_rejected), no payment."""
    transport = RecordingTransport()
    report = await run(transport, orders=2, seed="pay", payment_rejection_rate=1.0)
    for plan in report["plans"]:
        assert types(plan) == [("OrderCreated", 1), ("InventoryValidated", 2), ("ABORT_PLAN", None)]
        assert plan["expected"] == {"status": "aborted", "last_seq": 2, "notifications": 3}
    abort = transport.sent[-1].envelope
    assert abort is not None
    assert abort.data == {**abort.data, "abort_code": "payment_rejected", "aborted_at_seq": 2}
    assert all(m.event_type != "PaymentProcessed" for m in transport.sent)


async def test_outcomes_depend_only_on_the_seed() -> None:
    """Plan i uses seed <seed>:<i>: two runs with one seed take the same paths, with fresh order ids."""
    kwargs: dict[str, Any] = {
        "orders": 30,
        "seed": "same",
        "inventory_failure_rate": 0.3,
        "payment_rejection_rate": 0.3,
        "hostile": dict.fromkeys(IN_MEMORY, 0.3),
    }
    first, second = await run(RecordingTransport(), **kwargs), await run(RecordingTransport(), **kwargs)
    paths = [(p["plan_seed"], p["outcome"], p["hostile"], types(p)) for p in first["plans"]]
    assert paths == [(p["plan_seed"], p["outcome"], p["hostile"], types(p)) for p in second["plans"]]
    assert [p["plan_seed"] for p in first["plans"]] == [f"same:{i}" for i in range(30)]
    assert {p["order_id"] for p in first["plans"]}.isdisjoint({p["order_id"] for p in second["plans"]})
    assert {p["outcome"] for p in first["plans"]} == {o.value for o in Outcome if o is not Outcome.INVALID_PLAN}
    assert Simulation(0.3, 0.3, "same:7").outcome().value == first["plans"][7]["outcome"]


async def test_each_event_is_acknowledged_before_the_next_node_runs() -> None:
    """The graph publishes each event from its node and waits: one plan never has two messages in flight."""
    published: list[str] = []
    acked: list[str] = []

    async def publish(event: EventEnvelope) -> None:
        assert len(published) == len(acked), "the previous event was not acknowledged yet"
        published.append(event.event_type)
        await asyncio.sleep(0.01)
        acked.append(event.event_type)

    state = initial_state(order_id="o-ack", plan_id="p-ack", seed="ack")
    final = await graph.ainvoke(state, context=AgentContext(publish))
    assert acked == [e["event_type"] for e in final["events"]]
    transport = RecordingTransport()
    await run(transport, orders=10, seed="flight", concurrency=5, hostile=dict.fromkeys(IN_MEMORY, 1.0))
    assert transport.max_in_flight == 1


async def test_publish_failure_stops_the_agent_with_a_partial_report(tmp_path: Path) -> None:
    """A message the transport does not acknowledge stops every plan; the report says so and keeps what was sent."""
    report = await run(RecordingTransport(fail_at=3), orders=5, seed="fail", concurrency=1)
    assert not report["complete"]
    assert "unreachable" in report["error"]
    [plan] = report["plans"]
    assert not plan["finished"] and len(plan["events"]) == 2
    path = tmp_path / "partial.json"
    write_report(report, path)
    assert json.loads(path.read_text())["complete"] is False


async def test_an_approval_plan_without_an_approver_stops_the_agent() -> None:
    """A plan whose payment is held cannot finish without someone to answer it: the report says so."""
    report = await run(RecordingTransport(), orders=1, seed="lonely", hostile={Mode.APPROVAL: 1.0})
    assert not report["complete"] and "no approver" in report["error"]
    [plan] = report["plans"]
    assert plan["hostile"] == ["approval"] and [e["expected_decision"] for e in plan["events"]] == [
        "APPLY", "APPLY", "HELD", "BUFFER", "BUFFER"
    ]  # fmt: skip


def test_cli_exits_1_and_writes_the_partial_report_when_the_gateway_is_down(tmp_path: Path) -> None:
    """`nexus agent` against a gateway that refuses connections exits 1 and still writes its report."""
    parser = argparse.ArgumentParser()
    agent_cli.configure(parser)
    path = tmp_path / "report.json"
    argv = ["--orders", "2", "--seed", "down", "--report", str(path), "--publish-retries", "1"]
    args = parser.parse_args([*argv, "--gateway-url", "http://127.0.0.1:9"])
    assert agent_cli.run(args) == 1
    report = json.loads(path.read_text())
    assert report["complete"] is False and "did not acknowledge" in report["error"]


@pytest.mark.parametrize("mode", IN_MEMORY)
async def test_each_hostile_mode_is_recorded_and_absorbed(mode: Mode) -> None:
    """With one mode at rate 1, plans use it, record it, and the core's decisions match the report."""
    transport = RecordingTransport()
    report = await run(
        transport,
        orders=12,
        seed=f"mode-{mode.value}",
        inventory_failure_rate=0.3,
        payment_rejection_rate=0.3,
        hostile={mode: 1.0},
    )
    plans = report["plans"]
    assert any(mode.value in p["hostile"] for p in plans)
    assert report["summary"]["hostile"][mode.value] == sum(mode.value in p["hostile"] for p in plans) > 0
    for plan in plans:
        messages = [m for m in transport.sent if m.key == plan["order_id"]]
        assert [m.event_id for m in messages] == [e["event_id"] for e in plan["events"]]
        decisions, final = fold(plan, messages)
        assert [d.value for d in decisions] == [e["expected_decision"] for e in plan["events"]]
        if plan["gateway_abort"] == "timeout":  # A stalled plan: the gateway's sweep, once overdue
            deadline = parse_envelope(next(m for m in messages if m.honest).body).deadline
            assert deadline is not None
            late = deadline + dt.timedelta(seconds=1)
            final = dataclasses.replace(final, deadline_at=deadline)  # the fold runs without a clock
            sweep = resolve(final, [deadline_abort(final, "default", late)], {}, catalog=builtin_catalog(), now=late)
            assert [d for _, d, _ in sweep.decisions] == [Decision.APPLY]
            final = sweep.after
        assert final.status is not None and final.plan_id == plan["final_plan_id"]
        assert (final.status, final.last_seq, final.outbox_count) == tuple(plan["expected"].values())
        used = {e["mode"] for e in plan["events"]} - {None}
        assert used == set(plan["hostile"]) - {Mode.STALL.value}  # a stall is a message not sent
        assert set(plan["hostile"]) <= {mode.value}


async def test_studio_inputs_run_without_a_transport() -> None:
    """The LangGraph Studio examples run as given: happy path, empty items abort, forced payment rejection."""
    base: dict[str, Any] = {
        "order_id": "550e8400-e29b-41d4-a716-446655440000",
        "plan_id": "plan_demo_001",
        "user_id": "usr_debora",
        "items": [{"product_id": "prod_abc", "quantity": 2, "unit_price": 49.90}],
        "total_amount": 99.80,
        "currency": "BRL",
        "current_seq": 0,
        "events": [],
        "status": "idle",
        "abort_reason": "",
    }
    happy = await graph.ainvoke(base)
    assert happy["status"] == "completed" and len(happy["events"]) == 5
    empty = await graph.ainvoke({**base, "items": [], "total_amount": 0})
    assert [e["event_type"] for e in empty["events"]] == ["ABORT_PLAN"]
    assert empty["events"][0]["data"]["aborted_at_seq"] == 0
    simulation = {"inventory_failure_rate": 0, "payment_rejection_rate": 1, "seed": "studio"}
    rejected = await graph.ainvoke({**base, "simulation": simulation})
    assert [e["event_type"] for e in rejected["events"]] == ["OrderCreated", "InventoryValidated", "ABORT_PLAN"]
    assert rejected["events"][-1]["data"]["abort_code"] == "payment_rejected"


def test_sim_variables_are_defaults_and_flags_win() -> None:
    """SIM_* variables set the simulation defaults; a flag overrides its variable; unset means 0."""
    parser = argparse.ArgumentParser()
    agent_cli.configure(parser)
    env = {
        "SIM_INVENTORY_FAILURE_RATE": "0.2",
        "SIM_PAYMENT_REJECTION_RATE": "0.3",
        "SIM_STEP_DELAY_MS": "15",
        "SIM_HOSTILE_RATE": "0.1",
        "SIM_ZOMBIE_RATE": "0.9",
    }
    config = agent_cli.config_from(parser.parse_args(["--payment-rejection-rate", "0.5", "--malformed-rate", "0"]), env)
    assert (config.inventory_failure_rate, config.payment_rejection_rate, config.step_delay_ms) == (0.2, 0.5, 15.0)
    assert config.hostile[Mode.ZOMBIE] == 0.9 and config.hostile[Mode.MALFORMED] == 0.0
    assert config.hostile[Mode.RESTART] == 0.1
    bare = agent_cli.config_from(parser.parse_args(["--seed", "s"]), {})
    assert bare.inventory_failure_rate == 0.0 and set(bare.hostile.values()) == {0.0} and bare.seed == "s"
