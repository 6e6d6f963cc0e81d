"""`nexus chaos [SCENARIO ...]`: run scenarios on real processes, inject their faults, check the invariants.

Every scenario gets a fresh database on one embedded PostgreSQL server that the harness can stop and
start, its own `nexus sink`, `nexus serve` gateways (HTTP, or `--kafka` on the local broker) and
dispatchers; the agent runs in this process. Faults are scheduled from `random.Random(f"{seed}:{name}")`
so a failing run can be replayed with the same `--seed`. One row per scenario at the end; exit 1 if any
invariant broke (or a scenario could not run).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import sys
import time

from nexus_lab.chaos.harness import ChaosSession
from nexus_lab.chaos.report import render
from nexus_lab.chaos.result import ScenarioResult
from nexus_lab.chaos.runner import run_scenario
from nexus_lab.chaos.scenarios import SCENARIOS

__all__ = ["SCENARIOS", "broker_answers", "configure", "needs_kafka", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="scenarios to run (default: all)")
    parser.add_argument("--plans", type=int, default=40, help="plans the agent runs in each scenario")
    parser.add_argument("--seed", default="chaos", help="schedules every fault and plan (replay a failure with it)")
    parser.add_argument("--settle-timeout", type=float, default=90.0, help="seconds to wait for deliveries")
    parser.add_argument("--kafka-bootstrap", default=None, help="the local broker (NEXUS_KAFKA_BOOTSTRAP)")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--keep", action="store_true", help="keep the working directory (logs, reports)")


def needs_kafka(names: list[str]) -> list[str]:
    """The scenarios among `names` that run on the session's Kafka broker (not on a cluster of their own)."""
    return [
        n
        for n in names
        if (SCENARIOS[n].stack.kafka or SCENARIOS[n].transport == "kafka") and SCENARIOS[n].stack.kafka_brokers == 1
    ]


def broker_answers(bootstrap: str, timeout_s: float = 2.0) -> bool:
    """Whether something accepts TCP connections at the first `host:port` of `bootstrap`."""
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


async def _main(args: argparse.Namespace) -> int:
    names = args.scenarios or list(SCENARIOS)
    session = ChaosSession(kafka_bootstrap=args.kafka_bootstrap, keep=args.keep)
    kafka = needs_kafka(names)
    if kafka and not broker_answers(session.kafka_bootstrap):
        session.close()
        print(
            f"nexus chaos: no Kafka broker answers at {session.kafka_bootstrap}, and {', '.join(kafka)} "
            "need(s) one.\nStart the local broker with `make kafka-up` (NEXUS_KAFKA_PORT picks its port), "
            "point --kafka-bootstrap at a running one, or name only the HTTP scenarios (see --list).",
            file=sys.stderr,
        )
        return 2
    print(f"nexus chaos: {len(names)} scenario(s), {args.plans} plans each, seed {args.seed!r}; in {session.tmp}")
    started = time.monotonic()
    results: list[ScenarioResult] = []
    await asyncio.to_thread(session.start)
    try:
        for name in names:
            results.append(
                await run_scenario(
                    session,
                    SCENARIOS[name],
                    plans=args.plans,
                    seed=args.seed,
                    settle_timeout_s=args.settle_timeout,
                    progress=lambda line: print(line, flush=True),
                )
            )
    finally:
        await asyncio.to_thread(session.close)
    print()
    print(render(results, args.seed))
    print(f"{time.monotonic() - started:.1f}s in all" + (f"; logs kept in {session.tmp}" if args.keep else ""))
    return 0 if all(r.ok for r in results) else 1


def run(args: argparse.Namespace) -> int:
    if args.list:
        width = max(len(n) for n in SCENARIOS)
        for name, scenario in SCENARIOS.items():
            print(f"{name:<{width}}  {scenario.what}")
        return 0
    unknown = [n for n in args.scenarios if n not in SCENARIOS]
    # The faults are on purpose: the agent's Kafka producer and the harness's own pools complain about
    # every outage they ride out. The processes under test log to their own files (kept with --keep).
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    for noisy in ("aiokafka", "asyncpg.pool"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    if unknown:
        print(f"nexus chaos: unknown scenario(s) {', '.join(unknown)}; see --list", file=sys.stderr)
        return 2
    return asyncio.run(_main(args))
