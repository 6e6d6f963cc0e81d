"""Hostile input, timed: health-check latency while maximal requests are being refused or applied, and
the gateway's memory before and after a burst of arbitrary JSON (the fuzz bodies of the tests).

Against a `nexus serve --no-dispatcher` it starts (its own database), with default limits:

1. idle: /healthz latency with nothing else going on (the baseline);
2. maximal batch: /healthz polled every 10 ms while clients send, back to back, the largest bodies a
   request may carry: 1,000 valid events (applied), 1 MiB of `{}` (refused, 413 BATCH_TOO_LARGE) and
   1 MiB of nested arrays (refused, 400 NESTING_TOO_DEEP);
3. memory: the server's RSS before and after N hostile bodies (deep nesting, huge numbers, odd strings,
   duplicate keys, NaN) sent beside valid traffic;
4. the worst step each shipped definition allows, at the limits (`max_list_items` lists where its rules
   walk them, a list at the limit in every other step too): the CPU of deciding it in this process
   (`validate_step`, `needs_approval`, `facts_after`; the aim is under 50 ms), then over HTTP the issue's
   attack (an order of 1,000 items, then its 1,000 items reserved in reverse) sent back to back with
   /healthz polled meanwhile, and a step one item over the limit (422).

Usage: ``.venv/bin/python benchmarks/hostile.py [--seconds 10] [--bodies 2000]``.
PostgreSQL: NEXUS_DATABASE_URL (an admin URL able to CREATE DATABASE), else an embedded pgserver.
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
import tempfile
import time
import urllib.parse
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil
from delivery import free_port, plan  # benchmarks/ is the script's directory, first on sys.path

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.core.list_limits import DEFAULT_MAX_LIST_ITEMS
from nexus.core.process_checks import needs_approval, validate_step
from nexus.core.process_compile import compile_definition
from nexus.processes import builtin_sources
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.embedded import EmbeddedPostgres

JSON = {"content-type": "application/json"}
LIMITS = {"max_order_amount": Decimal(100000)}


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
    }


async def poll_health(client: httpx.AsyncClient, stop: asyncio.Event) -> list[float]:
    samples = []
    while not stop.is_set():
        started = time.perf_counter()
        response = await client.get("/healthz")
        samples.append(time.perf_counter() - started)
        assert response.status_code == 200
        await asyncio.sleep(0.01)
    return samples


LIMIT = DEFAULT_MAX_LIST_ITEMS


def limit_items(n: int = LIMIT) -> list[dict[str, Any]]:
    return [{"product_id": f"p{i}", "quantity": 1 + i % 3, "unit_price": "1.25"} for i in range(n)]


def worst_data(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Data every shipped step accepts in form, its lists at the limit (extra fields are kept, as designed)."""
    total = str(sum(Decimal(i["unit_price"]) * i["quantity"] for i in items))
    return {
        "user_id": "u", "items": items, "reserved_items": items[::-1], "total_amount": total, "amount": total,
        "currency": "USD", "payment_id": "pay", "warehouse_id": "w", "method": "card", "carrier": "c",
        "tracking_number": "t", "reason": "r", "reviewer": "x", "note": "n", "tags": list(range(LIMIT)),
    }  # fmt: skip


def worst_steps(repeat: int = 10) -> dict[str, Any]:
    """Per shipped definition: the CPU (ms, median of `repeat`) of deciding each step at the limits, and the worst."""
    items = limit_items()
    data = worst_data(items)
    out: dict[str, Any] = {}
    for source in builtin_sources():
        process = compile_definition(source.text)
        initial = process.allowed[None][0]
        facts = process.facts_after({}, initial, data)
        steps: dict[str, float] = {}
        for name, compiled in process.steps.items():
            status = next((s for s in compiled.step.from_ if s is not None), None)
            times = []
            for _ in range(repeat):
                started = time.process_time()
                validate_step(process, status, facts, name, 2, data, LIMITS)
                needs_approval(process, facts, name, 2, data, LIMITS)
                process.facts_after(facts, name, data)
                times.append(time.process_time() - started)
            steps[name] = round(statistics.median(times) * 1000, 2)
        worst = max(steps, key=lambda k: steps[k])
        out[f"{process.name} v{process.version}"] = {"worst_step": worst, "worst_cpu_ms": steps[worst], "steps": steps}
    return out


def attack_bodies() -> tuple[bytes, bytes]:
    """The issue's attack at the limit, on a fresh order: 1,000 items, then the same 1,000 reserved in reverse."""
    order = f"atk-{uuid.uuid4().hex[:10]}"
    created, validated = plan(order)[:2]
    items = limit_items()
    created["data"] = {"user_id": "u", "items": items, "total_amount": worst_data(items)["total_amount"],
                       "currency": "USD"}  # fmt: skip
    validated["data"] = {"warehouse_id": "w", "reserved_items": items[::-1]}
    return json.dumps(created).encode(), json.dumps(validated).encode()


def maximal_bodies() -> list[tuple[str, bytes]]:
    valid = json.dumps({"events": [e for i in range(200) for e in plan(f"max-{uuid.uuid4().hex[:8]}-{i}")]})
    flood = b"[" + b",".join([b"{}"] * 349_000) + b"]"
    deep = b"[" * 500_000 + b"]" * 500_000
    return [("1000 valid events", valid.encode()), ("1 MiB of {}", flood), ("1 MiB of nesting", deep)]


def hostile_body(rng: random.Random) -> bytes:
    choice = rng.randrange(6)
    if choice == 0:
        depth = rng.randrange(30, 5000)
        return b"[" * depth + b"]" * depth
    if choice == 1:
        return json.dumps({"events": [{"x": 2 ** rng.randrange(60, 4000)}] * rng.randrange(1, 50)}).encode()
    if choice == 2:
        return json.dumps({"s": "".join(chr(rng.randrange(1, 0xD7FF)) for _ in range(rng.randrange(1, 5000)))}).encode()
    if choice == 3:
        return b'{"a":1,"a":2,"b":[NaN, 1e309]}'
    if choice == 4:
        event = plan(f"h-{uuid.uuid4().hex[:8]}")[0]
        event["order_id"] = "bad\norder/" + "\u00e9"
        return json.dumps(event).encode()
    return os.urandom(rng.randrange(1, 2000))


async def run(seconds: float, bodies: int, admin_url: str) -> dict[str, Any]:
    name = f"bench_hostile_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(admin_url)
    await conn.execute(f"CREATE DATABASE {name}")
    await conn.close()
    parts = urllib.parse.urlsplit(admin_url)
    database_url = urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))
    port = free_port()
    data_dir = tempfile.mkdtemp(prefix="nexus-hostile-")  # the bootstrap admin key goes there, not in the cwd
    env = {**os.environ, "NEXUS_DATABASE_URL": database_url, "NEXUS_HTTP_PORT": str(port), "NEXUS_DATA_DIR": data_dir}
    log = (Path(__file__).resolve().parent / "results" / "hostile-serve.log").open("wb")  # noqa: ASYNC240 - before timing
    proc = subprocess.Popen(  # noqa: ASYNC220 - started once, runs for the whole measurement
        [sys.executable, "-m", "nexus.cli", "serve", "--no-dispatcher"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    result: dict[str, Any] = {}
    try:
        async with httpx.AsyncClient(base_url=base, timeout=120) as client:
            for _ in range(300):
                try:
                    if (await client.get("/healthz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    await asyncio.sleep(0.1)
            # An agent key of its own (every route but the health checks needs one).
            db = await Database(Settings(database_url=database_url, db_pool_size=1)).open(migrate=False)
            try:
                _, key = await create_key(db, "default", frozenset({Role.AGENT}))
            finally:
                await db.close()
            client.headers["authorization"] = f"Bearer {key}"
            server = psutil.Process(proc.pid)
            stop = asyncio.Event()
            poller = asyncio.create_task(poll_health(client, stop))
            await asyncio.sleep(min(3.0, seconds / 3))
            stop.set()
            result["healthz_idle"] = percentiles(await poller)

            # Per kind of maximal request: its answer times, and /healthz latency while it is sent back to back.
            result["maximal_requests"] = {}
            for label, body in maximal_bodies():
                answers: dict[int, list[float]] = {}
                stop = asyncio.Event()
                poller = asyncio.create_task(poll_health(client, stop))
                deadline = time.monotonic() + seconds / 3
                while time.monotonic() < deadline:
                    if label.startswith("1000"):
                        [(_, body)] = [b for b in maximal_bodies()[:1]]  # fresh orders: every event applies
                    started = time.perf_counter()
                    response = await client.post("/v1/events", content=body, headers=JSON)
                    answers.setdefault(response.status_code, []).append(time.perf_counter() - started)
                stop.set()
                result["maximal_requests"][label] = {
                    "answers": {status: percentiles(times) for status, times in answers.items()},
                    "healthz_meanwhile": percentiles(await poller),
                }

            # The worst step at the limits over HTTP, back to back, with /healthz polled meanwhile.
            answers = {}
            stop = asyncio.Event()
            poller = asyncio.create_task(poll_health(client, stop))
            cpu_before = server.cpu_times()
            steps = 0
            deadline = time.monotonic() + seconds / 3
            while time.monotonic() < deadline:
                for label, body in zip(("OrderCreated x1000", "InventoryValidated x1000 reversed"), attack_bodies(),
                                       strict=True):  # fmt: skip
                    started = time.perf_counter()
                    response = await client.post("/v1/events", content=body, headers=JSON)
                    assert response.json()["results"][0]["decision"] == "APPLY", response.text[:300]
                    answers.setdefault(label, []).append(time.perf_counter() - started)
                    steps += 1
            over = json.loads(attack_bodies()[0])
            over["data"]["items"] = limit_items(LIMIT + 1)
            started = time.perf_counter()
            refused = await client.post("/v1/events", json=over)
            refused_s = time.perf_counter() - started
            stop.set()
            cpu_after = server.cpu_times()
            cpu_s = (cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system)
            result["limits_over_http"] = {
                "answers": {label: percentiles(times) for label, times in answers.items()},
                "server_cpu_ms_per_step": round(cpu_s / max(1, steps) * 1000, 2),
                "over_the_limit": {
                    "status": refused.status_code,
                    "check": refused.json().get("check"),
                    "ms": round(refused_s * 1000, 2),
                },
                "healthz_meanwhile": percentiles(await poller),
            }

            rss_before = server.memory_info().rss
            rng = random.Random(10)
            statuses: dict[int, int] = {}
            server_errors: list[str] = []
            for i in range(bodies):
                body = hostile_body(rng)
                response = await client.post("/v1/events", content=body, headers=JSON)
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
                if response.status_code >= 500:
                    server_errors.append(f"{body[:200]!r} -> {response.text[:200]}")
                if i % 10 == 0:
                    await client.post("/v1/events", json=plan(f"fz-{i}")[0])
            result["fuzz_statuses"] = statuses
            result["fuzz_server_errors"] = server_errors
            result["rss_mib_before_fuzz"] = round(rss_before / 2**20, 1)
            result["rss_mib_after_fuzz"] = round(server.memory_info().rss / 2**20, 1)
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--bodies", type=int, default=2000)
    args = parser.parse_args()
    admin_url = os.environ.get("NEXUS_DATABASE_URL")
    embedded = None
    if admin_url is None:
        embedded = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="nexus-bench-hostile-")), cleanup_mode="delete")
        admin_url = embedded.start()
    try:
        result = {"worst_steps": worst_steps(), **asyncio.run(run(args.seconds, args.bodies, admin_url))}
    finally:
        if embedded is not None:
            embedded.close()
    print(json.dumps(result, indent=2))
    out = Path(__file__).resolve().parent / "results" / "hostile.json"
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
