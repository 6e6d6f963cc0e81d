"""The noisy neighbour: tenant C's latency and refusals while tenant A runs its worst legal patterns.

One `nexus serve --no-dispatcher` process (default limits) on a fresh database. Tenant `initech` (C) runs a
light steady load the whole time from a process of its own (`nexus_lab.bench.noisy_tenant_c`: two agents, each
a plan, its five numbered steps, a read, 50 ms apart); tenant `acme` (A) runs, one after another, each worst
legal pattern at its limits, from a child process so that A's client does not take C's client's CPU. All run on
the gateway's cores; `a_nice` also runs each pattern with A's generator under `nice -n N` (an attacker's
generator runs on a machine of its own, not on the gateway's cores):

- ``waits``: every key it holds (70) opens every wait a key may hold (16 long polls), drops them after a
  second and reopens them (the per-tenant share of waits, 64, admits some; the rest are refused at once).
  Generator: wrk (native), one run of one second after another, 1,120 connections each sending one long poll
  (`WAITS_LUA`); a run's end closes every connection under its wait;
- ``batches``: 1,000-envelope batches of new orders, from two loops (A's tenant rate counts envelopes).
  Generator: httpx, two asyncio loops posting prepared bodies (the client's cost is building the JSON);
- ``plans``: a `POST /v1/plans` flood (each request a new plan that never gets a step). Generator: wrk, 32
  connections;
- ``rejected``: a 1,000-item step that its process rejects, sent again and again from eight loops. Generator:
  httpx, as batches;
- ``sockets``: idle and half-open connections (1,500 of each), held for the phase. Generator: asyncio streams
  (the sockets are opened once; nothing is sent after).

Reported per phase: C's requests, p50 and p99 (ms) and its refusals (429, 5xx or a transport error),
beside the same run's baseline phase (A idle), and where C's slowest requests spent their time (the gateway or
C's own client: `nexus_lab.bench.noisy_tenant_c`). A request counts in the phase it started in, answered however
late (a request still waiting when the phase ends is not dropped). The target: C's p99 within 2x of its
baseline, C never refused. `benchmarks/noisy_neighbour.py` runs it and prints the table; the short test
asserts only that C is never refused.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.bench.noisy_probes import Probes
from nexus_lab.bench.noisy_tenant_c import STEPS, TenantCProcess, step_data
from nexus_lab.procs import NEXUS_CMD, Proc, free_port, wait_http

PATTERNS = ("waits", "batches", "plans", "rejected", "sockets")
A_KEYS = 70
WAITS_PER_KEY = 16


# --- A's patterns (run in a child process: `python -m nexus_lab.bench.noisy --pattern P ...`) -----------


WAITS_LUA = """
local keys = {}
local counter = 0
local first = 0
local delays = 0
function init(args)
  first = tonumber(args[1])
  for i = 2, #args do keys[i - 1] = args[i] end
end
function request()
  counter = counter + 1
  local headers = {Authorization = "Bearer " .. keys[(counter - 1) % #keys + 1]}
  return wrk.format("GET", "/v1/orders/a-wait?wait=60&after_seq=5", headers)
end
function delay()
  delays = delays + 1
  if delays <= first then return 0 end
  return 60000
end
"""
"""Each connection's one long poll (a key per connection in turn, so each key holds its share): wrk asks `delay`
before every request, the first included, so the thread's first `args[1]` requests (one per connection) go at
once and any later one (after a refusal) waits past the run's end, when wrk closes the connection."""


def pattern_waits(base: str, keys: Sequence[str], seconds: float) -> None:
    """Every key's every wait (`A_KEYS` x `WAITS_PER_KEY` connections, one long poll each) from wrk runs of one
    second: each run's end closes every connection under its wait (the client goes), the next reopens them."""
    script = Path(tempfile.mkdtemp(prefix="nexus-noisy-")) / "waits.lua"
    script.write_text(WAITS_LUA)
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        connections = len(keys) * WAITS_PER_KEY
        command = ["wrk", "-t", "2", "-c", str(connections), "-d", "1s", "--timeout", "60s", "-s", str(script),
                   base, "--", str(connections // 2), *keys]  # fmt: skip
        subprocess.run(command, capture_output=True, timeout=60, check=False)  # noqa: S603 - our own wrk run


def _batch(size: int) -> bytes:
    envelopes = [{"event_id": str(uuid.uuid4()), "event_type": STEPS[0], "plan_id": "p",
                  "order_id": f"a-{uuid.uuid4().hex[:12]}", "seq_id": 1, "timestamp": "2026-01-01T00:00:00Z",
                  "data": step_data(STEPS[0])} for _ in range(size)]  # fmt: skip
    return json.dumps(envelopes).encode()


async def _loop_posts(base: str, key: str, until: float, loops: int, body: Any, envelopes: int) -> int:
    """`body()` posted to /v1/events from `loops` loops until `until`; how many envelopes were decided (each
    answer neither refused nor failed holds `envelopes`)."""
    decided = 0

    async def one() -> None:
        nonlocal decided
        async with httpx.AsyncClient(
            base_url=base, timeout=60, headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        ) as api:
            while time.monotonic() < until:
                with contextlib.suppress(httpx.HTTPError):
                    answer = await api.post("/v1/events", content=body())
                    if answer.status_code == 429:
                        await asyncio.sleep(float(answer.headers.get("Retry-After", "0.1")))
                    elif answer.status_code < 500:
                        decided += envelopes

    await asyncio.gather(*(one() for _ in range(loops)))
    return decided


async def pattern_batches(base: str, keys: Sequence[str], until: float) -> int:
    return await _loop_posts(base, keys[0], until, 2, lambda: _batch(1000), 1000)


async def pattern_rejected(base: str, keys: Sequence[str], until: float) -> int:
    items = [{"product_id": f"p{i}", "quantity": 1, "unit_price": 1} for i in range(1000)]

    def body() -> bytes:
        envelope = {
            "event_id": str(uuid.uuid4()),
            "event_type": STEPS[0],
            "plan_id": "p",
            "order_id": f"a-rej-{uuid.uuid4().hex[:12]}",
            "seq_id": 1,
            "timestamp": "2026-01-01T00:00:00Z",
            "data": {"items": items, "total_amount": 1},
        }  # fmt: skip  (the total is wrong: REJECTED)
        return json.dumps(envelope).encode()

    return await _loop_posts(base, keys[0], until, 8, body, 1)


async def pattern_sockets(base: str, keys: Sequence[str], until: float) -> None:
    host, port = base.removeprefix("http://").split(":")
    held: list[asyncio.StreamWriter] = []
    for i in range(3000):
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection(host, int(port))
            if i % 2:
                writer.write(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 100")  # never finished
            held.append(writer)
    await asyncio.sleep(max(0.0, until - time.monotonic()))
    for writer in held:
        writer.close()


PLAN_FLOOD_LUA = """
local counter = 0
local run = "0"
function setup(thread) thread:set("tid", tostring(math.random(1, 1000000000))) end
function init(args)
  run = args[1]
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = args[2]
end
function request()
  counter = counter + 1
  local body = string.format('{"order_id":"flood-%s-%s-%d","process":"order"}', run, tid, counter)
  return wrk.format(nil, "/v1/plans", nil, body)
end
"""


def pattern_plans(base: str, keys: Sequence[str], seconds: float) -> None:
    script = Path(tempfile.mkdtemp(prefix="nexus-noisy-")) / "plans.lua"
    script.write_text(PLAN_FLOOD_LUA)
    command = ["wrk", "-t", "2", "-c", "32", "-d", f"{max(1, round(seconds))}s", "-s", str(script), base,
               "--", uuid.uuid4().hex[:8], f"Bearer {keys[0]}"]  # fmt: skip
    subprocess.run(command, capture_output=True, timeout=seconds + 60, check=False)  # noqa: S603 - our own wrk run


def run_pattern(name: str, base: str, keys: Sequence[str], seconds: float) -> int | None:
    """A's pattern `name` against `base` for `seconds` (the child process's job): how many of A's envelopes
    were decided, for the patterns that post envelopes."""
    if name in ("plans", "waits"):
        (pattern_plans if name == "plans" else pattern_waits)(base, keys, seconds)
        return None
    runner = {"batches": pattern_batches, "rejected": pattern_rejected, "sockets": pattern_sockets}[name]
    result: int | None = asyncio.run(runner(base, keys, time.monotonic() + seconds))
    return result


# --- the run --------------------------------------------------------------------------------------------


async def make_keys(url: str) -> tuple[list[str], str]:
    """A's 70 agent keys and C's one, made in the bench database."""
    db = await Database(Settings(database_url=url)).open(migrate=False)
    try:
        a = [(await create_key(db, "acme", frozenset({Role.AGENT}), name=f"a{i}"))[1] for i in range(A_KEYS)]
        c = (await create_key(db, "initech", frozenset({Role.AGENT}), name="c"))[1]
    finally:
        await db.close()
    return a, c


def start_gateway(url: str, extra_env: dict[str, str] | None = None) -> tuple[Proc, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(NEXUS_DATABASE_URL=url, NEXUS_HTTP_PORT=str(port), NEXUS_LOG_LEVEL="WARNING", **(extra_env or {}))
    log_path = Path(tempfile.mkdtemp(prefix="nexus-noisy-")) / "serve.log"
    proc = Proc("serve", [*NEXUS_CMD, "serve", "--no-dispatcher"], env, log_path).start()
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/healthz", proc=proc)
    return proc, base


async def _pattern(base: str, keys_file: Path, phase: str, seconds: float, nice: int) -> asyncio.subprocess.Process:
    """A's pattern `phase` in a child process (under `nice -n nice` unless 0: its generator too), returned once
    it says it is starting (imports done)."""
    niced = ("nice", "-n", str(nice)) if nice else ()
    child = await asyncio.create_subprocess_exec(
        *niced, sys.executable, "-m", "nexus_lab.bench.noisy", "--pattern", phase, "--base", base,
        "--keys-file", str(keys_file), "--seconds", str(seconds), stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert child.stdout is not None
    async with asyncio.timeout(60):
        await child.stdout.readline()  # "ready"
    return child


async def _ended(child: asyncio.subprocess.Process) -> int | None:
    """Once the child has ended: how many of A's envelopes it says were decided (None if it does not say)."""
    assert child.stdout is not None
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(90):  # A's last requests, each within its client's 60 s
            said = await child.stdout.read()
            await child.wait()
            lines = [line.split()[1] for line in said.decode().splitlines() if line.startswith("decided ")]
            return int(lines[0]) if lines else None
    child.kill()
    await child.wait()
    return None


def phases(patterns: Sequence[str], a_nice: Sequence[int]) -> list[tuple[str, str | None, int]]:
    """(the row's name, A's pattern or None for the baseline, A's niceness): each pattern once per niceness,
    a niceness other than 0 named in the row (`waits (nice 10)`)."""
    return [("baseline", None, 0)] + [
        (pattern if nice == 0 else f"{pattern} (nice {nice})", pattern, nice) for pattern in patterns for nice in a_nice
    ]


async def run_phases(
    base: str, a_keys: Sequence[str], c_key: str, patterns: Sequence[str], seconds: float,
    progress: Any = print, probes: Probes | None = None, a_nice: Sequence[int] = (0,),
) -> list[dict[str, Any]]:  # fmt: skip
    """C's load (a process of its own: `nexus_lab.bench.noisy_tenant_c`) through a baseline phase and one phase
    per A pattern and niceness of A's generator (A from a child process each); a row per phase (with `probes`,
    each row has their figures too: `nexus_lab.bench.noisy_probes`)."""
    c = TenantCProcess(base, c_key)
    keys_file = Path(tempfile.mkdtemp(prefix="nexus-noisy-")) / "keys.json"
    keys_file.write_text(json.dumps(list(a_keys)))
    rows = []
    try:
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {a_keys[0]}"}) as api:
            await api.post("/v1/plans", json={"order_id": "a-wait", "process": "order"})  # the order A waits on
            await api.post("/v1/orders/a-wait/steps", json={"step": STEPS[0], "data": step_data(STEPS[0])})
        await c.start()
        await asyncio.sleep(1.0)  # warm up
        for name, pattern, nice in phases(patterns, a_nice):
            child = None if pattern is None else await _pattern(base, keys_file, pattern, seconds, nice)
            await c.begin()
            if probes is not None:
                probes.begin()
            await asyncio.sleep(seconds)
            await c.cut()  # requests between phases are not counted
            probed = {} if probes is None else await probes.end()
            decided = None if child is None else await _ended(child)
            rows.append(
                await c.row(name)
                | {"a_nice": nice}
                | ({} if decided is None else {"a_envelopes_per_s": round(decided / seconds)})
                | probed
            )
            progress(f"noisy: {name}: { {k: v for k, v in rows[-1].items() if k != 'latencies_ms'} }")
            await asyncio.sleep(1.0)  # the pattern's sockets close before the next phase
    finally:
        await c.stop()
    return rows


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The run's table; the last columns say where C's slowest 1 % of requests spent their time (ms): in the
    gateway (request sent to answer received) or in C's own client (before sending, after the answer came)."""
    base = rows[0]
    lines = ["| A's pattern | C requests | C p50 ms | C p99 ms | p99 vs baseline | C refused | A envelopes/s "
             "| C's slowest 1 %: server / C's client ms |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for row in rows:
        ratio = row["p99_ms"] / base["p99_ms"] if base["p99_ms"] else float("nan")
        a_rate = row.get("a_envelopes_per_s", "")
        tail = row["tail"]
        lines.append(f"| {row['phase']} | {row['requests']:,} | {row['p50_ms']} | {row['p99_ms']} | "
                     f"{ratio:.2f}x | {row['refused']} {row['refusals'] or ''} | {a_rate} | "
                     f"{tail['server']} / {round(tail['before_send'] + tail['after_receipt'], 1)} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one of A's patterns (the noisy neighbour's child process)")
    parser.add_argument("--pattern", choices=PATTERNS, required=True)
    parser.add_argument("--base", required=True)
    parser.add_argument("--keys-file", type=Path, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    args = parser.parse_args(argv)
    print("ready", flush=True)
    decided = run_pattern(args.pattern, args.base, json.loads(args.keys_file.read_text()), args.seconds)
    if decided is not None:
        print(f"decided {decided}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
