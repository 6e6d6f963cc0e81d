"""Runs N plans through the graph, C at a time, publishing each event as its node produces it.

Plan i uses the seed `<seed>:<i>` and the process `processes[i % len(processes)]` (`order` by default; the
other processes' plans are paths through their definitions, `agent.paths`); its outcome (completed,
inventory_failed, payment_rejected; for a refund completed, rejected, withdrawn) and its hostile moves depend
on that seed only. order_id and plan_id are fresh for every run, so the same seed can
run again against the same database. If the transport fails to acknowledge a message, every plan stops,
the report is written with `"complete": false` and the error, and `nexus agent` exits 1.

Report (JSON, version 1)::

    {
      "version": 1,
      "complete": true,                 # false: a publish failed, the report is partial
      "error": null,                    # the publish failure, if any
      "started_at": "...", "finished_at": "...",
      "config": {"orders", "seed", "inventory_failure_rate", "payment_rejection_rate", "step_delay_ms",
                 "concurrency", "transport", "target", "hostile": {"<mode>": rate, ...}},
      "summary": {"outcomes": {"completed": n, ...}, "hostile": {"<mode>": plans, ...},
                  "decisions": {"APPLY": n, ...}, "messages": n, "unexpected_decisions": n},
      "plans": [{
        "index": 0, "plan_seed": "<seed>:0", "order_id": "...", "plan_id": "...", "process": "order",
        "outcome": "completed" | "inventory_failed" | "payment_rejected",
        "failure": null | "inventory_failed" | "payment_rejected",  # another process's plan: the simulated
                                        # failure it took (a refund withdrawn, or rejected), named as the order's
        "expected": {"status": "completed", "last_seq": 5, "notifications": 5},
        "final_plan_id": "...",         # The plan the order ends on (`<plan_id>-r` after a replan)
        "gateway_abort": null | "timeout",  # A stalled plan, aborted by its deadline
        "approval": null | {"approval_id", "answer": "approve" | "deny", "status", "decision", "code"},
                                        # An approval plan's held payment and the approver's answer
        "last_seq": 5,                  # the highest seq_id the agent sent honestly
        "hostile": ["duplicate", ...],  # modes this plan used
        "finished": true,               # false: stopped by a publish failure
        "events": [{                    # every message sent, in sending order
          "n": 1, "honest": true,       # honest: part of the plan, applied once -> one notification
          "mode": null | "<mode>", "variant": null | "<malformed variant>",
          "event_id": "...", "event_type": "OrderCreated", "seq_id": 1, "plan_id": "...",
          "expected_decision": "APPLY", "expected_code": null,
          "decision": "APPLY" | null,   # the gateway's answer (HTTP); null over Kafka
          "code": null, "http_status": 200, "attempts": 1
        }, ...]
      }, ...]
    }

The expected final state of each plan is `expected`; the notifications it must produce are exactly its
honest events' event_ids, in order; every other message must change nothing.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime as dt
import json
import logging
import os
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nexus.core.envelope import EventEnvelope
from nexus_lab.agent import hostile, paths
from nexus_lab.agent.approver import ApprovalError, LabApprover
from nexus_lab.agent.graph import (
    EXPECTED,
    AgentContext,
    Simulation,
    graph,
    initial_state,
    shape_of,
)
from nexus_lab.agent.hostile import Mode
from nexus_lab.agent.hostile_messages import HostileStream, Message, denied_abort
from nexus_lab.agent.processes import LAB_PROCESSES, ORDER
from nexus_lab.agent.transport import Ack, PublishError, Transport

log = logging.getLogger(__name__)

REPORT_VERSION = 1


@dataclasses.dataclass(frozen=True, slots=True)
class AgentConfig:
    """One agent run."""

    orders: int = 1
    seed: str = "0"
    inventory_failure_rate: float = 0.0
    payment_rejection_rate: float = 0.0
    step_delay_ms: float = 0.0
    concurrency: int = 8
    hostile: Mapping[Mode, float] = dataclasses.field(default_factory=dict)
    stall_deadline_s: float = 5.0
    """A stalling plan's deadline, from its start (the gateway aborts it then)."""
    processes: tuple[str, ...] = ("order",)
    """Plan i follows processes[i % len(processes)] (each one the lab runs: `processes.LAB_PROCESSES`)."""

    def __post_init__(self) -> None:
        unknown = [p for p in self.processes if p not in LAB_PROCESSES]
        if not self.processes or unknown:
            raise ValueError(f"processes must name some of {sorted(LAB_PROCESSES)} (got {list(self.processes)})")

    def process_of(self, index: int) -> str:
        return self.processes[index % len(self.processes)]

    def as_json(self, transport: str, target: str) -> dict[str, Any]:
        return {
            "orders": self.orders,
            "seed": self.seed,
            "inventory_failure_rate": self.inventory_failure_rate,
            "payment_rejection_rate": self.payment_rejection_rate,
            "step_delay_ms": self.step_delay_ms,
            "concurrency": self.concurrency,
            "transport": transport,
            "target": target,
            "hostile": {m.value: float(self.hostile.get(m, 0.0)) for m in Mode},
            "stall_deadline_s": self.stall_deadline_s,
            "processes": list(self.processes),
        }


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


class PlanRun:
    """One plan: decides its path and moves, runs the graph, sends what the hostile stream says."""

    def __init__(
        self, index: int, config: AgentConfig, transport: Transport, approver: LabApprover | None = None
    ) -> None:
        self.index = index
        self.transport = transport
        self.approver = approver
        self.step_delay_s = config.step_delay_ms / 1000
        self.seed = f"{config.seed}:{index}"
        self.order_id = str(uuid.uuid4())
        self.plan_id = f"plan_{uuid.uuid4().hex[:16]}"
        self.simulation = Simulation(config.inventory_failure_rate, config.payment_rejection_rate, self.seed)
        self.lab = LAB_PROCESSES[config.process_of(index)]
        self.path: paths.PathPlan | None = None
        """A plan of another process than the order: the path through its definition it sends."""
        if self.lab is ORDER:
            outcome = self.simulation.outcome()
            self.outcome: str = outcome.value
            self.shape: tuple[str, ...] = shape_of(outcome)
            self.expected = EXPECTED[outcome]
        else:
            rates = (config.inventory_failure_rate, config.payment_rejection_rate)
            self.path = paths.PLANNERS[self.lab.name](self.seed, *rates)
            self.outcome, self.shape = self.path.outcome, self.path.shape
            self.expected = self.path.expected
        self.actions = hostile.choose(self.seed, config.hostile, self.shape, self.lab)
        self.stalled = any(a.mode is Mode.STALL for a in self.actions)
        deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=config.stall_deadline_s) if self.stalled else None
        self.held = next((a for a in self.actions if a.mode is Mode.APPROVAL), None)
        """An approval plan's move (its variant: what the approver answers)."""
        self.stream = HostileStream(
            hostile.schedule(self.shape, self.actions),
            order_id=self.order_id,
            plan_id=self.plan_id,
            deadline=deadline,
            process=hostile.APPROVAL_PROCESS if self.held else (None if self.lab is ORDER else self.lab.name),
            lab=self.lab,
        )
        self.approval_id: str | None = None
        self.approval: dict[str, Any] | None = None
        self.events: list[dict[str, Any]] = []
        self.last_seq = 0
        self.finished = False

    async def _send(self, message: Message) -> None:
        ack: Ack = await self.transport.send(message)
        self.events.append(
            {
                "n": len(self.events) + 1,
                "honest": message.honest,
                "mode": message.mode.value if message.mode else None,
                "variant": message.variant,
                "event_id": message.event_id,
                "event_type": message.event_type,
                "seq_id": message.seq_id,
                "plan_id": message.plan_id,
                "expected_decision": message.expected.value,
                "expected_code": message.expected_code,
                "decision": ack.decision,
                "code": ack.code,
                "http_status": ack.http_status,
                "attempts": ack.attempts,
            }
        )
        if message.honest and message.seq_id is not None:
            self.last_seq = max(self.last_seq, message.seq_id)
        if message.expected.value == "HELD":
            self.approval_id = ack.approval_id

    async def _publish(self, envelope: EventEnvelope) -> None:
        for message in self.stream.push(envelope):
            await self._send(message)

    async def run(self) -> None:
        for message in self.stream.ready():
            await self._send(message)
        if self.path is not None:
            await paths.run_path(
                self.path,
                order_id=self.order_id,
                plan_id=self.plan_id,
                publish=self._publish,
                step_delay_s=self.step_delay_s,
            )
            if not self.stream.done:
                raise AssertionError(f"plan {self.plan_id}: messages left unsent")
            self.finished = True
            return
        state = initial_state(
            order_id=self.order_id,
            plan_id=self.plan_id,
            seed=self.seed,
            inventory_failure_rate=self.simulation.inventory_failure_rate,
            payment_rejection_rate=self.simulation.payment_rejection_rate,
        )
        if self.held is not None:
            state.update(hostile.reviewed_order(state))  # type: ignore[typeddict-item]  # a plain dict of the state's order keys
        final = await graph.ainvoke(state, context=AgentContext(self._publish, self.step_delay_s))
        produced = tuple(e["event_type"] for e in final["events"])
        if produced != tuple(self.shape) or not self.stream.done:
            raise AssertionError(f"plan {self.plan_id}: the graph produced {produced}, expected {self.shape}")
        if self.held is not None:
            await self._answer_held()
        self.finished = True
        log.debug("plan done", extra={"action": "plan_done", "plan_id": self.plan_id, "order_id": self.order_id})

    async def _answer_held(self) -> None:
        """Every step sent (the successors wait); the approver answers the held payment as the seed
        said, and after a denial the agent aborts its plan."""
        assert self.held is not None
        if self.approver is None:
            raise PublishError(f"plan {self.plan_id} holds a step for approval but the agent has no approver")
        held_event = self.stream.honest[self.held.at]
        try:
            self.approval = await self.approver.answer(
                str(held_event.event_id), self.approval_id, approve=self.held.variant == hostile.APPROVE
            )
        except ApprovalError as exc:
            raise PublishError(str(exc)) from exc
        if self.held.variant == hostile.DENY:
            await self._send(denied_abort(self.stream.honest, order_id=self.order_id, plan_id=self.plan_id))

    def as_json(self) -> dict[str, Any]:
        expected = self.expected
        status, last_seq, notifications = expected.status, expected.last_seq, expected.notifications
        if self.stalled:  # The last step never sent; the gateway's timeout abort instead
            status, last_seq = "aborted", last_seq - 1
        if self.stream.replanned_at is not None:
            notifications += 1  # the REPLAN's own
        if self.held is not None and self.held.variant == hostile.DENY:  # the steps before it, and the abort
            status, last_seq, notifications = "aborted", self.held.at, self.held.at + 1
        return {
            "index": self.index,
            "plan_seed": self.seed,
            "order_id": self.order_id,
            "plan_id": self.plan_id,
            "process": self.lab.name,
            "outcome": self.outcome,
            "failure": self.path.failure if self.path is not None else None,
            "expected": {"status": status, "last_seq": last_seq, "notifications": notifications},
            "final_plan_id": self.stream.final_plan_id,
            "gateway_abort": "timeout" if self.stalled else None,
            "approval": self.approval,
            "last_seq": self.last_seq,
            "hostile": sorted({a.mode.value for a in self.actions}),
            "finished": self.finished,
            "events": self.events,
        }


def summarize(plans: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts over a report's plans: outcomes, hostile modes used, decisions answered."""
    outcomes = collections.Counter(p["outcome"] for p in plans)
    modes = collections.Counter(m for p in plans for m in p["hostile"])
    decisions = collections.Counter(e["decision"] for p in plans for e in p["events"] if e["decision"])
    unexpected = sum(
        1 for p in plans for e in p["events"] if e["decision"] is not None and e["decision"] != e["expected_decision"]
    )
    return {
        "outcomes": dict(sorted(outcomes.items())),
        "hostile": {m.value: modes.get(m.value, 0) for m in Mode},
        "decisions": dict(sorted(decisions.items())),
        "messages": sum(len(p["events"]) for p in plans),
        "unexpected_decisions": unexpected,
    }


async def run_agent(
    config: AgentConfig, transport: Transport, *, target: str, approver: LabApprover | None = None
) -> dict[str, Any]:
    """Run every plan; return the report (partial, with `error`, if a publish failed). `approver` answers
    the held steps of approval plans."""
    started = _now()
    runs: list[PlanRun] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(config.orders):
        queue.put_nowait(i)

    async def worker() -> None:
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            run = PlanRun(i, config, transport, approver)
            runs.append(run)
            await run.run()

    error: str | None = None
    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(max(1, min(config.concurrency, config.orders))):
                group.create_task(worker())
    except* PublishError as failures:
        error = "; ".join(str(e) for e in failures.exceptions)
        log.error(  # noqa: TRY400 - the error is the report's, not a traceback
            "publish failed, agent stopped", extra={"action": "publish_failed", "error": error}
        )
    except* Exception as failures:
        # Anything else is a bug of the agent; the report still says how far it got.
        error = "agent crashed: " + "; ".join(f"{type(e).__name__}: {e}" for e in failures.exceptions)
        log.exception("agent crashed", extra={"action": "agent_crashed"})
    plans = [r.as_json() for r in sorted(runs, key=lambda r: r.index)]
    return {
        "version": REPORT_VERSION,
        "complete": error is None and len(plans) == config.orders,
        "error": error,
        "started_at": started,
        "finished_at": _now(),
        "config": config.as_json(transport.name, target),
        "summary": summarize(plans),
        "plans": plans,
    }


def exit_status(report: Mapping[str, Any]) -> int:
    """`nexus agent`'s exit status for a report: 1, said on stderr, if the run stopped on an error; else 0."""
    if report["error"]:
        print(f"nexus agent: stopped: {report['error']}", file=sys.stderr)
        return 1
    return 0


def write_report(report: Mapping[str, Any], path: Path) -> None:
    """Write the report atomically (a reader never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(path)
