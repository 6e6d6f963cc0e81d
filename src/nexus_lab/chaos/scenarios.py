"""The chaos scenarios: what runs, what goes wrong, and which count proves the fault was injected.

Each scenario is data: the processes (`StackSpec`), how the agent misbehaves (hostile-mode and failure
rates), how it reaches the gateways, the faults scheduled from `random.Random(f"{seed}:{name}")`, and the
name of the count (`proof`) that must be > 0 for the run to show its fault really happened.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from nexus_lab.agent.hostile import Mode
from nexus_lab.chaos.faults import BreakerWatch, Fault, KafkaRestart, KillLoop, PostgresOutage, ReceiverOutage
from nexus_lab.chaos.harness import StackSpec

UNSTABLE_SINK = ("--fail-rate", "0.3", "--fail-status", "500,503,429,408", "--retry-after", "1", "--hang-rate", "0.04")


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    what: str
    proof: str
    """The count (in `ScenarioResult.faults`) that shows the fault was injected."""
    stack: StackSpec = dataclasses.field(default_factory=StackSpec)
    transport: str = "spread"  # "spread" (HTTP, orders spread over the gateways) | "race" (HTTP) | "kafka"
    hostile: Mapping[Mode, float] = dataclasses.field(default_factory=dict)
    inventory_failure_rate: float = 0.2
    payment_rejection_rate: float = 0.2
    step_delay_ms: float = 20.0
    """Pause between a plan's steps: longer where faults are timed, so they strike while plans run."""
    faults: tuple[Fault, ...] = ()
    allow_duplicates: bool = False
    """At-least-once: a dispatcher or receiver killed after the receiver took a notification resends it."""
    sink_faults: bool = False
    """Count the sink's injected faults (from its log) as this scenario's faults."""


def _all(rate: float) -> dict[Mode, float]:
    return dict.fromkeys(Mode, rate)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "reordering",
            "sequence gaps and reordering: every plan swaps two steps, raced through two gateways",
            "out-of-order pairs raced",
            StackSpec(gateways=2),
            transport="race",
            hostile={Mode.OUT_OF_ORDER: 1.0},
        ),
        Scenario(
            "duplicates",
            "duplicated events: steps resent at once, plans restarted from seq 1, over two gateways",
            "hostile messages",
            StackSpec(gateways=2),
            hostile={Mode.DUPLICATE: 1.0, Mode.RESTART: 0.6},
        ),
        Scenario(
            "zombies",
            "zombie events: a step sent after its own plan's ABORT_PLAN",
            "hostile messages",
            hostile={Mode.ZOMBIE: 1.0},
            inventory_failure_rate=0.4,
            payment_rejection_rate=0.5,
        ),
        Scenario(
            "poison",
            "poison messages: malformed envelopes, not-JSON, and steps of another plan",
            "hostile messages",
            hostile={Mode.MALFORMED: 1.0, Mode.OTHER_PLAN: 1.0},
        ),
        Scenario(
            "hallucinations",
            "hallucinated steps: skipped steps, wrong amounts and currencies, invented types, steps after completion",
            "hostile messages",
            hostile={
                Mode.SKIPPED_STEP: 1.0,
                Mode.WRONG_AMOUNT: 1.0,
                Mode.WRONG_CURRENCY: 1.0,
                Mode.INVENTED_STEP: 1.0,
                Mode.AFTER_COMPLETION: 1.0,
            },
        ),
        Scenario(
            "gateway-kill",
            "gateways (HTTP ingress + dispatcher) SIGKILLed repeatedly at random moments",
            "gateway SIGKILLed",
            StackSpec(gateways=2),
            hostile=_all(0.2),
            step_delay_ms=250.0,
            faults=(KillLoop("gateway", minimum=2, maximum=5),),
            allow_duplicates=True,
        ),
        Scenario(
            "dispatcher-kill",
            "dispatchers SIGKILLed while holding delivery leases (requests in flight)",
            "killed mid-delivery",
            StackSpec(gateways=1, dispatchers=2, sink_args=("--latency-ms", "60")),
            step_delay_ms=250.0,
            faults=(KillLoop("dispatcher", minimum=2, maximum=5, mid_delivery=True),),
            allow_duplicates=True,
        ),
        Scenario(
            "postgres-restart",
            "PostgreSQL stopped (fast shutdown) and started again while the agent sends",
            "PostgreSQL stopped",
            hostile=_all(0.2),
            step_delay_ms=250.0,
            faults=(PostgresOutage(count=2),),
            allow_duplicates=True,
        ),
        Scenario(
            "kafka-restart",
            "the Kafka broker restarted (scripts/kafka.sh restart) while the agent produces",
            "Kafka broker restarted",
            StackSpec(kafka=True),
            transport="kafka",
            hostile=_all(0.2),
            step_delay_ms=300.0,
            faults=(KafkaRestart(),),
        ),
        Scenario(
            "consumer-kill",
            "Kafka consumers (nexus serve --kafka) SIGKILLed at random moments",
            "gateway SIGKILLed",
            StackSpec(kafka=True),
            transport="kafka",
            hostile=_all(0.2),
            step_delay_ms=300.0,
            faults=(KillLoop("gateway", minimum=1, maximum=2, first_s=(0.5, 1.2), gap_s=(1.0, 2.0)),),
            allow_duplicates=True,
        ),
        Scenario(
            "receiver-unstable",
            "the webhook receiver answers 5xx, 408, 429 with Retry-After, and hangs past the timeout",
            "sink faults",
            StackSpec(sink_args=UNSTABLE_SINK),
            sink_faults=True,
        ),
        Scenario(
            "circuit-breaker",
            "the receiver down for seconds: the breaker opens, probes, and closes again",
            "breaker opened",
            step_delay_ms=250.0,
            faults=(ReceiverOutage(), BreakerWatch()),
            allow_duplicates=True,
        ),
        Scenario(
            "everything",
            "all at once: every hostile mode, unstable receiver, gateway and dispatcher kills, PostgreSQL "
            "and receiver outages",
            "faults",
            StackSpec(gateways=2, dispatchers=1, sink_args=UNSTABLE_SINK),
            hostile=_all(0.3),
            step_delay_ms=250.0,
            faults=(
                KillLoop("gateway", minimum=1, maximum=3, first_s=(1.0, 2.0), gap_s=(1.5, 3.0)),
                KillLoop("dispatcher", minimum=1, maximum=3, first_s=(0.5, 1.5), gap_s=(1.5, 3.0)),
                PostgresOutage(count=1, first_s=(2.0, 4.0)),
                ReceiverOutage(count=1, first_s=(3.0, 5.0), outage_s=(2.0, 3.0)),
                BreakerWatch(),
            ),
            allow_duplicates=True,
            sink_faults=True,
        ),
    )
}
