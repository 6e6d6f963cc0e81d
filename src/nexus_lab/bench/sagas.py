"""The `sagas` scenario of `nexus bench`: sagas per second with the local services, and the latency a saga
adds per effect over the bare HTTP call, with the executors woken by NOTIFY or by their poll, same run.

Each saga is a `fulfilment` order whose five steps are submitted at once through `Gateway.submit` (steps
3-5 wait, BUFFER, for the effects before them); it is done when the order is `completed` (four effects:
reserve, charge, ship, invoice). The services run as a `nexus services` process, the executors as a
`nexus serve --dispatcher-only` process with `concurrency` executor loops, restarted for every (concurrency,
wake-up) pair; the pairs alternate (poll, notify, poll, notify...) so the machine's load falls on both.

- ``notify``: the default, executors LISTEN on `nexus_sagas` (`NEXUS_SAGA_POLL_S` 2 s as the fallback);
- ``poll``: `NEXUS_SAGA_LISTEN=false`, the executors poll every `POLL_S` (the previous default).

Options (`nexus bench --suite sagas`): `--saga-latency-ms` delays every service answer (the chaos
scenarios' services answer 250 ms late), `--saga-executors` sets `NEXUS_SAGA_EXECUTORS` of the executor
process (default: the concurrency; `default`: leave it unset), `--saga-wakeups` picks the modes, and
`--gateway-cmd` starts the executor process with another checkout's command (base vs new, same run).

Per row: sagas/s, the saga's p50/p95/p99 from submission to completion, per effect (p50 / 4) and over the
bare call, and CPU seconds per 1,000 effects of the executor process and of PostgreSQL.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.processes import builtin_catalog
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.agent.reactive import step_envelope
from nexus_lab.bench.scenarios import Row, row
from nexus_lab.bench.wrk import postmaster_pid, tree_cpu_s
from nexus_lab.procs import NEXUS_CMD, free_port, wait_http
from nexus_lab.services import SERVICES

EFFECTS = 4
POLL_S = "0.2"
# How often the bench looks for completed orders: often enough for sagas of a second or more, rarely enough
# that its own queries are not a visible share of PostgreSQL's CPU (every 5 ms they were, at 64 sagas).
WATCH_S = 0.02
MODES: dict[str, dict[str, str]] = {
    "poll": {"NEXUS_SAGA_LISTEN": "false", "NEXUS_SAGA_POLL_S": POLL_S},
    "notify": {"NEXUS_SAGA_LISTEN": "true"},
}


async def bare_call_ms(services_url: str, calls: int = 200) -> float:
    """Median ms of one POST to the shipping service with a fresh key (the floor an effect stands on)."""
    times = []
    async with httpx.AsyncClient() as client:
        for _ in range(calls):
            t = time.perf_counter()
            await client.post(services_url + "/shipping/shipments", json={"order_id": "x"},
                              headers={"Idempotency-Key": uuid.uuid4().hex})  # fmt: skip
            times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


@dataclasses.dataclass(frozen=True)
class SagaOptions:
    """How the sagas suite runs its services and its executor process."""

    latency_ms: float = 0.0
    executors: str | None = None
    """`NEXUS_SAGA_EXECUTORS` of the executor process: None = the concurrency, "default" = unset, or a number."""
    executor_cmd: tuple[str, ...] | None = None
    """The command that starts the executor process (another checkout's `nexus`); None: this one's."""

    def executors_for(self, conc: int) -> int | None:
        if self.executors is None:
            return conc
        return None if self.executors == "default" else int(self.executors)


def _start(
    args: Sequence[str], env: dict[str, str], log: Path, cmd: Sequence[str] | None = None
) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([*(cmd or NEXUS_CMD), *args], env=env, stdout=out, stderr=subprocess.STDOUT)  # noqa: S603 - our own gateway


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


async def _wait_serving(log: Path, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while "nexus serving at" not in (text := await asyncio.to_thread(log.read_text, errors="replace")):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the executor process did not start:\n{text[-2000:]}")
        await asyncio.sleep(0.1)


def _executor_env(url: str, services_url: str, mode: str, conc: int, options: SagaOptions) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(NEXUS_DATABASE_URL=url, NEXUS_DB_POOL_SIZE=str(min(conc + 4, 90)), NEXUS_LOG_LEVEL="WARNING",
               **MODES[mode])  # fmt: skip
    executors = options.executors_for(conc)
    if executors is not None:
        env["NEXUS_SAGA_EXECUTORS"] = str(executors)
    env.update({f"NEXUS_SERVICE_{n.upper()}_URL": f"{services_url}/{n}" for n in SERVICES})
    return env


async def _watch_completed(db: Database, waiting: dict[str, asyncio.Future[None]], done: asyncio.Event) -> None:
    """Resolve each waiting order's future once the order is completed, until `done`."""
    while not done.is_set():
        if waiting:
            rows = await db.fetch(
                "SELECT order_id FROM orders WHERE order_id = ANY($1::text[]) AND status = 'completed'",
                list(waiting),
            )
            for r in rows:
                future = waiting.pop(r["order_id"], None)
                if future is not None and not future.done():
                    future.set_result(None)
        await asyncio.sleep(WATCH_S)


async def _one_run(
    url: str, services_url: str, mode: str, conc: int, sagas: int, workdir: Path, options: SagaOptions
) -> tuple[float, list[float], float, float]:
    """(seconds, latencies, executor CPU s, PostgreSQL CPU s) of `sagas` sagas, `conc` at a time."""
    env = _executor_env(url, services_url, mode, conc, options)
    log = workdir / f"executor-{mode}-{conc}.log"
    executor = _start(["serve", "--dispatcher-only"], env, log, options.executor_cmd)
    db = await Database(Settings(database_url=url, db_pool_size=min(conc + 4, 40))).open(migrate=False)
    try:
        await _wait_serving(log, executor)
        gateway = Gateway(db, catalog=builtin_catalog())
        prefix = uuid.uuid4().hex[:6]
        waiting: dict[str, asyncio.Future[None]] = {}
        gate = asyncio.Semaphore(conc)
        latencies: list[float] = []
        done = asyncio.Event()

        async def one(i: int) -> None:
            async with gate:
                order, plan = f"b{prefix}-{i}", f"bp{prefix}-{i}"
                future = asyncio.get_running_loop().create_future()
                waiting[order] = future
                t = time.perf_counter()
                await gateway.submit([Incoming.of(step_envelope(order, plan, s)) for s in range(1, 6)])
                await future
                latencies.append(time.perf_counter() - t)

        watcher = asyncio.create_task(_watch_completed(db, waiting, done))
        # Warm-up, not measured: the first sagas compile the process's CEL and open the executor's connections.
        await asyncio.gather(*(one(-1 - i) for i in range(min(conc, 4))))
        latencies.clear()
        postmaster = await postmaster_pid(url)
        cpu_exec, cpu_pg = tree_cpu_s(executor.pid), tree_cpu_s(postmaster)
        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(sagas)))
        elapsed = time.perf_counter() - start
        cpu_exec, cpu_pg = tree_cpu_s(executor.pid) - cpu_exec, tree_cpu_s(postmaster) - cpu_pg
        done.set()
        await watcher
        return elapsed, latencies, cpu_exec, cpu_pg
    finally:
        await db.close()
        _stop(executor)


async def bench_sagas(
    url: str, concurrencies: Sequence[int], sagas: int, modes: Sequence[str], workdir: Path,
    on_row: Callable[[Row], None], options: SagaOptions | None = None,
) -> list[Row]:  # fmt: skip
    """Rows of the sagas scenario on the (migrated) database at `url`, modes alternating per concurrency."""
    port = free_port()
    services_url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    options = options or SagaOptions()
    latency = ["--latency-ms", str(options.latency_ms)] if options.latency_ms else []
    services = _start(["services", "--port", str(port), *latency], env, workdir / "services.log")
    rows: list[Row] = []
    try:
        await asyncio.to_thread(wait_http, services_url + "/health")
        floor = await bare_call_ms(services_url)
        print(f"  sagas: bare HTTP call to a service, median {floor:.2f} ms", flush=True)
        for n, conc in enumerate(concurrencies):
            for mode in modes if n % 2 == 0 else list(reversed(modes)):
                load = os.getloadavg()[0]
                elapsed, latencies, cpu_exec, cpu_pg = await _one_run(
                    url, services_url, mode, conc, sagas, workdir, options
                )
                out = row("sagas", f"sagas, executors woken by {mode}", conc, sagas, elapsed, latencies, "saga")
                per_effect = (out["p50_ms"] or 0.0) / EFFECTS
                out.update(
                    mode=mode,
                    sagas_per_s=out["events_per_s"],
                    per_effect_ms=round(per_effect, 2),
                    bare_call_ms=round(floor, 2),
                    over_bare_ms=round(per_effect - floor, 2),
                    cpu_s_per_1k_effects={
                        "executor": round(cpu_exec * 1000 / (sagas * EFFECTS), 3),
                        "postgres": round(cpu_pg * 1000 / (sagas * EFFECTS), 3),
                    },
                    load_avg=round(load, 2),
                    service_latency_ms=options.latency_ms,
                    executors=options.executors_for(conc) or "default",
                    executor_cmd=" ".join(options.executor_cmd or ("this checkout",)),
                )
                rows.append(out)
                on_row(out)
    finally:
        _stop(services)
    return rows


def sagas_table(rows: Sequence[Row]) -> str:
    """The sagas rows as a markdown table (RESULTS.md's shape)."""
    lines = [
        "| wake-up | conc | sagas | sagas/s | saga p50 ms | p99 ms | per effect ms | over bare ms "
        "| executor CPU s/1k effects | PG CPU s/1k effects | load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cpu: dict[str, Any] = r["cpu_s_per_1k_effects"]
        lines.append(
            f"| {r['mode']} | {r['concurrency']} | {r['events']} | {r['sagas_per_s']:.1f} | {r['p50_ms']:.1f} "
            f"| {r['p99_ms']:.1f} | {r['per_effect_ms']:.1f} | {r['over_bare_ms']:+.1f} | {cpu['executor']:.3f} "
            f"| {cpu['postgres']:.3f} | {r['load_avg']:.1f} |"
        )
    return "\n".join(lines)
