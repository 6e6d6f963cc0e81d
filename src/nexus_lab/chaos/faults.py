"""Faults injected into a running stack, each scheduled from the scenario's seeded `random.Random`.

A fault is a small frozen dataclass with `async run(ctx)`: it draws its whole schedule (delays, victims,
outage lengths) from `ctx.rng` before acting, so the same seed replays the same schedule; then it acts
while the agent runs (and a little after, until it injected at least its minimum), counting what it did
in `ctx.counts`. Timing against the processes' own progress still varies from run to run.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import datetime as dt
import random
import socket
import time
from collections.abc import Callable
from typing import ClassVar

from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.chaos.harness import ChaosSession, Stack
from nexus_lab.chaos.instances import InstanceKill
from nexus_lab.chaos.kafka_cluster import BrokerKill
from nexus_lab.procs import Proc

Range = tuple[float, float]

_LEASED_BY = "SELECT count(*) FROM deliveries WHERE state = 'pending' AND lease_owner = $1 AND lease_until > now()"
_BREAKERS = "SELECT state FROM circuit_breakers"


@dataclasses.dataclass
class FaultContext:
    """What a fault acts on, and where it counts what it did."""

    session: ChaosSession
    stack: Stack
    rng: random.Random
    agent_done: asyncio.Event
    progress: Callable[[str], None]
    counts: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    started: float = dataclasses.field(default_factory=time.monotonic)
    services_url: str | None = None
    """`nexus services` of the run, for `ServiceOutage` (the saga scenarios and the soak run one)."""

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] += n


def _outages(ctx: FaultContext, count: int, first_s: Range, gap_s: Range, outage_s: Range) -> list[Range]:
    """(wait before, length) of each of `count` outages, drawn before the first one: the seed alone decides them."""
    return [(ctx.rng.uniform(*(first_s if i == 0 else gap_s)), ctx.rng.uniform(*outage_s)) for i in range(count)]


def _more(ctx: FaultContext, done: int, minimum: int, maximum: int) -> bool:
    return done < maximum and (done < minimum or not ctx.agent_done.is_set())


@dataclasses.dataclass(frozen=True, slots=True)
class KillLoop:
    """SIGKILL a gateway (or dispatcher) at random moments, restart it, again and again.

    With `mid_delivery`, a victim is killed only once it holds a delivery lease (a request to the sink
    is in flight or about to be), waiting up to `lease_wait_s` for one.
    """

    target: str  # "gateway" | "dispatcher"
    minimum: int = 2
    maximum: int = 6
    first_s: Range = (0.3, 1.0)
    gap_s: Range = (0.8, 2.0)
    down_s: Range = (0.0, 0.4)
    mid_delivery: bool = False
    lease_wait_s: float = 3.0
    spare: int = 0
    """The first `spare` processes of the target are never killed (the soak keeps one of each alive)."""

    async def run(self, ctx: FaultContext) -> None:
        procs = ctx.stack.gateways if self.target == "gateway" else ctx.stack.dispatchers
        schedule = [
            (
                ctx.rng.uniform(*(self.first_s if i == 0 else self.gap_s)),
                self.spare + ctx.rng.randrange(len(procs) - self.spare),
            )
            for i in range(self.maximum)
        ]
        downs = [ctx.rng.uniform(*self.down_s) for _ in range(self.maximum)]
        kills = 0
        db = await Database(Settings(database_url=ctx.stack.database_url, db_pool_size=1)).open(migrate=False)
        try:
            while _more(ctx, kills, self.minimum, self.maximum):
                wait_s, index = schedule[kills]
                await asyncio.sleep(wait_s)
                victim = procs[index]
                leased = await self._wait_for_lease(db, victim) if self.mid_delivery else 0
                victim.kill()
                kills += 1
                ctx.count(f"{self.target} SIGKILLed")
                if leased:
                    ctx.count("killed mid-delivery")
                what = f" holding {leased} leased deliveries" if self.mid_delivery else ""
                ctx.progress(f"SIGKILL {victim.name}{what} at {ctx.elapsed():.1f}s")
                await asyncio.sleep(downs[kills - 1])
                await ctx.stack.restart(victim)
        finally:
            await db.close()

    async def _wait_for_lease(self, db: Database, victim: Proc) -> int:
        assert victim.proc is not None
        owner = f"{socket.gethostname()}:{victim.proc.pid}"
        deadline = time.monotonic() + self.lease_wait_s
        while True:
            with contextlib.suppress(Exception):
                leased = int(await db.fetchval(_LEASED_BY, owner))
                if leased or time.monotonic() >= deadline:
                    return leased
            if time.monotonic() >= deadline:
                return 0
            await asyncio.sleep(0.01)


@dataclasses.dataclass(frozen=True, slots=True)
class _Outage:
    """Stop one part of the stack `count` times, each for a drawn while (`_outages`), and start it again;
    a subclass says what it stops (`down`) and starts (`up`), and how the progress lines name them."""

    count: int = 1
    first_s: Range = (0.5, 1.5)
    gap_s: Range = (2.0, 3.0)
    outage_s: Range = (2.5, 4.0)

    counted: ClassVar[str]
    stopped: ClassVar[str]
    back: ClassVar[str]

    async def down(self, ctx: FaultContext) -> None:
        raise NotImplementedError

    async def up(self, ctx: FaultContext) -> None:
        raise NotImplementedError

    async def run(self, ctx: FaultContext) -> None:
        schedule = _outages(ctx, self.count, self.first_s, self.gap_s, self.outage_s)
        for wait_s, outage_s in schedule:
            await asyncio.sleep(wait_s)
            await self.down(ctx)
            ctx.count(self.counted)
            ctx.progress(f"{self.stopped} at {ctx.elapsed():.1f}s for {outage_s:.1f}s")
            try:
                await asyncio.sleep(outage_s)
            finally:
                await self.up(ctx)
            ctx.progress(f"{self.back} at {ctx.elapsed():.1f}s")


@dataclasses.dataclass(frozen=True, slots=True)
class PostgresOutage(_Outage):
    """Stop PostgreSQL (fast shutdown: every connection dropped) for a few seconds, then start it again."""

    count: int = 2
    gap_s: Range = (1.0, 2.5)
    outage_s: Range = (1.0, 2.5)

    counted = "PostgreSQL stopped"
    stopped = "PostgreSQL stopped"
    back = "PostgreSQL back"

    async def down(self, ctx: FaultContext) -> None:
        await ctx.session.stop_pg()

    async def up(self, ctx: FaultContext) -> None:
        await ctx.session.resume_pg()


@dataclasses.dataclass(frozen=True, slots=True)
class KafkaRestart:
    """`scripts/kafka.sh restart` while the agent produces and the gateway consumes."""

    count: int = 1
    first_s: Range = (0.5, 1.5)

    async def run(self, ctx: FaultContext) -> None:
        waits = [ctx.rng.uniform(*self.first_s) for _ in range(self.count)]
        for wait_s in waits:
            await asyncio.sleep(wait_s)
            ctx.progress(f"Kafka broker restarting at {ctx.elapsed():.1f}s")
            await ctx.session.restart_kafka()
            ctx.count("Kafka broker restarted")
            ctx.progress(f"Kafka broker answers again at {ctx.elapsed():.1f}s")


@dataclasses.dataclass(frozen=True, slots=True)
class ReceiverOutage(_Outage):
    """SIGKILL the webhook receiver, keep it down for a while, start it again (on the same port).

    With the receiver refusing connections, the subscription's circuit breaker must open, let a probe
    through after its cooldown, and close again once a probe succeeds; `BreakerWatch` sees it happen.
    """

    counted = "receiver down"
    stopped = "receiver SIGKILLed"
    back = "receiver back"

    async def down(self, ctx: FaultContext) -> None:
        _sink(ctx).kill()

    async def up(self, ctx: FaultContext) -> None:
        await ctx.stack.restart(_sink(ctx))


def _sink(ctx: FaultContext) -> Proc:
    assert ctx.stack.sink is not None
    return ctx.stack.sink


@dataclasses.dataclass(frozen=True, slots=True)
class ServiceOutage:
    """An effect service (`nexus services`) answers 503 to everything for a while, then recovers: the
    executors' breaker of that service opens, probes, and closes; the sagas complete afterwards."""

    service: str = "payment"
    count: int = 1
    first_s: Range = (0.5, 1.5)
    outage_s: Range = (2.0, 3.0)

    async def run(self, ctx: FaultContext) -> None:
        import httpx

        schedule = _outages(ctx, self.count, self.first_s, self.first_s, self.outage_s)
        assert ctx.services_url is not None, "ServiceOutage needs the run's services"
        async with httpx.AsyncClient(base_url=ctx.services_url, timeout=10) as client:
            for wait_s, outage_s in schedule:
                await asyncio.sleep(wait_s)
                (await client.post("/_faults", json={"service": self.service, "down": True})).raise_for_status()
                ctx.count("service down")
                ctx.progress(f"{self.service} service down at {ctx.elapsed():.1f}s for {outage_s:.1f}s")
                try:
                    await asyncio.sleep(outage_s)
                finally:
                    await client.post("/_faults", json={"service": self.service, "down": False})
                ctx.progress(f"{self.service} service back at {ctx.elapsed():.1f}s")


@dataclasses.dataclass(frozen=True, slots=True)
class BreakerWatch:
    """Not a fault: watches the circuit breakers and counts how often one opened and closed again."""

    interval_s: float = 0.05

    async def run(self, ctx: FaultContext) -> None:
        last = "closed"
        db: Database | None = None
        try:
            while True:
                try:
                    if db is None:
                        db = await Database(Settings(database_url=ctx.stack.database_url, db_pool_size=1)).open(
                            migrate=False
                        )
                    states = {r["state"] for r in await db.fetch(_BREAKERS)}
                except Exception:  # noqa: BLE001 - PostgreSQL may be down in a combined scenario
                    states = set()
                now = "open" if "open" in states else ("half_open" if "half_open" in states else "closed")
                if states and now != last:
                    if now == "open" and last == "closed":
                        ctx.count("breaker opened")
                        ctx.progress(f"circuit breaker opened at {ctx.elapsed():.1f}s")
                    if now == "closed":
                        ctx.count("breaker closed again")
                        ctx.progress(f"circuit breaker closed again at {ctx.elapsed():.1f}s")
                    last = now
                await asyncio.sleep(self.interval_s)
        finally:
            if db is not None:
                await db.close()


@dataclasses.dataclass(frozen=True, slots=True)
class PostgresFailover:
    """The primary's machine lost while plans run (processes SIGKILLed, data directory deleted), the standby
    promoted after `promote_after_s`: every acknowledged step must be on it, applied once."""

    first_s: Range = (1.0, 2.0)
    promote_after_s: Range = (0.5, 1.5)

    async def run(self, ctx: FaultContext) -> None:
        replica = ctx.session.replicas[ctx.stack.database_url]
        await asyncio.sleep(ctx.rng.uniform(*self.first_s))
        ctx.progress(f"primary's machine lost at {ctx.elapsed():.1f}s")
        lost_at = dt.datetime.now(dt.UTC)
        await asyncio.to_thread(replica.lose_primary)
        ctx.count("primary lost")
        await asyncio.sleep(ctx.rng.uniform(*self.promote_after_s))
        await replica.promote()
        ctx.count("standby promoted")
        ctx.progress(f"standby promoted at {ctx.elapsed():.1f}s")
        first = await replica.first_apply_after(lost_at)
        # the failover time (primary lost -> first APPLY on the new primary), printed for RESULTS.md
        waited = "none within 60 s" if first is None else f"{(first - lost_at).total_seconds():.2f}s"
        ctx.progress(f"first APPLY on the promoted standby after the primary's loss: {waited}")


Fault = (
    KillLoop
    | PostgresOutage
    | PostgresFailover
    | KafkaRestart
    | BrokerKill
    | ReceiverOutage
    | ServiceOutage
    | BreakerWatch
    | InstanceKill
)
