"""Tracing's cost on the HTTP path under wrk: `nexus serve` with tracing off, on at 100 % and on
at 1 % sampling, side by side in one run.

Each round starts the same gateway three times in turn (the order rotating per round, one server at a
time) on one database: "off" has no OTEL_* variable (the default: no provider, no ASGI middleware, no
library instrumentation); "on" sets OTEL_EXPORTER_OTLP_ENDPOINT to a local collector that accepts and
drops the spans (OTLP/HTTP protobuf, the SDK's BatchSpanProcessor, so export is in the measured process)
and OTEL_TRACES_SAMPLER=parentbased_traceidratio with OTEL_TRACES_SAMPLER_ARG 1.0 or 0.01. wrk's requests
carry no traceparent: the ASGI server span is the root, sampled at the ratio, and everything under it
(submit, decision, asyncpg queries) follows it. The load is `nexus bench --suite wrk`'s (`wrk_orders.lua`,
one event per request, each connection its own orders in step order), its machinery reused
(`nexus_lab.bench.wrk`): events/s, p50/p99 from wrk, the gateway's CPU seconds per 1,000 events.

Usage: ``.venv/bin/python benchmarks/tracing_http.py [--rounds 3] [--duration 15] [--warmup 3]
[--connections 16]`` (writes benchmarks/results/tracing_http.json). PostgreSQL: NEXUS_DATABASE_URL (an
admin URL able to CREATE DATABASE), else an embedded pgserver.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import http.server
import json
import os
import statistics
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.bench import create_database, drop_database, start_embedded
from nexus_lab.bench.wrk import lab_script, run_wrk, tree_cpu_s
from nexus_lab.procs import NEXUS_CMD, free_port, wait_http

MODES: dict[str, float | None] = {"off": None, "on 100%": 1.0, "on 1%": 0.01}


class Collector(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP endpoint that answers 200 and drops what it gets (counts requests and bytes)."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        size = int(self.headers.get("content-length", "0"))
        self.rfile.read(size)
        self.server.requests += 1
        self.server.bytes += size
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


def start_gateway(url: str, port: int, ratio: float | None, collector: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {"NEXUS_DATABASE_URL": url, "NEXUS_HTTP_PORT": str(port), "NEXUS_LOG_LEVEL": "WARNING"}
    if ratio is not None:
        env |= {
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector,
            "OTEL_SERVICE_NAME": "nexus-bench",
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": str(ratio),
        }
    proc = subprocess.Popen(
        [*NEXUS_CMD, "serve", "--no-dispatcher"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout=180)  # a loaded machine starts slowly
    except TimeoutError:
        proc.kill()
        proc.wait(30)
        raise
    return proc


async def prepare(admin: str) -> tuple[str, str, str]:
    name = f"bench_trace_http_{uuid.uuid4().hex[:8]}"
    url = await create_database(admin, name, migrate=True)
    db = await Database(Settings(database_url=url, db_pool_size=1)).open(migrate=False)
    try:
        _, key = await create_key(db, "default", frozenset({Role.AGENT}), name="bench")
    finally:
        await db.close()
    return name, url, key


def main(args: argparse.Namespace, admin: str) -> dict[str, Any]:
    name, url, key = asyncio.run(prepare(admin))
    os.environ["NEXUS_API_KEY"] = key  # run_wrk's Authorization header
    collector = Collector()
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{collector.server_address[1]}"
    lua = lab_script("wrk_orders.lua")
    runs: list[dict[str, Any]] = []
    try:
        for r in range(args.rounds):
            order = list(MODES)[r % 3 :] + list(MODES)[: r % 3]
            for mode in order:
                port = free_port()
                before = collector.requests, collector.bytes
                proc = start_gateway(url, port, MODES[mode], endpoint)
                base = f"http://127.0.0.1:{port}"
                try:
                    if args.warmup > 0:
                        run_wrk(base, args.connections, args.warmup, uuid.uuid4().hex[:8], lua)
                    load = os.getloadavg()[0]
                    cpu0 = tree_cpu_s(proc.pid)
                    measured = run_wrk(base, args.connections, args.duration, uuid.uuid4().hex[:8], lua)
                    cpu1 = tree_cpu_s(proc.pid)
                finally:
                    proc.terminate()
                    proc.wait(30)
                seconds = measured["duration_us"] / 1e6
                requests = measured["requests"]
                errors = sum(measured[k] for k in ("connect_errors", "read_errors", "write_errors",
                                                    "status_errors", "timeouts"))  # fmt: skip
                row = {
                    "round": r,
                    "mode": mode,
                    "events_per_s": round(requests / seconds, 1),
                    "p50_ms": round(measured["p50_us"] / 1000, 2),
                    "p99_ms": round(measured["p99_us"] / 1000, 2),
                    "gateway_cpu_s_per_1k": round((cpu1 - cpu0) / requests * 1000, 3) if requests else None,
                    "errors": errors,
                    "otlp_requests": collector.requests - before[0],
                    "otlp_kib": round((collector.bytes - before[1]) / 1024),
                    "load_avg_1m": round(load, 2),
                }
                runs.append(row)
                print(json.dumps(row), flush=True)
    finally:
        collector.shutdown()
        asyncio.run(drop_database(admin, name))
    summary = {}
    base_rate = statistics.median(r["events_per_s"] for r in runs if r["mode"] == "off")
    base_cpu = statistics.median(r["gateway_cpu_s_per_1k"] or 0.0 for r in runs if r["mode"] == "off") or 1.0
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode]
        rate = statistics.median(r["events_per_s"] for r in mine)
        cpu = statistics.median(r["gateway_cpu_s_per_1k"] or 0.0 for r in mine)
        summary[mode] = {
            "median_events_per_s": rate,
            "vs_off": round(rate / base_rate, 2),
            "median_p50_ms": statistics.median(r["p50_ms"] for r in mine),
            "median_p99_ms": statistics.median(r["p99_ms"] for r in mine),
            "median_gateway_cpu_s_per_1k": cpu,
            "cpu_vs_off": round(cpu / base_cpu, 2),
            "rounds_events_per_s": [r["events_per_s"] for r in mine],
        }
        print(f"{mode:8}: {rate:7,.0f} events/s ({rate / base_rate:.2f} of off), gateway CPU {cpu:.3f} s/1k "
              f"({cpu / base_cpu:.2f} of off), rounds {summary[mode]['rounds_events_per_s']}")  # fmt: skip
    return {"runs": runs, "summary": summary}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/tracing_http.json"))
    args = parser.parse_args()
    embedded = None
    admin = os.environ.get("NEXUS_DATABASE_URL")
    if not admin:
        embedded, admin = start_embedded()
    started = dt.datetime.now(dt.UTC)
    load_before = os.getloadavg()
    try:
        result = main(args, admin)
    finally:
        if embedded is not None:
            embedded.close()
    result["meta"] = {
        "date": started.isoformat(timespec="seconds"),
        "command": "benchmarks/tracing_http.py " + " ".join(sys.argv[1:]),
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "cores": os.cpu_count(),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
