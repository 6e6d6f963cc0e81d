"""HAProxy's cost per request: the same gateway under wrk, directly and through HAProxy (deploy/haproxy.cfg), in
one run.

One `nexus serve --no-dispatcher` on a fresh database, and HAProxy from the shipped file with both of its
`server` lines pointed at that one instance, so both paths end at the same process and only the proxy hop
differs. Rounds alternate direct and balanced (`wrk_orders.lua`, one event per request, `--connections`,
`--duration` s after a warm-up); per round: events/s, p50/p99, errors, and HAProxy's CPU per 1,000 requests
(utime + stime from /proc). Printed: each round and the median ratio balanced/direct. Measured, not asserted.

Usage: ``.venv/bin/python benchmarks/balancer.py [--rounds 3] [--duration 5] [--connections 16]``.
PostgreSQL: NEXUS_DATABASE_URL (an admin URL able to CREATE DATABASE), else an embedded pgserver.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import uuid
from pathlib import Path

from nexus_lab.balancer import Balancer
from nexus_lab.bench import create_database, drop_database, start_embedded
from nexus_lab.bench.wrk import lab_script, run_wrk, tree_cpu_s
from nexus_lab.procs import NEXUS_CMD, Proc, free_port, wait_http


def _row(path: str, result: dict[str, float], cpu_s: float | None) -> dict[str, float | str]:
    seconds = result["duration_us"] / 1e6
    errors = sum(result[k] for k in ("connect_errors", "read_errors", "write_errors", "status_errors", "timeouts"))
    row: dict[str, float | str] = {
        "path": path,
        "events_s": result["requests"] / seconds,
        "p50_ms": result["p50_us"] / 1000,
        "p99_ms": result["p99_us"] / 1000,
        "errors": errors,
    }
    if cpu_s is not None:
        row["haproxy_cpu_ms_per_1k"] = cpu_s / max(1, result["requests"]) * 1e6
    return row


async def main(args: argparse.Namespace, admin: str, work: Path) -> None:
    name = f"bench_lb_{uuid.uuid4().hex[:8]}"
    url = await create_database(admin, name, migrate=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(NEXUS_DATABASE_URL=url, NEXUS_HTTP_PORT=str(port), NEXUS_LOG_LEVEL="WARNING")
    env.update(NEXUS_RATE_LIMIT_AGENT="0", NEXUS_DATA_DIR=str(work / "instance"))
    gateway = Proc("gateway", [*NEXUS_CMD, "serve", "--no-dispatcher"], env, work / "gateway.log").start()
    balancer: Balancer | None = None
    try:
        direct = f"http://127.0.0.1:{port}"
        await asyncio.to_thread(wait_http, direct + "/readyz", 60.0, gateway)
        balancer = await Balancer([f"127.0.0.1:{port}"] * 2, work / "haproxy.log").start()
        assert balancer.proc.proc is not None
        haproxy_pid = balancer.proc.proc.pid
        lua = lab_script("wrk_orders.lua")
        run_wrk(direct, args.connections, args.warmup, uuid.uuid4().hex[:8], lua)
        rows = []
        for index in range(args.rounds):
            paths = [("direct", direct), ("haproxy", balancer.url)]
            for path, base in paths if index % 2 == 0 else paths[::-1]:
                before = tree_cpu_s(haproxy_pid)
                result = run_wrk(base, args.connections, args.duration, uuid.uuid4().hex[:8], lua)
                cpu = tree_cpu_s(haproxy_pid) - before if path == "haproxy" else None
                rows.append(_row(path, result, cpu))
                print(index + 1, rows[-1], flush=True)
        _summary(rows)
    finally:
        if balancer is not None:
            balancer.stop()
        gateway.stop()
        await drop_database(admin, name)


def _summary(rows: list[dict[str, float | str]]) -> None:
    def median(path: str, key: str) -> float:
        return statistics.median(float(r[key]) for r in rows if r["path"] == path)

    for key in ("events_s", "p50_ms", "p99_ms"):
        direct, balanced = median("direct", key), median("haproxy", key)
        print(f"median {key}: direct {direct:.1f}, through haproxy {balanced:.1f}, ratio {balanced / direct:.3f}")
    print(f"median haproxy CPU per 1,000 requests: {median('haproxy', 'haproxy_cpu_ms_per_1k'):.1f} ms")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nexus-bench-lb-"))
    admin = os.environ.get("NEXUS_DATABASE_URL")
    embedded = None
    if admin is None:
        embedded, admin = start_embedded()
    try:
        asyncio.run(main(args, admin, work))
    finally:
        if embedded is not None:
            embedded.close()


if __name__ == "__main__":
    cli()
