"""HTTP ingress with a synchronous standby against asynchronous replication, same run: events/s and p99 under wrk.

One primary and one streaming standby (`nexus db standby`, as `nexus chaos postgres-failover` starts them:
`nexus_lab.chaos.failover.ReplicatedDatabase`), on this machine. Each round starts `nexus serve` on the
primary twice: once with `NEXUS_SYNC_STANDBY` (every commit waits until the standby has flushed it), once with
`synchronous_standby_names` cleared (asynchronous: commits do not wait), and runs wrk's one-event-per-request
load (`wrk_orders.lua`, as `nexus bench --suite wrk`) against each after a warm-up. The median of each mode and
the ratio are printed.

Run: `.venv/bin/python benchmarks/standby.py --connections 16 --seconds 10 --rounds 2 [--record]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from nexus_lab.bench.comparison import machine_line, run_comparison, scratch
from nexus_lab.bench.scenarios import start_server
from nexus_lab.bench.wrk import lab_script, run_wrk
from nexus_lab.chaos.failover import STANDBY_NAME, ReplicatedDatabase
from nexus_lab.chaos.harness import clean_env, register_lab_key
from nexus_lab.procs import free_port

SECTION = "## Synchronous standby vs asynchronous replication"
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
MODES = ("asynchronous", "synchronous")


async def _replication(url: str, mode: str) -> None:
    """Clear the primary's synchronous_standby_names (asynchronous); the synchronous gateway sets it at start."""
    if mode == "asynchronous":
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("ALTER SYSTEM SET synchronous_standby_names = ''")
            await conn.execute("SELECT pg_reload_conf()")
        finally:
            await conn.close()


async def _measure(url: str, mode: str, args: argparse.Namespace, lua: Path) -> dict[str, Any]:
    await _replication(url, mode)
    if mode == "synchronous":
        os.environ["NEXUS_SYNC_STANDBY"] = STANDBY_NAME
    port = free_port()
    server = start_server(url, port)
    try:
        base = f"http://127.0.0.1:{port}"
        await asyncio.to_thread(run_wrk, base, args.connections, 2.0, uuid.uuid4().hex[:8], lua)
        result = await asyncio.to_thread(run_wrk, base, args.connections, args.seconds, uuid.uuid4().hex[:8], lua)
    finally:
        os.environ.pop("NEXUS_SYNC_STANDBY", None)
        server.terminate()
        server.wait(30)
    seconds = result["duration_us"] / 1e6
    return {"rate": result["requests"] / seconds, "p99_ms": result["p99_us"] / 1000}


async def main(args: argparse.Namespace) -> list[str]:
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    lua = lab_script("wrk_orders.lua")
    with scratch("nexus-standby-bench-") as directory:
        replica = ReplicatedDatabase(directory, clean_env())
        try:
            url = await replica.start(register_lab_key)
            for _ in range(args.rounds):
                for mode in MODES:
                    runs[mode].append(await _measure(url, mode, args, lua))
                    last = runs[mode][-1]
                    print(f"{mode}: {last['rate']:,.0f} events/s, p99 {last['p99_ms']:.1f} ms", flush=True)
        finally:
            replica.close()
    rate = {m: statistics.median(r["rate"] for r in runs[m]) for m in MODES}
    p99 = {m: statistics.median(r["p99_ms"] for r in runs[m]) for m in MODES}
    return [
        SECTION,
        "",
        f"{machine_line()}: the primary, its standby, the gateway and wrk on this one machine, which other work "
        "was loading (the standby's flush is a local one: across machines the synchronous cost adds a network "
        "round trip per commit). "
        f"wrk, {args.connections} connections, one event per request, {args.seconds:g} s after a 2 s warm-up, "
        f"{args.rounds} round(s) of each mode, alternating.",
        "",
        f"Command: `.venv/bin/python benchmarks/standby.py --connections {args.connections} --seconds {args.seconds:g} "
        f"--rounds {args.rounds}`",
        "",
        "| replication | events/s (median) | p99 ms (median) | runs (events/s) |",
        "|---|---:|---:|---|",
        *[
            f"| {m} | {rate[m]:,.0f} | {p99[m]:.1f} | {', '.join(format(r['rate'], ',.0f') for r in runs[m])} |"
            for m in MODES
        ],
        "",
        f"Synchronous / asynchronous: events/s {rate['synchronous'] / rate['asynchronous']:.2f}x, "
        f"p99 {p99['synchronous'] / p99['asynchronous']:.2f}x.",
    ]


if __name__ == "__main__":
    run_comparison(__doc__, SECTION, main, RESULTS, connections=16, seconds=10.0)
