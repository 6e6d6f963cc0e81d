"""Where tenant C's time goes during a noisy-neighbour phase (`benchmarks/noisy_neighbour.py --probes`).

Per phase, beside C's latencies:

- ``loop``: `/healthz` answered every 20 ms (a route that does no I/O): its p50 and p99 are the gateway's event
  loop's lag as a client sees it (the loop busy, or waiting for the GIL behind a fold or a parse thread);
- ``pg``: PostgreSQL's client backends of the bench database sampled every 50 ms (`pg_stat_activity`), the
  mean count in each state: ``cpu`` (active, waiting for nothing: running or waiting for a core), ``lock``
  (a heavyweight lock: an order's advisory lock), ``lwlock``, ``io``, ``ipc`` (``WALSync``/``WALWrite`` are
  ``io``; a commit's group flush is ``ipc``/``lwlock``), ``client`` (waiting for the gateway's next statement
  inside a statement), ``in_tx`` (idle in transaction: the gateway holds a transaction open while its Python
  runs: a fold, or the loop busy elsewhere), and ``long_tx`` (transactions open longer than 50 ms);
- ``cpu``: the gateway's and its backends' CPU seconds per second of the phase, and the machine's load.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import time
from typing import Any

import asyncpg
import httpx
import psutil

SAMPLE_PG = """
SELECT a.pid, a.state, a.wait_event_type, a.wait_event, coalesce(extract(epoch FROM now() - a.xact_start), 0) AS age,
       (SELECT l.classid::regclass::text FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted LIMIT 1) AS waits_on
FROM pg_stat_activity a
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.backend_type = 'client backend'
"""
CLASSES = ("cpu", "lock", "lwlock", "io", "ipc", "client", "in_tx", "long_tx")


def classify(state: str | None, wait: str | None) -> str | None:
    """A backend's class (`CLASSES`), or None for an idle one."""
    if state == "idle in transaction":
        return "in_tx"
    if state != "active":
        return None
    return {None: "cpu", "Lock": "lock", "LWLock": "lwlock", "IO": "io", "IPC": "ipc", "Client": "client"}.get(
        wait, "other"
    )


def _cpu(pid: int) -> float:
    with contextlib.suppress(psutil.Error):
        times = psutil.Process(pid).cpu_times()
        return float(times.user + times.system)
    return 0.0


class Probes:
    """The three probes over one phase at a time: `begin`, then `end` gives the phase's figures."""

    def __init__(self, base: str, url: str, gateway_pid: int) -> None:
        self.base, self.url, self.gateway_pid = base, url, gateway_pid
        self._tasks: list[asyncio.Task[None]] = []
        self._lags: list[float] = []
        self._counts: dict[str, int] = {}
        self._events: dict[str, int] = {}
        self._samples = 0
        self._backends: dict[int, float] = {}  # pid -> its CPU when first seen in the phase
        self._start = 0.0
        self._gateway_cpu = 0.0

    def begin(self) -> None:
        self._lags, self._counts, self._events, self._samples, self._backends = [], {}, {}, 0, {}
        self._start, self._gateway_cpu = time.monotonic(), _cpu(self.gateway_pid)
        self._tasks = [asyncio.create_task(self._loop_lag()), asyncio.create_task(self._pg())]

    async def end(self) -> dict[str, Any]:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        seconds = max(1e-9, time.monotonic() - self._start)
        lags = sorted(self._lags) or [0.0]
        q = statistics.quantiles(lags, n=100) if len(lags) >= 2 else [lags[0]] * 99
        backends = sum(_cpu(pid) - before for pid, before in self._backends.items())
        return {
            "loop": {"p50_ms": round(q[49] * 1000, 1), "p99_ms": round(q[98] * 1000, 1), "samples": len(self._lags)},
            "pg": {k: round(self._counts.get(k, 0) / max(1, self._samples), 2) for k in (*CLASSES, "other")},
            "pg_waits": {k: round(n / max(1, self._samples), 3) for k, n in sorted(self._events.items())},
            "cpu": {
                "gateway": round((_cpu(self.gateway_pid) - self._gateway_cpu) / seconds, 2),
                "backends": round(backends / seconds, 2),
                "load1": round(os.getloadavg()[0], 1),
            },
        }

    async def _loop_lag(self) -> None:
        async with httpx.AsyncClient(base_url=self.base, timeout=30) as api:
            while True:
                started = time.perf_counter()
                with contextlib.suppress(httpx.HTTPError):
                    await api.get("/healthz")
                    self._lags.append(time.perf_counter() - started)
                await asyncio.sleep(0.02)

    async def _pg(self) -> None:
        conn = await asyncpg.connect(self.url)
        try:
            while True:
                rows = await conn.fetch(SAMPLE_PG)
                self._samples += 1
                for row in rows:
                    pid = row["pid"]
                    if pid not in self._backends:
                        self._backends[pid] = _cpu(pid)
                    kind = classify(row["state"], row["wait_event_type"])
                    if kind is not None:
                        self._counts[kind] = self._counts.get(kind, 0) + 1
                        if kind not in ("cpu", "in_tx"):  # which lock or I/O it waits for
                            event = f"{row['wait_event_type']}:{row['wait_event']}"
                            if row["waits_on"]:  # an object lock's class: pg_database is the notify queue's
                                event += f"({row['waits_on']})"
                            self._events[event] = self._events.get(event, 0) + 1
                        if float(row["age"]) > 0.05:
                            self._counts["long_tx"] = self._counts.get("long_tx", 0) + 1
                await asyncio.sleep(0.05)
        finally:
            await conn.close()
