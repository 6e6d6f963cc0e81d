"""Retention's cost (issue 35 items 1 and 5): the hot path under wrk with 0, 1,000,000 and 3,000,000 retained
five-step orders, the remover working through a backlog vs idle at the largest size, and its cost per 1,000 orders.

One run, one embedded PostgreSQL, one database grown in turn, `nexus serve --no-dispatcher` (its remover sweeping
every second):

1. 0 retained orders: a warm-up, then `--rounds` wrk runs (one event per request, five-step orders, `--connections`
   connections, `--seconds` each; medians), with events/s, p99 and CPU seconds per 1,000 events of the gateway's
   process tree and of PostgreSQL;
2. each size of `--retained` in turn: the free disk checked and printed (the bench stops growing where it would
   not fit), retained orders generated in SQL (`nexus_lab.bench.retained`: every row a real finished order
   leaves, every index in place), finished 29 days ago: inside the default period, so the remover is idle; wrk
   as in 1;
3. at the largest size reached: wrk with the remover idle and working (a tenant period of 7 days makes the whole
   backlog due) in turn on the same gateway, `--rounds` pairs; with `--duty D1 D2 ...` a gateway per duty
   (NEXUS_RETENTION_DUTY, e.g. 0.2 and 1: paced and full speed) in turn within each round; then, per duty,
   without wrk, the gateway's and PostgreSQL's CPU over `--seconds` with the remover idle and working: the
   removal rate alone and the difference per 1,000 orders removed. `--remover-only` skips step 1 and 2's wrk.

With `--interleave N` instead: two databases (0 and N retained orders) and two gateways, wrk on each in turn
for `--rounds` rounds (medians), so the machine's changing load weighs on both alike.

Usage: ``.venv/bin/python benchmarks/retention.py [--retained 1000000 3000000] [--seconds 10] [--connections 64]
[--rounds 3] [--duty 0.2 1] [--remover-only] [--out FILE]``,
``.venv/bin/python benchmarks/retention.py --interleave 300000 [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from nexus.store.embedded import EmbeddedPostgres
from nexus_lab.bench import create_database
from nexus_lab.bench import retained as retained_mod
from nexus_lab.bench.scenarios import UNLIMITED_KEY, start_server
from nexus_lab.bench.wrk import lab_script, postmaster_pid, run_wrk, tree_cpu_s

FREE_GB_PER_MILLION = 15.0
"""Disk a million retained orders take (with WAL while loading), measured here: the bench refuses to grow
the database past what the free disk allows."""


async def sql(url: str, statement: str, *args: Any) -> Any:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(statement, *args)
    finally:
        await conn.close()


def measure(base: str, seconds: float, connections: int, lua: Path, pids: tuple[int, int]) -> dict[str, float]:
    """One wrk run: events/s, p99 and the CPU seconds per 1,000 events of the gateway's process tree and of
    PostgreSQL (whatever else they did meanwhile included: the remover, autovacuum)."""
    before = [tree_cpu_s(pid) for pid in pids]
    out = run_wrk(base, connections, seconds, uuid.uuid4().hex[:8], lua)
    after = [tree_cpu_s(pid) for pid in pids]
    events = max(1, out["requests"])
    return {
        "events_s": round(out["requests"] / (out["duration_us"] / 1e6)),
        "p99_ms": round(out["p99_us"] / 1e3, 1),
        "gateway_cpu_s_per_1k": round((after[0] - before[0]) / events * 1000, 3),
        "postgres_cpu_s_per_1k": round((after[1] - before[1]) / events * 1000, 3),
    }


def medians(runs: list[dict[str, float]]) -> dict[str, Any]:
    keys = ("events_s", "p99_ms", "gateway_cpu_s_per_1k", "postgres_cpu_s_per_1k")
    return {k: statistics.median(r[k] for r in runs) for k in keys} | {"runs": runs}


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


async def database_gb(url: str) -> float:
    return round(float(await sql(url, "SELECT pg_database_size(current_database())")) / 1e9, 2)


async def bench(args: argparse.Namespace, url: str, say: Any) -> dict[str, Any]:
    """0, then each of `args.retained` (the same database grown), wrk at each with the remover idle; then, at
    the largest size reached, the remover working vs idle and its cost per 1,000 orders."""
    lua = lab_script("wrk_orders.lua")
    base = f"http://127.0.0.1:{args.port}"
    postgres = await postmaster_pid(url)
    results: dict[str, Any] = {"retained": {}, "generate": {}}
    await sql(url, IDLE)
    generated = 0
    for retained in [0, *args.retained]:
        if retained > generated:
            free = shutil.disk_usage(tempfile.gettempdir()).free / 1e9
            need = (retained - generated) / 1e6 * FREE_GB_PER_MILLION
            say(f"free disk: {free:.1f} GB; {retained - generated:,} more retained orders need about {need:.0f} GB")
            if free < need * 1.2:
                say(f"not enough free disk for {retained:,} retained orders: stopping at {generated:,}")
                break
            seconds = await retained_mod.generate(url, generated + 1, retained, say)
            generated = retained
            results["generate"][retained] = {"seconds": round(seconds), "database_gb": await database_gb(url)}
            say(f"generated {retained:,} retained orders in {seconds:.0f} s: {results['generate'][retained]}")
        if not args.remover_only:
            results["retained"][retained] = await one_size(args, url, base, lua, postgres, say, generated)
    results["remover"] = await remover_phase(args, url, base, lua, postgres, say)
    results["largest"] = generated
    return results


IDLE = (
    "INSERT INTO tenant_limits (tenant_id, max_order_amount, retention_s) VALUES ('default', 100000, NULL) "
    "ON CONFLICT (tenant_id) DO UPDATE SET retention_s = NULL"
)
"""The remover idle: the default period (30 days) is longer than the retained orders' age (29 days). (Not a
tenant period longer than the default: the remover's passes then scan every order between the two periods,
benchmarks/RESULTS.md "Retained orders 0 / 1M / 3M".)"""
WORKING = "UPDATE tenant_limits SET retention_s = 604800"
"""The remover working: the tenant's period (7 days) makes every retained order due."""
ALONE = (("idle", IDLE), ("working", WORKING))


async def one_size(
    args: argparse.Namespace, url: str, base: str, lua: Path, postgres: int, say: Any, retained: int
) -> dict[str, Any]:
    """A fresh gateway on the database as it is; a warm-up, then `args.rounds` wrk runs (medians)."""
    server = start_server(url, args.port)
    try:
        run_wrk(base, args.connections, 3, uuid.uuid4().hex[:8], lua)  # warm-up
        runs = []
        for _ in range(args.rounds):
            runs.append(measure(base, args.seconds, args.connections, lua, (server.pid, postgres)))
            say(f"{retained:,} retained, remover idle: {runs[-1]} (load {load_average()})")
    finally:
        server.terminate()
        server.wait(20)
    return medians(runs) | {"load_average": load_average()}


async def remover_phase(
    args: argparse.Namespace, url: str, base: str, lua: Path, postgres: int, say: Any
) -> dict[str, Any]:
    """For each duty of `args.duty` (NEXUS_RETENTION_DUTY; none given: the gateway's default), in turn each
    round: a gateway with that duty, wrk with its remover idle and working (a pair on the same gateway);
    `args.rounds` rounds. Then, per duty, without wrk, the gateway's and PostgreSQL's CPU over `args.seconds`
    idle and working: the removal rate alone and its cost per 1,000 orders removed."""
    duties = args.duty or [None]
    runs: dict[str, dict[str, list[dict[str, float]]]] = {_label(d): {"idle": [], "working": []} for d in duties}
    for _ in range(args.rounds):
        for duty in duties:
            server = start_gateway(url, args.port, duty)
            try:
                run_wrk(base, args.connections, 3, uuid.uuid4().hex[:8], lua)  # warm-up
                for mode, statement in (("idle", IDLE), ("working", WORKING)):
                    await sql(url, statement)
                    await asyncio.sleep(2)  # the remover's next pass (every second) sees the new period
                    n0 = await sql(url, "SELECT count(*) FROM removed_orders")
                    run = measure(base, args.seconds, args.connections, lua, (server.pid, postgres))
                    run["removed"] = await sql(url, "SELECT count(*) FROM removed_orders") - n0
                    runs[_label(duty)][mode].append(run)
                    say(f"duty {_label(duty)}, remover {mode}: {run} (load {load_average()})")
            finally:
                await sql(url, IDLE)
                server.terminate()
                server.wait(20)
    results: dict[str, Any] = {}
    for duty in duties:
        results[_label(duty)] = {mode: medians(rs) for mode, rs in runs[_label(duty)].items()}
        results[_label(duty)] |= await remover_alone(args, url, postgres, duty, say)
    return results | {"load_average": load_average()}


def _label(duty: float | None) -> str:
    return "default" if duty is None else f"{duty:g}"


def start_gateway(url: str, port: int, duty: float | None) -> Any:
    """`nexus serve` with the remover's duty set (None: the gateway's default)."""
    os.environ.pop("NEXUS_RETENTION_DUTY", None)
    if duty is not None:
        os.environ["NEXUS_RETENTION_DUTY"] = str(duty)
    return start_server(url, port)


async def remover_alone(
    args: argparse.Namespace, url: str, postgres: int, duty: float | None, say: Any
) -> dict[str, Any]:
    """Without wrk: the CPU over `args.seconds` with the remover idle and working; the rate and the cost per
    1,000 orders removed (working minus idle)."""
    server = start_gateway(url, args.port, duty)
    pids = (server.pid, postgres)
    try:
        cost = {mode: await alone(url, statement, pids, args.seconds) for mode, statement in ALONE}
    finally:
        await sql(url, IDLE)
        server.terminate()
        server.wait(20)
    removed = max(1, cost["working"]["removed"])
    per_1k = {
        f"{part}_cpu_s_per_1k_orders": round((cost["working"][part] - cost["idle"][part]) / removed * 1000, 3)
        for part in ("gateway", "postgres")
    }
    say(f"duty {_label(duty)}, remover alone: {cost}, per 1,000 orders {per_1k}")
    return {"alone": cost, "alone_orders_s": round(removed / args.seconds), **per_1k}


async def alone(url: str, statement: str, pids: tuple[int, int], seconds: float) -> dict[str, float]:
    """The gateway's and PostgreSQL's CPU seconds over `seconds` without load, the remover set by `statement`."""
    await sql(url, statement)
    await asyncio.sleep(2)
    n0, cpu0 = await sql(url, "SELECT count(*) FROM removed_orders"), [tree_cpu_s(pid) for pid in pids]
    await asyncio.sleep(seconds)
    n1, cpu1 = await sql(url, "SELECT count(*) FROM removed_orders"), [tree_cpu_s(pid) for pid in pids]
    return {"removed": n1 - n0, "gateway": round(cpu1[0] - cpu0[0], 2), "postgres": round(cpu1[1] - cpu0[1], 2)}


async def interleaved(args: argparse.Namespace, admin: str, say: Any) -> dict[str, Any]:
    """0 vs `args.interleave` retained orders, A/B/A/B: two databases, two gateways, wrk on each in turn (the
    machine's load changing between runs weighs on both alike)."""
    lua = lab_script("wrk_orders.lua")
    empty = await create_database(admin, "retention_empty", migrate=True)
    full = await create_database(admin, "retention_full", migrate=True)
    for url in (empty, full):
        await sql(url, IDLE)
    say(f"free disk: {shutil.disk_usage(tempfile.gettempdir()).free / 1e9:.1f} GB; generating {args.interleave:,}")
    await retained_mod.generate(full, 1, args.interleave, say)
    postgres = await postmaster_pid(empty)
    servers = [start_server(empty, args.port), start_server(full, args.port + 1)]
    runs: dict[str, list[dict[str, float]]] = {"0": [], str(args.interleave): []}
    try:
        for _ in range(args.rounds):
            names = (("0", args.port), (str(args.interleave), args.port + 1))
            for (name, port), server in zip(names, servers, strict=True):
                pids = (server.pid, postgres)
                runs[name].append(measure(f"http://127.0.0.1:{port}", args.seconds, args.connections, lua, pids))
                say(f"{name} retained: {runs[name][-1]}")
    finally:
        for server in servers:
            server.terminate()
            server.wait(20)
    return {name: medians(rs) for name, rs in runs.items()} | {"load_average": load_average()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retained", type=int, nargs="*", default=[1_000_000, 3_000_000])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--port", type=int, default=8791)
    parser.add_argument("--interleave", type=int, default=0, help="instead: 0 vs N retained, A/B/A/B, same run")
    parser.add_argument("--rounds", type=int, default=3, help="wrk runs per size (medians); A/B rounds")
    parser.add_argument(
        "--duty", type=float, nargs="*", default=[], help="the remover's NEXUS_RETENTION_DUTY per gateway, in turn"
    )
    parser.add_argument("--remover-only", action="store_true", help="skip wrk at each size: the remover only")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here too")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk not installed", file=sys.stderr)
        return 2
    os.environ.update({**UNLIMITED_KEY, "NEXUS_RETENTION_SWEEP_S": "1"})
    say = lambda line: print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)  # noqa: E731 - one line each
    data_dir = Path(tempfile.mkdtemp(prefix="nexus-retention-bench-"))
    embedded = EmbeddedPostgres(data_dir, cleanup_mode="delete")
    admin = embedded.start()
    try:
        if args.interleave:
            results = asyncio.run(interleaved(args, admin, say))
        else:
            url = asyncio.run(create_database(admin, "retention_bench", migrate=True))
            results = asyncio.run(bench(args, url, say))
    finally:
        embedded.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    print(json.dumps(results, indent=2))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
