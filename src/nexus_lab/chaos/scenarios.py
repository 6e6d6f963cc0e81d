"""The chaos scenarios: what runs, what goes wrong, and which count proves the fault was injected.

Each scenario is data: the processes (`StackSpec`), how the agent misbehaves (hostile-mode and failure
rates), how it reaches the gateways, the faults scheduled from `random.Random(f"{seed}:{name}")`, and the
name of the count (`proof`) that must be > 0 for the run to show its fault really happened.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from nexus_lab.agent.hostile import Mode
from nexus_lab.chaos.failover import STANDBY_NAME
from nexus_lab.chaos.faults import (
    BreakerWatch,
    Fault,
    KafkaRestart,
    KillLoop,
    PostgresFailover,
    PostgresOutage,
    ReceiverOutage,
)
from nexus_lab.chaos.harness import StackSpec
from nexus_lab.chaos.instances import InstanceKill
from nexus_lab.chaos.kafka_cluster import LAG_ZERO, BrokerKill

Range = tuple[float, float]

UNSTABLE_SINK = ("--fail-rate", "0.3", "--fail-status", "500,503,429,408", "--retry-after", "1", "--hang-rate", "0.04")
# Retention in seconds behind a slow receiver: many orders finish with deliveries still open, which the remover
# must wait for (docs/retention.md).
RETENTION_SINK = ("--fail-rate", "0.5", "--fail-status", "503,429", "--retry-after", "2")
RETENTION_ENV = {"NEXUS_RETENTION_S": "1", "NEXUS_RETENTION_SWEEP_S": "0.2"}


@dataclasses.dataclass(frozen=True)
class SagaFault:
    """What strikes a saga scenario (`nexus_lab.chaos.sagas`), with its knobs; draws come from the seed."""

    kind: str
    """kill-mid-call | kill-mid-compensation | service-down | late-answer | postgres-restart |
    post-pivot-outage | compensation-outage"""
    service: str = "payment"
    decline_rate: float = 0.2
    """Share of charges the payment service declines for good (those sagas compensate)."""
    hang_ms: float = 1200.0
    window_s: Range = (2.0, 3.0)
    """How long the service stays down, or answers late, or PostgreSQL stays stopped."""
    first_s: Range = (0.3, 0.8)
    """When PostgreSQL is stopped; the other faults are armed before the agent sends (they strike the first
    call they aim at, whatever the plan count)."""
    env: tuple[tuple[str, str], ...] = ()
    """Settings of the gateway and executor processes for this scenario (over `sagas.SAGA_ENV`)."""
    latency_ms: float = 0.0
    """Added to every service answer (`nexus services --latency-ms`): keeps the sagas open long enough for a
    fault timed from the start to meet them (on a quiet machine six sagas otherwise end in under 0.5 s)."""


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
    processes: tuple[str, ...] = ("order",)
    """The processes the agent's plans follow, in turn (`AgentConfig.processes`)."""
    saga: SagaFault | None = None
    """A saga scenario: `fulfilment` plans whose effects the executors perform under this fault,
    judged by the saga checker from PostgreSQL and the services' ledgers (`nexus_lab.chaos.sagas`)."""
    mcp_orders: int = 0
    """Orders an MCP agent drives through the gateways' `/mcp` tools meanwhile (`nexus_lab.chaos.mcp_agents`),
    with their own invariants."""
    loss_counted: bool = False
    """Asynchronous replication: the acknowledged steps a failover lost are counted, and the checks the loss
    breaks are reported, not failed (`postgres-failover-async`)."""
    saga_plans: int = 0
    """`fulfilment` plans submitted over HTTP meanwhile, their effects performed by the gateways' executors against
    `nexus services`, judged by the saga checker (`nexus_lab.chaos.saga_load`)."""


def _outage(kind: str, service: str, decline_rate: float, what: str, proof: str) -> Scenario:
    """A saga scenario `saga-<kind>`: `service` answers 503 to every call for 8 s, `decline_rate` of the charges
    declined. The breaker threshold is raised so the outage meets the retry rules, not the breaker (with the
    default threshold every saga escalated); five attempts, the default count."""
    env = (("NEXUS_SAGA_BREAKER_THRESHOLD", "1000"), ("NEXUS_SAGA_MAX_ATTEMPTS", "5"))
    fault = SagaFault(kind, service=service, decline_rate=decline_rate, window_s=(8.0, 8.0), env=env)
    return Scenario(f"saga-{kind}", what, proof, saga=fault)


def _failover(name: str, what: str, *, sync: bool) -> Scenario:
    """A scenario of the primary's machine lost under Kafka, MCP, saga and delivery load, its standby promoted;
    replicated synchronously (`NEXUS_SYNC_STANDBY`) or not (then the steps the standby never received are
    counted as lost, not failed)."""
    env = {"NEXUS_SYNC_STANDBY": STANDBY_NAME} if sync else {}
    return Scenario(name, what, "standby promoted", StackSpec(gateways=2, kafka=True, replicated=True, env=env),
                    transport="kafka", hostile=all_modes(0.2), step_delay_ms=300.0, faults=(PostgresFailover(),),
                    allow_duplicates=True, mcp_orders=4, saga_plans=6, loss_counted=not sync)  # fmt: skip


def _kafka(name: str, what: str, proof: str, fault: Fault, *, allow_duplicates: bool = False) -> Scenario:
    """A scenario of the agent producing to Kafka (every hostile mode at 0.2, 300 ms between steps) under `fault`."""
    return Scenario(name, what, proof, StackSpec(kafka=True), transport="kafka", hostile=all_modes(0.2),
                    step_delay_ms=300.0, faults=(fault,), allow_duplicates=allow_duplicates)  # fmt: skip


def all_modes(rate: float) -> dict[Mode, float]:
    """Every hostile mode but those whose outcome depends on time or on a person: a stalling plan's deadline
    may pass while a killed consumer is down (its last honest step then comes after the abort: DISCARD, as
    it should, but not what the agent's report can expect), and a held payment needs an approver."""
    return {mode: rate for mode in Mode if mode not in _TIMED_OR_PERSON}


_TIMED_OR_PERSON = frozenset(m for m in Mode if m.value in ("stall", "approval"))

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
            "hallucinated steps: skipped steps, wrong amounts and currencies, invented types, steps after completion"
            " (orders and refunds)",
            "hostile messages",
            hostile={
                Mode.SKIPPED_STEP: 1.0,
                Mode.WRONG_AMOUNT: 1.0,
                Mode.WRONG_CURRENCY: 1.0,
                Mode.INVENTED_STEP: 1.0,
                Mode.AFTER_COMPLETION: 1.0,
            },
            processes=("order", "refund"),
        ),
        Scenario(
            "gateway-kill",
            "gateways (HTTP ingress + dispatcher) SIGKILLed repeatedly at random moments, MCP agents too",
            "gateway SIGKILLed",
            StackSpec(gateways=2),
            hostile=all_modes(0.2),
            step_delay_ms=250.0,
            faults=(KillLoop("gateway", minimum=2, maximum=5),),
            allow_duplicates=True,
            mcp_orders=4,
        ),
        Scenario(
            "instance-kill",
            "two gateway instances (nexus serve --workers 2, a data directory each) behind HAProxy; every process "
            "of one SIGKILLed under HTTP load through the balancer (envelopes, MCP numbered steps), restarted later",
            "instance SIGKILLed",
            StackSpec(gateways=2, balancer=True, env={"NEXUS_WORKERS": "2", "NEXUS_DRAIN_GRACE_S": "3"}),
            hostile=all_modes(0.2),
            step_delay_ms=250.0,
            faults=(InstanceKill(),),
            allow_duplicates=True,
            mcp_orders=4,
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
            hostile=all_modes(0.2),
            step_delay_ms=250.0,
            faults=(PostgresOutage(count=2),),
            allow_duplicates=True,
        ),
        _failover(
            "postgres-failover",
            "the PostgreSQL primary's machine lost (SIGKILL, data deleted) under Kafka, MCP, saga and delivery load; "
            "its synchronous standby promoted",
            sync=True,
        ),
        _failover(
            "postgres-failover-async",
            "postgres-failover with asynchronous replication (no NEXUS_SYNC_STANDBY): the acknowledged steps the "
            "promoted standby never received are counted, not failed",
            sync=False,
        ),
        _kafka(
            "kafka-restart",
            "the Kafka broker restarted (scripts/kafka.sh restart) while the agent produces",
            "Kafka broker restarted",
            KafkaRestart(),
        ),
        _kafka(
            "consumer-kill",
            "Kafka consumers (nexus serve --kafka) SIGKILLed at random moments",
            "gateway SIGKILLed",
            KillLoop("gateway", minimum=1, maximum=2, first_s=(0.5, 1.2), gap_s=(1.0, 2.0)),
            allow_duplicates=True,
        ),
        Scenario(
            "broker-kill",
            "one broker of a three-broker Kafka cluster SIGKILLed while the agent produces and the gateways consume "
            "and relay decisions, then restarted",
            LAG_ZERO,
            StackSpec(gateways=2, kafka=True, kafka_brokers=3),
            transport="kafka",
            hostile=all_modes(0.2),
            step_delay_ms=300.0,
            faults=(BrokerKill(),),
        ),
        Scenario(
            "receiver-unstable",
            "the webhook receiver answers 5xx, 408, 429 with Retry-After, and hangs past the timeout",
            "sink faults",
            StackSpec(sink_args=UNSTABLE_SINK),
            sink_faults=True,
        ),
        Scenario(
            "retention",
            "finished orders removed a second after they finish, behind a slow receiver, while agents resend steps",
            "orders removed",
            StackSpec(sink_args=RETENTION_SINK, env=RETENTION_ENV),
            hostile={Mode.DUPLICATE: 0.5, Mode.RESTART: 0.5},
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
            hostile=all_modes(0.3),
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
        # Effects as sagas under crashes and failing services
        Scenario(
            "saga-executor-kill",
            "saga executors SIGKILLed between a service's charge and the write of its result",
            "killed between call and write",
            saga=SagaFault("kill-mid-call"),
        ),
        Scenario(
            "saga-compensation-kill",
            "saga executors SIGKILLed while a compensation (a release) is answered but not yet written",
            "killed during compensation",
            saga=SagaFault("kill-mid-compensation", decline_rate=0.5),
        ),
        Scenario(
            "saga-service-down",
            "the payment service down for seconds: its breaker opens, probes, and the sagas complete",
            "breaker opened",
            # two failures in a row open the breaker: with the default five, a quick machine retried too few
            # payments inside the outage to open it (seen once in make test)
            saga=SagaFault(
                "service-down",
                decline_rate=0.0,
                window_s=(3.0, 4.0),
                env=(("NEXUS_SAGA_BREAKER_THRESHOLD", "2"),),
                latency_ms=250.0,
            ),
        ),
        Scenario(
            "saga-late-answer",
            "the inventory service answers after the client's timeout: settled by compensation with the same key",
            "unknown outcomes settled by compensation",
            saga=SagaFault(
                "late-answer",
                service="inventory",
                hang_ms=700.0,
                window_s=(5.0, 6.0),
                # the breaker stays out of it: opened, it holds the calls uncounted past the window and
                # the retries then succeed, so no outcome stays unknown (seen under load)
                env=(
                    ("NEXUS_SAGA_CALL_TIMEOUT_S", "0.3"),
                    ("NEXUS_SAGA_MAX_ATTEMPTS", "2"),
                    ("NEXUS_SAGA_BREAKER_THRESHOLD", "1000"),
                ),
            ),
        ),
        _outage(
            "post-pivot-outage",
            "invoice",
            0.0,
            "the invoice service (after the pivot) answers 503 to every call for 8 s: retried within the budget, "
            "every saga completes",
            "effects retried past the attempt count",
        ),
        _outage(
            "compensation-outage",
            "inventory",
            1.0,
            "every charge declined while the inventory service answers 503 to every release for 8 s: the "
            "compensations are retried within the budget, every saga is compensated once",
            "compensations retried past the attempt count",
        ),
        Scenario(
            "saga-postgres-restart",
            "PostgreSQL stopped (fast shutdown) and started again while sagas are open",
            "PostgreSQL stopped",
            saga=SagaFault("postgres-restart", window_s=(1.5, 2.5), first_s=(0.2, 0.5), latency_ms=250.0),
        ),
    )
}
