"""Tenant C of the noisy neighbour, in a process of its own (not sharing a loop with the bench's probes).

`TenantCProcess` starts `python -m nexus_lab.bench.noisy_tenant_c --base B --key K` and drives it over its
stdin: ``begin`` starts recording a phase, ``end`` stops recording (requests started after are not counted)
and, once every counted request has been answered, the child prints the phase's row as one JSON line; ``stop``
ends it. C's load is two agents, each: a plan, its five numbered steps, a read, 50 ms apart.

Where a request's time goes, from the kernel's view of C's connection (`TCP_INFO`, read as soon as the
answer is in: the milliseconds since the connection last sent and last received data, at the kernel's tick,
4 ms here): ``before_send`` (C's client between deciding to send and the request leaving it), ``server`` (the
request sent to the answer received: the gateway, its PostgreSQL and the loopback) and ``after_receipt`` (the
answer waiting in the kernel for C's client to read it). The row's ``tail`` is the mean of each part over
C's slowest 1 % of requests: whether C's p99 is the gateway's time or C's own client waiting for a core;
``c_loop`` is C's own event loop's lag (a 20 ms timer's lateness).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import socket
import statistics
import struct
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

import httpx

from nexus.core import definitions
from nexus.processes import shipped

STEPS = definitions.main_plan(shipped("order"))
PARTS = ("before_send", "server", "after_receipt")
# struct tcp_info (linux/tcp.h): tcpi_last_data_sent, tcpi_last_ack_sent, tcpi_last_data_recv, in ms
_TCP_INFO_LAST = struct.Struct("=III")
_TCP_INFO_LAST_OFFSET = 44


def step_data(step: str) -> dict[str, Any]:
    """The order process's data for `step` (a small order of 10.00)."""
    if step == STEPS[0]:
        return {"items": [{"product_id": "p", "quantity": 1, "unit_price": 10}], "total_amount": 10}
    if step == STEPS[2]:
        return {"amount": 10}
    return {}


def quantiles(values: Sequence[float]) -> dict[str, float]:
    """How many, p50 and p99 (ms) of `values` (seconds)."""
    ordered = sorted(values)
    q = statistics.quantiles(ordered, n=100) if len(ordered) >= 2 else [ordered[0] if ordered else 0.0] * 99
    return {"n": len(ordered), "p50_ms": round(q[49] * 1000, 1), "p99_ms": round(q[98] * 1000, 1)}


def split(elapsed: float, sock: socket.socket | None) -> tuple[float, float, float] | None:
    """`elapsed` (seconds, the whole request as C's client saw it) in `PARTS`, from the kernel's record of
    C's connection `sock` read just now; None where it cannot say (no socket)."""
    if sock is None:
        return None
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LAST_OFFSET + _TCP_INFO_LAST.size)
    sent_ago, _, received_ago = (ms / 1000 for ms in _TCP_INFO_LAST.unpack_from(info, _TCP_INFO_LAST_OFFSET))
    sent_ago = min(sent_ago, elapsed)  # the tick's rounding: never before the request began
    received_ago = min(received_ago, sent_ago)
    return elapsed - sent_ago, sent_ago - received_ago, received_ago


@dataclasses.dataclass
class Sample:
    """C's requests over one phase: latencies in seconds, their parts (`PARTS`) and the refusals."""

    latencies: list[float] = dataclasses.field(default_factory=list)
    by_kind: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    parts: list[tuple[float, tuple[float, float, float]]] = dataclasses.field(default_factory=list)
    refusals: dict[str, int] = dataclasses.field(default_factory=dict)
    lags: list[float] = dataclasses.field(default_factory=list)
    in_flight: int = 0
    idle: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    def row(self, phase: str) -> dict[str, Any]:
        whole = quantiles(self.latencies)
        return {"phase": phase, "requests": len(self.latencies) + sum(self.refusals.values()),
                "p50_ms": whole["p50_ms"], "p99_ms": whole["p99_ms"],
                "refused": sum(self.refusals.values()), "refusals": dict(self.refusals),
                "by_kind": {kind: quantiles(lats) for kind, lats in sorted(self.by_kind.items())},
                "parts": {name: quantiles([p[i] for _, p in self.parts]) for i, name in enumerate(PARTS)},
                "tail": self.tail(), "c_loop": quantiles(self.lags),
                "latencies_ms": [round(x * 1000, 2) for x in self.latencies]}  # fmt: skip

    def tail(self) -> dict[str, float]:
        """The mean of each part (ms) over the slowest 1 % of the requests whose parts are known."""
        slowest = sorted(self.parts, key=lambda item: item[0], reverse=True)[: max(1, len(self.parts) // 100)]
        means = {name: round(1000 * statistics.fmean(p[i] for _, p in slowest), 1) if slowest else 0.0
                 for i, name in enumerate(PARTS)}  # fmt: skip
        return {"n": len(slowest), **means}


class TenantC:
    """C's steady load; `sample` is the phase now being recorded."""

    def __init__(self, base: str, key: str) -> None:
        self.client = httpx.AsyncClient(base_url=base, timeout=30, headers={"Authorization": f"Bearer {key}"})
        self.sample = Sample()
        self.stopping = False

    async def _call(self, method: str, path: str, body: Any = None) -> None:
        sample = self.sample  # a request counts in the phase it started in, however long it takes
        sample.in_flight += 1
        sample.idle.clear()
        started = time.perf_counter()
        try:
            answer = await self.client.request(method, path, json=body)
            elapsed = time.perf_counter() - started
            parts = split(elapsed, answer.extensions["network_stream"].get_extra_info("socket"))
        except httpx.HTTPError as exc:
            sample.refusals[type(exc).__name__] = sample.refusals.get(type(exc).__name__, 0) + 1
            return
        finally:
            sample.in_flight -= 1
            if not sample.in_flight:
                sample.idle.set()
        if answer.status_code == 429 or answer.status_code >= 500:
            code = f"{answer.status_code} {answer.json().get('code', '') if answer.content else ''}".strip()
            sample.refusals[code] = sample.refusals.get(code, 0) + 1
            return
        sample.latencies.append(elapsed)
        if parts is not None:
            sample.parts.append((elapsed, parts))
        kind = "read" if method == "GET" else "step" if path.endswith("/steps") else "plan"
        sample.by_kind.setdefault(kind, []).append(elapsed)

    async def ended(self, sample: Sample) -> None:
        """Once every request `sample` counts has been answered (or 60 s)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(60):
                if sample.in_flight:
                    await sample.idle.wait()

    async def agent(self) -> None:
        while not self.stopping:
            order = f"c-{uuid.uuid4().hex[:12]}"
            await self._call("POST", "/v1/plans", {"order_id": order, "process": "order"})
            for step in STEPS:
                await asyncio.sleep(0.05)
                await self._call("POST", f"/v1/orders/{order}/steps", {"step": step, "data": step_data(step)})
            await asyncio.sleep(0.05)
            await self._call("GET", f"/v1/orders/{order}")
            await asyncio.sleep(0.05)

    async def loop_lag(self) -> None:
        """C's own loop's lateness: how long after its 20 ms a timer fires, into the sample of the moment."""
        while not self.stopping:
            started = time.perf_counter()
            await asyncio.sleep(0.02)
            self.sample.lags.append(time.perf_counter() - started - 0.02)


async def run(base: str, key: str) -> None:
    """The child's body: C's load, phases begun and ended by the lines on stdin, a JSON row per phase."""
    c = TenantC(base, key)
    tasks = [asyncio.create_task(c.agent()) for _ in range(2)] + [asyncio.create_task(c.loop_lag())]
    reader = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    print("ready", flush=True)
    try:
        while (line := (await reader.readline()).decode().strip()) not in ("stop", ""):
            sample, c.sample = c.sample, Sample()  # "begin" throws the requests between phases away
            if line == "end":
                await c.ended(sample)  # a request slow at the phase's end counts in its phase
                print(json.dumps(sample.row("")), flush=True)
    finally:
        c.stopping = True
        await asyncio.gather(*tasks, return_exceptions=True)
        await c.client.aclose()


class TenantCProcess:
    """The parent's handle on C's process: `start`, then `begin` and `end` per phase, then `stop`."""

    def __init__(self, base: str, key: str) -> None:
        self.base, self.key = base, key
        self.child: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "nexus_lab.bench.noisy_tenant_c", "--base", self.base, "--key", self.key,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        await self._line(60)  # "ready": imports done, the agents running

    async def _say(self, command: str) -> None:
        assert self.child is not None and self.child.stdin is not None
        self.child.stdin.write(f"{command}\n".encode())
        await self.child.stdin.drain()

    async def _line(self, seconds: float) -> str:
        assert self.child is not None and self.child.stdout is not None
        async with asyncio.timeout(seconds):
            line = await self.child.stdout.readline()
        if not line:
            raise RuntimeError("tenant C's process ended")
        return line.decode()

    async def begin(self) -> None:
        await self._say("begin")

    async def cut(self) -> None:
        """Stop counting: requests started from now on belong to no phase."""
        await self._say("end")

    async def row(self, phase: str) -> dict[str, Any]:
        """The phase's row, once each request it counts has been answered (after `cut`)."""
        row: dict[str, Any] = json.loads(await self._line(90))
        return row | {"phase": phase}

    async def stop(self) -> None:
        if self.child is None:
            return
        with contextlib.suppress(OSError):
            await self._say("stop")
        try:
            async with asyncio.timeout(30):
                await self.child.wait()
        except TimeoutError:
            self.child.kill()
            await self.child.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="tenant C's load (the noisy neighbour's child process)")
    parser.add_argument("--base", required=True)
    parser.add_argument("--key", required=True)
    args = parser.parse_args(argv)
    asyncio.run(run(args.base, args.key))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
