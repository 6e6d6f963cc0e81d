"""CPU accounting of a bench run: a producer in a process of its own, and the CPU seconds of a
local PostgreSQL server, every backend included (those that exit during the run too)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import os
import time
from typing import Any

import asyncpg
import psutil

from nexus.kafka_io import EventProducer
from nexus.settings import Settings


async def produce(settings: Settings, records: list[tuple[bytes, bytes]]) -> float:
    """Publish (key, value) `records` as agents do, keyed by order_id so that an order's steps share a
    partition (acks=all, idempotent, pipelined, 5 ms linger); the seconds it took."""
    start = time.perf_counter()
    async with EventProducer.from_settings(settings, linger_ms=5) as producer:
        await producer.send_records((value, key.decode(), None) for key, value in records)
    return time.perf_counter() - start


def _produce_process(settings: Settings, records: list[tuple[bytes, bytes]]) -> tuple[float, float]:
    cpu = time.process_time()
    seconds = asyncio.run(produce(settings, records))
    return seconds, time.process_time() - cpu


def _ready() -> None:
    """Nothing: run once in a new worker so that its start-up and imports happen before the clock."""


class ProducerProcess:
    """A process of its own that produces, as agents would; started (and warm) before it is timed."""

    def __init__(self) -> None:
        self._pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))

    async def __aenter__(self) -> ProducerProcess:
        await asyncio.get_running_loop().run_in_executor(self._pool, _ready)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._pool.shutdown()

    async def produce(self, settings: Settings, records: list[tuple[bytes, bytes]]) -> tuple[float, float]:
        """`produce` in that process: (seconds, its CPU seconds)."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, _produce_process, settings, records)


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of `pid`, of its live children, and of its children that exited (reaped, as PostgreSQL's
    postmaster reaps its backends): the difference of two readings is what the server spent between them."""
    ticks = os.sysconf("SC_CLK_TCK")
    fields = _stat(pid)
    if fields is None:
        return 0.0
    total = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime, stime, cutime, cstime
    for child in _children(pid):
        sub = _stat(child)
        if sub is not None:
            total += int(sub[11]) + int(sub[12])
    return total / ticks


async def postmaster_pid(url: str) -> int | None:
    """The PostgreSQL server's main process, if it runs on this machine (the parent of our backend)."""
    conn = await asyncpg.connect(url)
    try:
        fields = _stat(int(await conn.fetchval("SELECT pg_backend_pid()")))  # read while the backend lives
    finally:
        await conn.close()
    return int(fields[1]) if fields is not None else None


def machine_times() -> Any:
    """The machine's CPU times since boot, all cores (psutil: user, system, idle, iowait, steal, ...)."""
    return psutil.cpu_times()


def machine_shares(before: Any, after: Any) -> dict[str, float]:
    """Percent of the machine's CPU time between two `machine_times` readings that was busy (this machine's
    processes), idle, and stolen (a virtual machine's cores taken by its host for others): a run whose steal
    is high ran on a slower machine than its neighbours, whatever the load average says."""
    spent = {name: getattr(after, name) - getattr(before, name) for name in after._fields}
    total = sum(v for name, v in spent.items() if name not in ("guest", "guest_nice")) or 1.0  # in user already
    idle = spent.get("idle", 0.0) + spent.get("iowait", 0.0)
    steal = spent.get("steal", 0.0)
    return {
        "busy": round(100 * (total - idle - steal) / total, 1),
        "idle": round(100 * idle / total, 1),
        "steal": round(100 * steal / total, 1),
    }
