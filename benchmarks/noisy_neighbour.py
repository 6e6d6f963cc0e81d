"""The noisy neighbour (issue 34's measure): tenant C's p50, p99 and refusals while tenant A runs each worst
legal pattern at its limits, beside C's baseline in the same run (nexus_lab.bench.noisy says what each
pattern does).

Usage: ``.venv/bin/python benchmarks/noisy_neighbour.py [--seconds 20] [--patterns waits,batches,...]
[--json FILE] [--gateway-env NAME=VALUE ...] [--probes] [--a-nice 0,10]`` (`--gateway-env` sets one of the
gateway's settings, to compare them; `--a-nice` runs each pattern once per niceness of A's generator, 0 its
default; `--probes` adds where C's time goes: the loop's lag, PostgreSQL's backends by state, CPU, see
nexus_lab.bench.noisy_probes). PostgreSQL: NEXUS_DATABASE_URL (an admin URL able to CREATE DATABASE), else an
embedded pgserver. Prints a line per phase as it ends, then the table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import uuid
from pathlib import Path

from nexus_lab.bench import create_database, drop_database, start_embedded
from nexus_lab.bench.noisy import PATTERNS, make_keys, run_phases, start_gateway, table
from nexus_lab.bench.noisy_probes import Probes


async def main(args: argparse.Namespace, admin: str) -> None:
    name = f"bench_noisy_{uuid.uuid4().hex[:8]}"
    url = await create_database(admin, name, migrate=True)
    a_keys, c_key = await make_keys(url)
    proc, base = start_gateway(url, dict(pair.split("=", 1) for pair in args.gateway_env))
    try:
        assert proc.proc is not None
        probes = Probes(base, url, proc.proc.pid) if args.probes else None
        a_nice = [int(n) for n in args.a_nice.split(",")]
        patterns = args.patterns.split(",")
        rows = await run_phases(base, a_keys, c_key, patterns, args.seconds, probes=probes, a_nice=a_nice)
    finally:
        proc.stop(15.0)
        await drop_database(admin, name)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(  # noqa: ASYNC240 - once, after the run
            json.dumps(
                {"machine": platform.uname()._asdict(), "cpus": os.cpu_count(), "seconds": args.seconds, "rows": rows},
                indent=2,
            )
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0, help="each phase's length")
    parser.add_argument("--patterns", default=",".join(PATTERNS))
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--gateway-env", action="append", default=[], metavar="NAME=VALUE", help="a setting of the gateway (repeatable)"
    )
    parser.add_argument("--probes", action="store_true", help="where C's time goes (loop lag, backends, CPU)")
    parser.add_argument(
        "--a-nice", default="0", help="A's generator under `nice -n N`: each pattern once per N of this list (0,10)"
    )
    arguments = parser.parse_args()
    admin_url = os.environ.get("NEXUS_DATABASE_URL") or None
    if admin_url is None:
        embedded, admin_url = start_embedded()
        try:
            asyncio.run(main(arguments, admin_url))
        finally:
            embedded.close()
    else:
        asyncio.run(main(arguments, admin_url))
