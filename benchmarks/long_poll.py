"""The long poll's latency after a commit: how long after `POST /v1/events` returns does a
waiting `GET /v1/orders/{id}?wait=30&after_seq=N` answer.

A real `nexus serve --no-dispatcher` (a child process) on a fresh database; per sample: a long poll is
started and given 50 ms to register, the next step is posted, and the time from the POST's answer to the
long poll's answer is recorded (the POST answers after its commit, so this is commit -> NOTIFY -> listener
-> waiter -> re-read -> answer, plus one HTTP round trip). Measured, not asserted.

Usage: ``.venv/bin/python benchmarks/long_poll.py [--samples 200]``.
PostgreSQL: NEXUS_DATABASE_URL (an admin URL able to CREATE DATABASE), else an embedded pgserver.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from nexus.core import definitions
from nexus.processes import shipped
from nexus_lab.bench import create_database, drop_database, start_embedded
from nexus_lab.procs import NEXUS_CMD, Proc, free_port, wait_http

STEPS = definitions.main_plan(shipped("order"))  # the order process's steps, in order


def step_json(order: str, plan: str, seq: int) -> dict[str, object]:
    data: dict[str, object] = {}
    if seq == 1:
        data = {"items": [{"product_id": "p", "quantity": 1, "unit_price": 10}], "total_amount": 10}
    if seq == 3:
        data = {"amount": 10}
    return {
        "event_id": str(uuid.uuid4()),
        "event_type": STEPS[seq - 1],
        "plan_id": plan,
        "order_id": order,
        "seq_id": seq,
        "timestamp": "2026-01-01T00:00:00Z",
        "data": data,
    }


async def measure(base: str, samples: int) -> tuple[list[float], list[float]]:
    """(POST sent -> long poll answered, POST answered -> long poll answered; negative: the poll first)."""
    latencies: list[float] = []
    from_send: list[float] = []
    key = os.environ["NEXUS_API_KEY"]  # made valid in the bench database by create_database (the lab's key)
    async with httpx.AsyncClient(base_url=base, timeout=60, headers={"Authorization": f"Bearer {key}"}) as api:
        done = 0
        while done < samples:
            order = f"lp-{uuid.uuid4().hex[:10]}"
            await api.post("/v1/events", json=step_json(order, "p", 1))
            for seq in range(2, 6):
                poll = asyncio.create_task(api.get(f"/v1/orders/{order}?wait=30&after_seq={seq - 1}"))
                await asyncio.sleep(0.05)
                sent = time.perf_counter()
                await api.post("/v1/events", json=step_json(order, "p", seq))
                committed = time.perf_counter()
                answer = await poll
                answered = time.perf_counter()
                latencies.append(answered - committed)
                from_send.append(answered - sent)
                assert answer.json()["last_seq"] == seq
                done += 1
    return from_send, latencies


async def main(args: argparse.Namespace, admin: str) -> None:
    name = f"bench_lp_{uuid.uuid4().hex[:8]}"
    url = await create_database(admin, name, migrate=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(NEXUS_DATABASE_URL=url, NEXUS_HTTP_PORT=str(port), NEXUS_LOG_LEVEL="WARNING")
    log_path = Path(tempfile.mkdtemp(prefix="nexus-lp-")) / "serve.log"
    proc = Proc("serve", [*NEXUS_CMD, "serve", "--no-dispatcher"], env, log_path).start()
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/healthz", proc=proc)
        from_send, after_answer = await measure(base, args.samples)
        for what, values in (
            ("POST sent -> poll answered", from_send),
            ("POST answered -> poll answered", after_answer),
        ):
            lat = sorted(values)
            q = statistics.quantiles(lat, n=100)
            print(
                f"{what}, {len(lat)} samples: p50 {q[49] * 1000:.1f} ms, p90 {q[89] * 1000:.1f} ms, "
                f"p99 {q[98] * 1000:.1f} ms, max {lat[-1] * 1000:.1f} ms"
            )
    finally:
        proc.stop(10.0)
        await drop_database(admin, name)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=200)
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
