"""Numbered steps under wrk: MCP `tools/call` at `/mcp` and `POST /v1/orders/{id}/steps` beside
`POST /v1/events`, in one run against one gateway.

    python -m nexus_lab.bench.mcp_steps [--seconds 10] [--warmup 2] [--connections 1,16]

Starts `nexus serve --no-dispatcher` (embedded PostgreSQL in a temporary --data-dir, log level WARNING)
and an agent key of tenant `bench`. For each connection count, each target: a warm-up run, then the
measured run of wrk (one connection per thread, each connection stepping its own orders 1..5 in order;
`wrk_orders.lua` in its rest, mcp or events mode; for the numbered steps, plans inserted beforehand).
Reported: steps/s, p50/p99 per call, non-2xx answers, and the gateway process's CPU (utime + stime from
/proc, PostgreSQL excluded) per 1,000 steps; the MCP layer's CPU per step is MCP's minus REST's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.bench.scenarios import UNLIMITED_KEY
from nexus_lab.bench.wrk import lab_script, run_wrk
from nexus_lab.procs import Proc, free_port, nexus, wait_ready
from nexus_lab.tables import text_table

_TICKS = os.sysconf("SC_CLK_TCK")
TARGETS = ("events", "steps", "mcp")


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of one process, its children excluded."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


async def make_plans(url: str, run_id: str, connections: int, orders: int) -> None:
    """Plans for every order wrk may step: `<run>-<thread>-<n>`, tenant bench."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "INSERT INTO plans (tenant_id, order_id, plan_id, process) "
            "SELECT 'bench', $1 || '-' || t || '-' || n, $1 || '-plan-' || t || '-' || n, 'order' "
            "FROM generate_series(1, $2::int) t, generate_series(0, $3::int - 1) n",
            run_id,
            connections,
            orders,
        )
    finally:
        await conn.close()


def wrk_once(base: str, target: str, connections: int, seconds: float, run_id: str) -> dict[str, Any]:
    mode = target if target in ("events", "mcp") else "rest"
    return run_wrk(base, connections, seconds, run_id, lab_script("wrk_orders.lua"), mode=mode)


async def measure(
    base: str, url: str, pid: int, target: str, connections: int, seconds: float, warmup: float
) -> dict[str, Any]:
    runs = []
    for length in (warmup, seconds):
        run_id = uuid.uuid4().hex[:8]
        if target != "events":
            await make_plans(url, run_id, connections, orders=max(400, int(4000 * length / connections)))
        before = process_cpu_s(pid)
        result = await asyncio.to_thread(wrk_once, base, target, connections, length, run_id)
        result["cpu_s"] = process_cpu_s(pid) - before
        runs.append(result)
    r = runs[-1]
    steps = r["requests"]
    return {
        "target": target,
        "connections": connections,
        "steps_s": steps / (r["duration_us"] / 1e6),
        "p50_ms": r["p50_us"] / 1000,
        "p99_ms": r["p99_us"] / 1000,
        "errors": r["status_errors"] + r["timeouts"] + r["read_errors"] + r["connect_errors"],
        "cpu_ms_per_step": 1000 * r["cpu_s"] / max(1, steps),
    }


async def _main(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="nexus-bench-mcp-"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "SIM_"))}
    env |= {"NEXUS_LOG_LEVEL": "WARNING", **UNLIMITED_KEY}
    serve = nexus("gateway", ["serve", "--data-dir", str(tmp / "data"), "--http-port", str(port), "--no-dispatcher"],
                  env, tmp / "serve.out").start()  # fmt: skip
    children: list[Proc] = [serve]
    try:
        base = f"http://127.0.0.1:{port}"
        await wait_ready(serve, base + "/readyz", 60)
        db = await Database(Settings(data_dir=tmp / "data")).open(migrate=False)
        try:
            _, os.environ["NEXUS_API_KEY"] = await create_key(db, "bench", frozenset({Role.AGENT}))
            url = str(db.url)
        finally:
            await db.close()
        assert serve.proc is not None
        rows = []
        for connections in args.connections:
            for target in args.targets:
                row = await measure(base, url, serve.proc.pid, target, connections, args.seconds, args.warmup)
                print(row, flush=True)
                rows.append(row)
        table = [
            (r["target"], r["connections"], f"{r['steps_s']:.0f}", f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}",
             r["errors"], f"{r['cpu_ms_per_step']:.2f}")
            for r in rows
        ]  # fmt: skip
        header = ["target", "conns", "steps/s", "p50 ms", "p99 ms", "non-2xx", "gateway CPU ms/step"]
        print(text_table("Numbered steps under wrk", header, table, "lrrrrrr"))
        for connections in args.connections if {"mcp", "steps"} <= set(args.targets) else ():
            by = {r["target"]: r for r in rows if r["connections"] == connections}
            extra = by["mcp"]["cpu_ms_per_step"] - by["steps"]["cpu_ms_per_step"]
            print(f"MCP layer at {connections} connection(s): {extra:.2f} ms of gateway CPU per step over REST")
        return 0
    finally:
        for child in children:
            child.stop(15.0)
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nexus_lab.bench.mcp_steps", description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--connections", type=lambda s: [int(c) for c in s.split(",")], default=[1, 16])
    parser.add_argument("--targets", type=lambda s: s.split(","), default=list(TARGETS), help="events,steps,mcp")
    return asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
