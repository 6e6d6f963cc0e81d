"""Tracing's cost in batched `Gateway.submit`: off, on at 100 % and on at 1 % sampling, same run.

Rounds rotate the three modes on one database (fresh orders each round) so machine noise hits them alike.
"On" is the SDK's `TracerProvider` with a `ParentBased(TraceIdRatioBased(ratio))` sampler and a
`BatchSpanProcessor` whose exporter drops the spans (the SDK's own cost, not a collector's network);
each step carries an agent's traceparent, sampled at the same ratio (an agent making the decision
upstream), so each sampled step gets its `nexus.decision` span. "Off" is the default: no provider.

Usage: ``.venv/bin/python benchmarks/tracing_overhead.py [--plans 400] [--rounds 3] [--chunk 200]``.
PostgreSQL: NEXUS_DATABASE_URL (an admin URL able to CREATE DATABASE), else an embedded pgserver.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import secrets
import statistics
import time
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from nexus import tracing
from nexus.core.decide.items import Incoming
from nexus.core.envelope import EventEnvelope
from nexus.gateway import Gateway
from nexus.store.database import Database
from nexus_lab.bench import admin_postgres, scratch_database
from nexus_lab.bench.scenarios import STEPS, make_plans, split, timed


class Dropping(SpanExporter):
    """Counts spans and drops them."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def provider_for(ratio: float) -> tuple[TracerProvider, Dropping]:
    exporter = Dropping()
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider, exporter


def traceparent(ratio: float, rng: random.Random) -> str:
    flags = "01" if rng.random() < ratio else "00"
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-{flags}"


async def one(db: Database, ratio: float | None, prefix: str, plans: int, chunk: int) -> tuple[float, float, float]:
    """events/s, p50 batch ms, gateway CPU us per event."""
    gateway = Gateway(db)
    rng = random.Random(prefix)
    workload = split(make_plans(prefix, plans), 1)
    sampled = 1.0 if ratio is None else ratio

    async def call(events: list[EventEnvelope]) -> None:
        await gateway.submit([Incoming.of(e, traceparent(sampled, rng)) for e in events])

    cpu = time.process_time()
    elapsed, lat = await timed(workload, call, chunk)
    events = plans * len(STEPS)
    return events / elapsed, statistics.median(lat) * 1000, (time.process_time() - cpu) / events * 1e6


def micro(batches: int = 200, size: int = 200) -> None:
    """The tracing work alone, per event, without the database: what `submit` adds around its transaction
    (batch span with links, one decision span per event), off / 100 % / 1 %."""
    from nexus.core.decide.answers import Outcome
    from nexus_wire.codes import Decision

    rng = random.Random(1)
    plans = make_plans("micro", size // len(STEPS) + 1)
    envelopes = [e for plan in plans for e in plan][:size]
    for mode, ratio in (("off", None), ("on 100%", 1.0), ("on 1%", 0.01)):
        provider, _ = (None, None) if ratio is None else provider_for(ratio)
        tracing.use(provider)
        items = [Incoming.of(e, traceparent(1.0 if ratio is None else ratio, rng)) for e in envelopes]
        outcomes = [Outcome(str(e.event_id), Decision.APPLY) for e in envelopes]
        started = time.perf_counter()
        for _ in range(batches):
            if tracing.active():
                with tracing.submit_span(items, "http") as span:
                    tracing.record_decisions(items, outcomes, span)
        per_event = (time.perf_counter() - started) / (batches * size) * 1e6
        tracing.use(None)
        if provider is not None:
            provider.shutdown()
        print(f"micro {mode:8}: {per_event:6.2f} us/event of tracing work (batches of {size})")


async def main(args: argparse.Namespace, admin: str) -> None:
    async with scratch_database(admin, "bench_trace", pool_size=2) as db:
        modes: dict[str, float | None] = {"off": None, "on 100%": 1.0, "on 1%": 0.01}
        rates: dict[str, list[float]] = {m: [] for m in modes}
        cpus: dict[str, list[float]] = {m: [] for m in modes}
        spans: dict[str, int] = dict.fromkeys(modes, 0)
        await one(db, None, "warm", 50, args.chunk)
        for r in range(args.rounds):
            order = list(modes)[r % 3 :] + list(modes)[: r % 3]
            for mode in order:
                ratio = modes[mode]
                provider, exporter = (None, None) if ratio is None else provider_for(ratio)
                tracing.use(provider)
                try:
                    rate, p50, cpu = await one(db, ratio, f"r{r}-{list(modes).index(mode)}", args.plans, args.chunk)
                finally:
                    tracing.use(None)
                    if provider is not None:
                        provider.shutdown()
                spans[mode] += exporter.spans if exporter is not None else 0
                rates[mode].append(rate)
                cpus[mode].append(cpu)
                print(f"round {r} {mode:8}: {rate:8,.0f} events/s  p50 batch {p50:7.2f} ms  CPU {cpu:6.1f} us/event")
        base = statistics.median(rates["off"])
        for mode in modes:
            rate = statistics.median(rates[mode])
            print(
                f"median {mode:8}: {rate:8,.0f} events/s ({rate / base:.2f} of off), gateway CPU"
                f" {statistics.median(cpus[mode]):.1f} us/event, spans exported {spans[mode]}"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plans", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=200)
    parser.add_argument("--micro", action="store_true", help="only the tracing work, without the database")
    if parser.parse_args().micro:
        micro()
        raise SystemExit(0)
    arguments = parser.parse_args()
    with admin_postgres() as admin:
        asyncio.run(main(arguments, admin))
