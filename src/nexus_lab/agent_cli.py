"""`nexus agent`: run N plans through the LangGraph planner and publish their steps.

Simulation flags take their defaults from `SIM_INVENTORY_FAILURE_RATE`, `SIM_PAYMENT_REJECTION_RATE`,
`SIM_STEP_DELAY_MS` (and `SIM_<MODE>_RATE`, `SIM_HOSTILE_RATE` for the hostile modes); all default to 0.
Exit 0 when every plan was published, 1 when a publish failed (the partial report is still written).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nexus_lab.agent import runner
from nexus_lab.agent.approver import LabApprover
from nexus_lab.agent.hostile import LIFECYCLE_MODES, Mode
from nexus_lab.agent.runner import AgentConfig
from nexus_lab.agent.transport import HttpTransport, KafkaTransport, PublishError, Transport

MODE_HELP: dict[Mode, str] = {
    Mode.DUPLICATE: "resend a step right after sending it",
    Mode.OUT_OF_ORDER: "send two consecutive steps swapped",
    Mode.RESTART: "restart mid-plan and resend from seq 1",
    Mode.ZOMBIE: "send the next step after the plan's own ABORT_PLAN",
    Mode.OTHER_PLAN: "send a step of the same order under another plan_id",
    Mode.MALFORMED: "send a message that is not a valid envelope",
    Mode.SKIPPED_STEP: "skip a step: send the one after next (REJECTED INVALID_TRANSITION)",
    Mode.WRONG_AMOUNT: "pay more than the order's total (REJECTED CHECK_FAILED)",
    Mode.WRONG_CURRENCY: "pay in another currency than the order's (REJECTED CHECK_FAILED)",
    Mode.INVENTED_STEP: "send a step type the process does not have (REJECTED UNKNOWN_STEP)",
    Mode.AFTER_COMPLETION: "send one more step after the order completed (REJECTED AFTER_TERMINAL)",
    Mode.REPLAN: "replace the plan mid-order (REPLAN), go on under the new one, resend an old-plan step",
    Mode.STALL: "never send the last step; the first carries a deadline (--stall-deadline-s)",
    Mode.APPROVAL: "order above 1000.00 in order_reviewed: payment HELD; the approver approves or denies it",
}


def _env_float(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name)
    return float(raw) if raw not in (None, "") else None


def _rate(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"a rate is between 0 and 1, not {text}")
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--planner",
        choices=["scripted", "llm"],
        default="scripted",
        help="scripted (the seeded graph, default) or llm (a Chat Completions model proposes each step)",
    )
    parser.add_argument(
        "--reactive",
        action="store_true",
        help="propose one fulfilment step at a time and wait for its effect's outcome (HTTP)",
    )
    parser.add_argument("--orders", type=int, default=1, help="plans to run, each with a new order_id")
    parser.add_argument(
        "--inventory-failure-rate",
        type=_rate,
        help="fraction of plans whose inventory fails (SIM_INVENTORY_FAILURE_RATE, 0)",
    )
    parser.add_argument(
        "--payment-rejection-rate",
        type=_rate,
        help="fraction of plans reaching payment whose payment is refused (SIM_PAYMENT_REJECTION_RATE, 0)",
    )
    parser.add_argument(
        "--step-delay-ms", type=float, help="pause between the steps of one plan (SIM_STEP_DELAY_MS, 0)"
    )
    parser.add_argument("--seed", help="decides every plan's path: plan i uses <seed>:<i> (random)")
    parser.add_argument("--report", type=Path, help="write the report (JSON) here")
    _transport_flags(parser)
    _hostile_flags(parser)
    from nexus_lab.llm import cli as llm_cli

    llm_cli.configure(parser)


def _transport_flags(parser: argparse.ArgumentParser) -> None:
    """Where the agent sends, how many plans at once, how it retries, and who answers its approvals."""
    parser.add_argument("--transport", choices=["http", "kafka"], default="http")
    parser.add_argument("--gateway-url", help="HTTP gateway (NEXUS_GATEWAY_URL, http://127.0.0.1:8080)")
    parser.add_argument("--kafka-bootstrap", help="Kafka bootstrap (NEXUS_KAFKA_BOOTSTRAP)")
    parser.add_argument("--kafka-topic", help="events topic (NEXUS_KAFKA_TOPIC, nexus.events)")
    parser.add_argument("--concurrency", type=int, default=8, help="plans in flight at once")
    parser.add_argument(
        "--publish-retries",
        type=int,
        default=4,
        help="HTTP: retries of a 503 or connection error before the agent stops",
    )
    parser.add_argument(
        "--stall-deadline-s",
        type=float,
        default=5.0,
        help="the deadline a stalling plan sets on its first step, from its start (5)",
    )
    parser.add_argument(
        "--processes",
        help="the processes plan i follows, in turn, comma-separated: order, refund (SIM_PROCESSES, order)",
    )
    parser.add_argument(
        "--approver-key",
        help="the approver-role key answering approval plans' held steps (the agent's NEXUS_API_KEY)",
    )


def _hostile_flags(parser: argparse.ArgumentParser) -> None:
    hostile = parser.add_argument_group(
        "hostile modes (fraction of plans that misbehave so; --hostile-rate leaves replan, stall, approval off)"
    )
    hostile.add_argument("--hostile-rate", type=_rate, help="default for every mode below (SIM_HOSTILE_RATE, 0)")
    for mode in Mode:
        flag = mode.value.replace("_", "-")
        what = MODE_HELP[mode]
        hostile.add_argument(
            f"--{flag}-rate",
            dest=f"{mode.value}_rate",
            type=_rate,
            help=f"{what} (SIM_{mode.value.upper()}_RATE)",
        )


def config_from(args: argparse.Namespace, env: Mapping[str, str]) -> AgentConfig:
    """The run's configuration: flags first, then SIM_* variables, then 0."""

    def pick(flag: Any, var: str) -> float:
        if flag is not None:
            return float(flag)
        return _env_float(env, var) or 0.0

    default_hostile = pick(args.hostile_rate, "SIM_HOSTILE_RATE")
    hostile: dict[Mode, float] = {}
    for mode in Mode:
        flag = getattr(args, f"{mode.value}_rate")
        var = f"SIM_{mode.value.upper()}_RATE"
        default = 0.0 if mode in LIFECYCLE_MODES else default_hostile  # Only asked for explicitly
        hostile[mode] = pick(flag, var) if flag is not None or env.get(var) else default
    return AgentConfig(
        orders=args.orders,
        seed=args.seed or secrets.token_hex(4),
        inventory_failure_rate=pick(args.inventory_failure_rate, "SIM_INVENTORY_FAILURE_RATE"),
        payment_rejection_rate=pick(args.payment_rejection_rate, "SIM_PAYMENT_REJECTION_RATE"),
        step_delay_ms=pick(args.step_delay_ms, "SIM_STEP_DELAY_MS"),
        concurrency=args.concurrency,
        hostile=hostile,
        stall_deadline_s=args.stall_deadline_s,
        processes=tuple(p.strip() for p in (args.processes or env.get("SIM_PROCESSES") or "order").split(",") if p),
    )


async def open_transport(args: argparse.Namespace, env: Mapping[str, str]) -> tuple[Transport, str]:
    """The transport the flags ask for, started, and a description of where it sends."""
    if args.transport == "kafka":
        bootstrap = args.kafka_bootstrap or env.get("NEXUS_KAFKA_BOOTSTRAP") or "127.0.0.1:9092"
        topic = args.kafka_topic or env.get("NEXUS_KAFKA_TOPIC") or "nexus.events"
        return await KafkaTransport(bootstrap, topic).start(), f"kafka://{bootstrap}/{topic}"
    transport = HttpTransport(args.gateway_url, retries=args.publish_retries)
    return transport, transport.gateway_url


async def _main(args: argparse.Namespace) -> int:
    env = os.environ
    config = config_from(args, env)
    try:
        transport, target = await open_transport(args, env)
    except PublishError as exc:
        print(f"nexus agent: {exc}", file=sys.stderr)
        return 1
    approver = None
    if config.hostile.get(Mode.APPROVAL, 0.0) > 0:  # Someone answers the held steps
        approver = LabApprover(args.gateway_url, api_key=args.approver_key)
    try:
        report = await runner.run_agent(config, transport, target=target, approver=approver)
    finally:
        await transport.close()
        if approver is not None:
            await approver.close()
    if args.report is not None:
        runner.write_report(report, args.report)
    summary = report["summary"]
    outcomes = ", ".join(f"{k} {v}" for k, v in summary["outcomes"].items())
    print(
        f"agent: {len(report['plans'])} plans (seed {config.seed}): {outcomes}; "
        f"{summary['messages']} messages over {transport.name}"
    )
    return runner.exit_status(report)


async def _reactive(args: argparse.Namespace) -> int:
    """the reactive agent over the client SDK."""
    from nexus_client import AsyncNexusClient
    from nexus_client.config import ClientConfig
    from nexus_lab.agent.reactive import run_reactive

    client = AsyncNexusClient(ClientConfig.from_env(gateway_url=args.gateway_url))
    try:
        rows = await run_reactive(client, args.orders, prefix=args.seed)
    finally:
        await client.aclose()
    if args.report is not None:
        args.report.write_text(json.dumps({"plans": rows}, indent=2))
    outcomes: dict[str, int] = {}
    for row in rows:
        outcomes[str(row["outcome"])] = outcomes.get(str(row["outcome"]), 0) + 1
    print(f"agent (reactive): {len(rows)} plans: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    return 0


def run(args: argparse.Namespace) -> int:
    if getattr(args, "reactive", False):
        return asyncio.run(_reactive(args))
    if args.planner == "llm":
        from nexus_lab.llm import cli as llm_cli

        return llm_cli.run(args)
    return asyncio.run(_main(args))
