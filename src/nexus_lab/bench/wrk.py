"""`nexus bench --suite wrk`: the HTTP ingress under wrk, with its CPU cost, beside pgbench's per-event floor.

Python load generators saturate before the gateway does on two cores; wrk (C, epoll) does not. For each
connection count: a warm-up (`--warmup`, 3 s) then the measured run (`--duration`, 15 s) of
`wrk_orders.lua` (each connection publishes its own orders' five steps in order, one event per request),
then pgbench running `pgbench_floor.sql` (the naive per-event transaction: advisory lock, select, upsert,
outbox insert) with as many clients for as long, on the same PostgreSQL. Reported: events/s, p50/p99
(wrk's latency distribution), and CPU seconds per 1,000 events of the gateway's process tree and of
PostgreSQL (utime + stime from /proc, before and after each measured run), and the ratio to the floor.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import asyncpg

from nexus.core import definitions
from nexus.processes import shipped
from nexus_client import ClientConfig
from nexus_lab.bench.external import Skipped
from nexus_lab.tables import text_table

Row = dict[str, Any]
_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()  # fields from the 3rd (state) on: the name may hold spaces


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) of `root` and every live descendant, plus what `root` reaped
    (cutime + cstime: PostgreSQL's backends that ended, the gateway's finished children)."""
    tree = _children()
    total = 0.0
    pids = [root]
    for pid in pids:  # breadth first: each live process adds its children to the list being read
        fields = _stat(pid)
        if fields is None:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
        if pid == root:
            total += int(fields[13]) + int(fields[14])  # cutime, cstime
        pids.extend(tree.get(pid, []))
    return total / _TICKS


async def postmaster_pid(url: str) -> int:
    """The PostgreSQL server's main process: the parent of our own backend."""
    conn = await asyncpg.connect(url)
    try:
        fields = _stat(int(await conn.fetchval("SELECT pg_backend_pid()")))  # while the backend lives
    finally:
        await conn.close()
    if fields is None:
        raise Skipped("PostgreSQL runs on another machine: its CPU cannot be read from /proc")
    return int(fields[1])


async def applied_events(url: str, run_id: str) -> int:
    """Notifications written for a run's orders: one per applied step (a request answered DUPLICATE or
    dead-lettered writes none), so it tells whether every request was an applied event."""
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM outbox WHERE order_id LIKE $1", f"wrk-{run_id}-%"))
    finally:
        await conn.close()


def lab_script(name: str) -> Path:
    """A file shipped beside this module (a wrk Lua script, pgbench's SQL) copied to a temporary directory, for
    a tool that wants a path."""
    path = Path(tempfile.mkdtemp(prefix="nexus-wrk-")) / name
    path.write_text(resources.files("nexus_lab.bench").joinpath(name).read_text(encoding="utf-8"))
    return path


ORDER_STEPS = definitions.main_plan(shipped("order"))
"""The steps each wrk connection sends per order, in order (wrk_orders.lua's third argument)."""


def run_wrk(
    base: str,
    connections: int,
    seconds: float,
    run_id: str,
    script: Path,
    mode: str = "events",
    authorization: str | None = None,
) -> dict[str, Any]:
    """One wrk run of `wrk_orders.lua` in `mode` (events, rest or mcp); its `done()` prints one JSON line, read here.
    `authorization`: the header's value (by default the client's, from NEXUS_API_KEY)."""
    if authorization is None:
        authorization = ClientConfig.from_env().headers().get("authorization", "")
    command = ["wrk", "-t", str(connections), "-c", str(connections), "-d", f"{max(1, round(seconds))}s",
               "--timeout", "10s", "-s", str(script), base, "--", run_id, authorization,
               ",".join(ORDER_STEPS), mode]  # fmt: skip
    out = subprocess.run(  # noqa: S603 - wrk with our own script and arguments
        command, capture_output=True, text=True, timeout=seconds + 60, check=True
    ).stdout
    match = re.search(r"^NEXUS_WRK (\{.*\})$", out, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"wrk printed no summary:\n{out[-2000:]}")
    result: dict[str, Any] = json.loads(match.group(1))
    return result


def run_pgbench(url: str, clients: int, seconds: float, script: Path) -> float:
    """Transactions per second of the floor script; pgbench is PostgreSQL's own (pgserver ships it)."""
    binary = _pgbench()
    command = [binary, "--no-vacuum", "-M", "prepared", "-c", str(clients), "-j", str(min(clients, 2)),
               "-T", str(max(1, round(seconds))), "-D", "k=-1", "-D", f"run={uuid.uuid4().hex[:8]}",
               "-f", str(script), url]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)  # noqa: S603 - pgbench, ours
    match = re.search(r"^tps = ([0-9.]+)", out.stdout, re.MULTILINE)
    if out.returncode != 0 or match is None:
        raise RuntimeError(f"pgbench failed ({out.returncode}): {(out.stderr or out.stdout)[-1000:]}")
    return float(match.group(1))


def _pgbench() -> str:
    try:
        import pgserver

        bundled = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pgbench"
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    found = shutil.which("pgbench")
    if found is None:
        raise Skipped("pgbench not found (it ships with pgserver and PostgreSQL's client packages)")
    return found


async def bench_wrk(
    url: str,
    base: str,
    gateway_pid: int | None,
    connections: Sequence[int],
    duration_s: float,
    warmup_s: float,
    add: Callable[[Row], None],
) -> list[Row]:
    """The wrk rows (one per connection count), each with its floor; `add` reports each as it is done."""
    if shutil.which("wrk") is None:
        raise Skipped("wrk not installed (make bench installs it: apt-get install -y wrk)")
    lua, floor_sql = lab_script("wrk_orders.lua"), lab_script("pgbench_floor.sql")
    postgres = await postmaster_pid(url)
    rows = []
    for conc in connections:
        if warmup_s > 0:
            run_wrk(base, conc, warmup_s, uuid.uuid4().hex[:8], lua)
        gw0, pg0 = tree_cpu_s(gateway_pid) if gateway_pid else 0.0, tree_cpu_s(postgres)
        run_id = uuid.uuid4().hex[:8]
        measured = run_wrk(base, conc, duration_s, run_id, lua)
        gw1, pg1 = tree_cpu_s(gateway_pid) if gateway_pid else 0.0, tree_cpu_s(postgres)
        measured["applied"] = await applied_events(url, run_id)
        pg2 = tree_cpu_s(postgres)
        started = time.perf_counter()
        floor_tps = run_pgbench(url, conc, duration_s, floor_sql)
        floor_s = time.perf_counter() - started
        pg3 = tree_cpu_s(postgres)
        rows.append(add_row(conc, measured, gw1 - gw0 if gateway_pid else None, pg1 - pg0, floor_tps,
                            (pg3 - pg2) / max(1.0, floor_tps * floor_s) * 1000, add))  # fmt: skip
    return rows


def add_row(
    conc: int,
    measured: dict[str, Any],
    gateway_cpu_s: float | None,
    postgres_cpu_s: float,
    floor_tps: float,
    floor_pg_cpu_per_1k: float,
    add: Callable[[Row], None],
) -> Row:
    seconds = measured["duration_us"] / 1e6
    requests = measured["requests"]
    rate = requests / seconds if seconds else 0.0
    errors = sum(measured[k] for k in ("connect_errors", "read_errors", "write_errors", "status_errors", "timeouts"))
    per_1k = 1000.0 / requests if requests else 0.0
    r: Row = {
        "suite": "wrk",
        "scenario": "HTTP under wrk, 1 event/request",
        "concurrency": conc,
        "events": requests,
        "seconds": round(seconds, 3),
        "events_per_s": round(rate, 1),
        "p50_ms": round(measured["p50_us"] / 1000, 2),
        "p95_ms": None,
        "p99_ms": round(measured["p99_us"] / 1000, 2),
        "latency_of": "request",
        "errors": errors,
        "applied": measured.get("applied"),
        "cpu_s_per_1k_events": {
            "gateway": round(gateway_cpu_s * per_1k, 3) if gateway_cpu_s is not None else None,
            "postgres": round(postgres_cpu_s * per_1k, 3),
        },
        "floor": {
            "tool": "pgbench (advisory lock, select, upsert, outbox insert; 1 tx/event)",
            "events_per_s": round(floor_tps, 1),
            "postgres_cpu_s_per_1k_events": round(floor_pg_cpu_per_1k, 3),
        },
        "ratio_to_floor": round(rate / floor_tps, 2) if floor_tps else None,
    }
    add(r)
    return r


def wrk_table(rows: Sequence[Row]) -> str:
    """The wrk rows as a text table."""

    def num(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    header = ["conns", "events/s", "p50 ms", "p99 ms", "errors", "applied", "gateway cpu s/1k", "postgres cpu s/1k",
              "floor events/s", "floor pg cpu s/1k", "x floor"]  # fmt: skip
    body = [
        [
            r["concurrency"],
            num(r["events_per_s"], ",.0f"),
            num(r["p50_ms"], ".2f"),
            num(r["p99_ms"], ".2f"),
            r["errors"],
            r["applied"] if r["applied"] is not None else "-",
            num(r["cpu_s_per_1k_events"]["gateway"], ".3f"),
            num(r["cpu_s_per_1k_events"]["postgres"], ".3f"),
            num(r["floor"]["events_per_s"], ",.0f"),
            num(r["floor"]["postgres_cpu_s_per_1k_events"], ".3f"),
            num(r["ratio_to_floor"], ".2f"),
        ]
        for r in rows
    ]
    return text_table("HTTP under wrk (one event per request) beside the pgbench floor, same run", header, body)
