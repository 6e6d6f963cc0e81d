"""Two tenants both saturating one gateway: their events/s together, beside one tenant alone, for settings compared
side by side (issue 34: what a fairness setting costs when nobody is a noisy neighbour, only two busy ones).

For each variant (a set of the gateway's settings), alternating, `--rounds` times: a fresh `nexus serve
--no-dispatcher` process on a fresh database, a warm-up, then one tenant alone (wrk, `--connections` connections,
`wrk_orders.lua` as `nexus bench --suite wrk` runs it) and two tenants at once (two wrk processes, half the
connections each, one key of its own tenant each), `--seconds` each. Reported per run: events/s and the gateway's
CPU seconds per 1,000 events, and the medians per variant.

Usage: ``.venv/bin/python benchmarks/two_busy_tenants.py [--variant NAME=K=V,K=V ...] [--rounds 2] [--seconds 10]
[--connections 64] [--json FILE]``, e.g. ``--variant turn1=NEXUS_HTTP_HEADS_PER_TURN=1 --variant
turn8=NEXUS_HTTP_HEADS_PER_TURN=8``. PostgreSQL: NEXUS_DATABASE_URL (an admin URL able to CREATE DATABASE), else
an embedded pgserver.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from nexus_lab.bench import create_database, drop_database, start_embedded
from nexus_lab.bench.noisy import make_keys, start_gateway
from nexus_lab.bench.wrk import lab_script, run_wrk, tree_cpu_s


def wrk(base: str, key: str, connections: int, seconds: float, script: Path) -> float:
    """One wrk run of `wrk_orders.lua` with `key`: the requests it had answered per second."""
    summary = run_wrk(base, connections, seconds, uuid.uuid4().hex[:8], script, authorization=f"Bearer {key}")
    return float(summary["requests"]) / (summary["duration_us"] / 1e6)


def measure(base: str, pid: int, runs: list[tuple[str, int]], seconds: float, script: Path) -> dict[str, float]:
    """wrk runs at once (a key and its connections each): their events/s together and the gateway's CPU per 1,000."""
    before = tree_cpu_s(pid)
    with ThreadPoolExecutor(len(runs)) as pool:
        rates = list(pool.map(lambda run: wrk(base, run[0], run[1], seconds, script), runs))
    cpu = tree_cpu_s(pid) - before
    total = sum(rates)
    return {"events_per_s": round(total), "cpu_s_per_1k": round(cpu / max(1.0, total * seconds) * 1000, 3)}


def one_variant(admin: str, env: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    """A fresh database and gateway with `env`: one tenant alone, then two at once."""
    name = f"bench_two_{uuid.uuid4().hex[:8]}"
    url = asyncio.run(create_database(admin, name, migrate=True))
    a_keys, c_key = asyncio.run(make_keys(url))
    proc, base = start_gateway(url, env)
    script = lab_script("wrk_orders.lua")
    try:
        assert proc.proc is not None
        pid, half = proc.proc.pid, args.connections // 2
        measure(base, pid, [(a_keys[0], args.connections)], 3, script)  # warm-up
        alone = measure(base, pid, [(a_keys[0], args.connections)], args.seconds, script)
        both = measure(base, pid, [(a_keys[0], half), (c_key, half)], args.seconds, script)
    finally:
        proc.stop(15.0)
        asyncio.run(drop_database(admin, name))
    return {"alone": alone, "two": both}


def main(args: argparse.Namespace, admin: str) -> None:
    variants = {name: dict(kv.split("=", 1) for kv in spec.split(",") if kv) for name, spec in
                (v.split("=", 1) for v in args.variant)} or {"default": {}}  # fmt: skip
    rows: list[dict[str, Any]] = []
    for round_ in range(1, args.rounds + 1):
        for name, env in variants.items():
            result = one_variant(admin, env, args)
            rows.append({"variant": name, "round": round_, **result})
            print(f"{name} {round_}: alone {result['alone']}, two tenants {result['two']}", flush=True)
    print("| variant | alone events/s (median) | two tenants events/s (median) | two tenants CPU s / 1,000 (median) |")
    print("|---|---:|---:|---:|")
    for name in variants:
        mine = [r for r in rows if r["variant"] == name]
        alone = statistics.median(r["alone"]["events_per_s"] for r in mine)
        two = statistics.median(r["two"]["events_per_s"] for r in mine)
        cpu = round(statistics.median(r["two"]["cpu_s_per_1k"] for r in mine), 3)
        print(f"| {name} | {alone:,.0f} | {two:,.0f} | {cpu} |")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"cpus": os.cpu_count(), "seconds": args.seconds, "rows": rows}, indent=2)
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=K=V,K=V")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--json", default=None)
    arguments = parser.parse_args()
    admin_url = os.environ.get("NEXUS_DATABASE_URL") or None
    if admin_url is None:
        embedded, admin_url = start_embedded()
        try:
            main(arguments, admin_url)
        finally:
            embedded.close()
    else:
        main(arguments, admin_url)
