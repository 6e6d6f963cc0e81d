"""Two builds' gateways side by side under wrk, measured in short alternating slices (one tenant alone).

`wrk_interleaved.py` runs each build's whole `nexus bench --suite wrk` in turn (about 35 s each, a fresh
PostgreSQL each): the machine's own drift over a minute (another virtual machine's load on the host) lands on
one build more than the other, and pairs of the same code disagree by 30 %. Here both gateways run at once,
each on its own database of one embedded PostgreSQL, and wrk drives one of them at a time for a few seconds:
base then tree in odd rounds, tree then base in even ones, so a drift slower than a round lands on both. Each
slice records events/s and the CPU seconds per 1,000 events of the driven gateway's process and of
PostgreSQL (utime + stime from /proc; the idle gateway's own CPU is recorded too). The summary: each build's
medians, and the tree's ratio to the base per round, their median and a 90 % bootstrap interval of it.

Each gateway process has its own luck (hash seeds, memory layout, the core it runs on): two runs of the same two
builds once disagreed by 6 %, well beyond one run's interval (benchmarks/RESULTS.md, "Round 25"). `--sessions K`
starts both gateways again on fresh databases K times, `--rounds` each, so the rounds pooled sample that too.

    python benchmarks/wrk_alternating.py --base /work/wt/base --sessions 6 --rounds 8 --seconds 3 --out /tmp/alt

The base is another checkout, run with its own venv if it has one (as in `wrk_interleaved.py`), else with this
venv and its `src` first on the path, as the tree is (`--tree`, this checkout by default). Each gateway migrates
its own database; `--base-env`/`--tree-env NAME=VALUE` set a gateway's settings and `--base-sql`/`--tree-sql` run
SQL on its database once migrated (e.g. a mechanism turned off, or the same build both sides for an A/A control).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from nexus.auth.keys import generate_key
from nexus_lab.bench import admin_postgres, with_database
from nexus_lab.bench.scenarios import UNLIMITED_KEY
from nexus_lab.bench.wrk import lab_script, postmaster_pid, run_wrk, tree_cpu_s
from nexus_lab.procs import Proc, free_port, wait_http

TREE = Path(__file__).resolve().parents[1]
FIGURES = ("events_per_s", "gateway", "postgres")

# Run by each build's own interpreter: its migrations and the bench's key in its database.
_PREPARE = """
import asyncio, sys
import asyncpg
from nexus.store.migrate import apply_migrations
from nexus_lab.chaos.harness import register_lab_key

async def main(url, sql):
    admin = await asyncpg.connect(sys.argv[2])
    try:
        await admin.execute("CREATE DATABASE " + sys.argv[3])
    finally:
        await admin.close()
    conn = await asyncpg.connect(url)
    try:
        await apply_migrations(conn)
        await register_lab_key(conn)
        if sql:
            await conn.execute(sql)
    finally:
        await conn.close()

asyncio.run(main(sys.argv[1], sys.argv[4]))
"""


class Build:
    """One build's gateway: its interpreter and path, its database and port, its process once started."""

    def __init__(self, name: str, checkout: Path, settings: list[str], sql: str, admin_url: str, workdir: Path) -> None:
        self.name = name
        self.sql = sql
        self.env = {**UNLIMITED_KEY, **os.environ, "NEXUS_LOG_LEVEL": "WARNING"}
        self.env.pop("PYTHONPATH", None)
        own = checkout / ".venv" / "bin" / "python"
        if own.exists() and checkout.resolve() != TREE:  # its own venv
            self.python = own
        else:  # this venv, the checkout's src first
            self.python = Path(sys.executable)
            self.env["PYTHONPATH"] = str(checkout / "src")
        self.env.update(setting.split("=", 1) for setting in settings)  # type: ignore[misc]  # NAME=VALUE pairs
        self.database = f"nexus_alt_{name}_{uuid.uuid4().hex[:6]}"
        self.url = with_database(admin_url, self.database)
        self.port = free_port()
        self.log = workdir / f"{name}.log"
        self.proc: Proc | None = None

    def start(self, admin_url: str) -> None:
        subprocess.run(
            [str(self.python), "-c", _PREPARE, self.url, admin_url, self.database, self.sql], env=self.env, check=True
        )
        env = {**self.env, "NEXUS_DATABASE_URL": self.url, "NEXUS_HTTP_PORT": str(self.port)}
        self.proc = Proc(f"{self.name} serve", [str(self.python), "-m", "nexus_cli", "serve", "--no-dispatcher"],
                         env, self.log).start()  # fmt: skip
        wait_http(f"{self.base}/healthz", timeout=120, proc=self.proc)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None and self.proc.proc is not None
        return self.proc.proc.pid

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()


def slice_of(build: Build, other: Build, postgres: int, seconds: float, connections: int, lua: Path) -> dict[str, Any]:
    """One slice: wrk on `build` for `seconds`; its events/s and CPU per 1,000 events (and the idle one's CPU)."""
    gw0, idle0, pg0 = tree_cpu_s(build.pid), tree_cpu_s(other.pid), tree_cpu_s(postgres)
    measured = run_wrk(build.base, connections, seconds, uuid.uuid4().hex[:8], lua)
    gw1, idle1, pg1 = tree_cpu_s(build.pid), tree_cpu_s(other.pid), tree_cpu_s(postgres)
    requests = measured["requests"]
    per_1k = 1000.0 / requests if requests else float("nan")
    errors = sum(measured[k] for k in ("connect_errors", "read_errors", "write_errors", "status_errors", "timeouts"))
    return {
        "events": requests,
        "events_per_s": round(requests / (measured["duration_us"] / 1e6), 1),
        "gateway": round((gw1 - gw0) * per_1k, 4),
        "postgres": round((pg1 - pg0) * per_1k, 4),
        "idle_gateway_cpu_s": round(idle1 - idle0, 3),
        "p50_ms": measured["p50_us"] / 1000,
        "p99_ms": measured["p99_us"] / 1000,
        "errors": errors,
        "load_avg": os.getloadavg()[0],
    }


def interval(ratios: list[float], rng: random.Random, draws: int = 2000) -> tuple[float, float]:
    """A 90 % bootstrap interval of the median of `ratios`."""
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return medians[int(0.05 * draws)], medians[int(0.95 * draws) - 1]


def summary(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Each build's medians and the tree's ratio to the base per round: median and 90 % interval."""
    rng = random.Random(0)
    out: dict[str, Any] = {"medians": {}, "tree_over_base": {}}
    for build in ("base", "tree"):
        out["medians"][build] = {f: statistics.median(r[build][f] for r in rounds) for f in FIGURES}
    for figure in FIGURES:
        ratios = [r["tree"][figure] / r["base"][figure] for r in rounds if r["base"][figure]]
        low, high = interval(ratios, rng)
        out["tree_over_base"][figure] = {
            "median": round(statistics.median(ratios), 3),
            "interval_90": [round(low, 3), round(high, 3)],
            "pairs": [round(x, 3) for x in ratios],
        }
    return out


def run_session(args: argparse.Namespace, admin_url: str, lua: Path, session: int) -> list[dict[str, dict[str, Any]]]:
    """One session: both gateways started on fresh databases, warmed up, then `args.rounds` alternating rounds."""
    base = Build(f"base{session}", args.base, args.base_env, args.base_sql, admin_url, args.out)
    tree = Build(f"tree{session}", args.tree, args.tree_env, args.tree_sql, admin_url, args.out)
    rounds: list[dict[str, dict[str, Any]]] = []
    try:
        for build in (base, tree):
            build.start(admin_url)
        postgres = asyncio.run(postmaster_pid(admin_url))
        for build, other in ((base, tree), (tree, base)):  # warm-up: each build's caches, plans and pools
            slice_of(build, other, postgres, args.warmup, args.connections, lua)
        for n in range(1, args.rounds + 1):
            order = ((base, tree), (tree, base)) if n % 2 else ((tree, base), (base, tree))
            row = {
                ("base" if build is base else "tree"): slice_of(
                    build, other, postgres, args.seconds, args.connections, lua
                )
                for build, other in order
            }
            rounds.append(row)
            ratio = row["tree"]["events_per_s"] / row["base"]["events_per_s"]
            print(f"session {session} round {n}/{args.rounds}: base {row['base']['events_per_s']:,.0f}/s "
                  f"{row['base']['gateway']:.3f} s/1k, tree {row['tree']['events_per_s']:,.0f}/s "
                  f"{row['tree']['gateway']:.3f} s/1k; events/s ratio {ratio:.3f}", flush=True)  # fmt: skip
    finally:
        for build in (base, tree):
            build.stop()
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, required=True, help="the base checkout (with its own .venv)")
    parser.add_argument("--tree", type=Path, default=TREE, help="this build's checkout (its src, this venv)")
    parser.add_argument("--base-env", action="append", default=[], help="NAME=VALUE for the base's gateway")
    parser.add_argument("--tree-env", action="append", default=[], help="NAME=VALUE for the tree's gateway")
    parser.add_argument("--base-sql", default="", help="SQL run on the base's database once migrated")
    parser.add_argument("--tree-sql", default="", help="SQL run on the tree's database once migrated")
    parser.add_argument("--rounds", type=int, default=20, help="rounds per session")
    parser.add_argument(
        "--sessions",
        type=int,
        default=1,
        help="each with fresh gateways and databases: the processes' own luck sampled",
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="each slice's wrk run")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--out", type=Path, default=TREE / "benchmarks" / "results" / "wrk-alternating")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("NEXUS_API_KEY", generate_key())  # one key, registered in both databases
    lua = lab_script("wrk_orders.lua")
    rounds: list[dict[str, dict[str, Any]]] = []
    with admin_postgres() as admin_url:
        for session in range(1, args.sessions + 1):
            rounds += run_session(args, admin_url, lua, session)
    result = {"args": {k: str(v) for k, v in vars(args).items()}, "rounds": rounds, **summary(rounds)}
    (args.out / "alternating.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("medians", "tree_over_base")}, indent=2))


if __name__ == "__main__":
    main()
