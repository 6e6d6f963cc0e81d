"""Losing a gateway machine behind the load balancer: every process of one instance SIGKILLed, and later
started again (the `instance-kill` scenario; `StackSpec.balancer`).

An instance is one `nexus serve` (with `--workers`, its supervisor and HTTP processes) with its own port and
data directory. While it is down a probe asks the balancer for `/readyz` every `probe_s`: the recovery time
is from the kill to the first of `clean_run` answers in a row that are all 200 (HAProxy retried elsewhere,
or stopped sending to the dead instance after its failed health checks). It is logged and counted in
milliseconds (`lb recovery ms`), the requests that failed meanwhile too (`lb requests failed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from typing import TYPE_CHECKING

import httpx
import psutil

from nexus_lab.procs import Proc

if TYPE_CHECKING:
    from nexus_lab.chaos.faults import FaultContext

Range = tuple[float, float]


def _instance_pids(proc: Proc) -> list[int]:
    """The instance's processes: the one the lab started and every descendant (its HTTP workers)."""
    if proc.proc is None:
        return []
    try:
        root = psutil.Process(proc.proc.pid)
        return [root.pid, *(child.pid for child in root.children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def _running(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            if psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                alive.append(pid)
    return alive


async def _gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    """Those of `pids` still running after `timeout_s` (a SIGKILLed process takes a moment to exit)."""
    for _ in range(round(timeout_s / 0.05)):
        if not _running(pids):
            return []
        await asyncio.sleep(0.05)
    return _running(pids)


@dataclasses.dataclass(frozen=True, slots=True)
class Recovery:
    seconds: float
    failed: int
    slowest_s: float
    """The slowest answer meanwhile (one HAProxy retried on the other instance waited for its retry)."""


async def probe_until_clean(url: str, probe_s: float, clean_run: int, timeout_s: float) -> Recovery:
    """Ask `url` until `clean_run` answers in a row are 200: seconds from the start to the first of them."""
    started = time.monotonic()
    failed = 0
    slowest = 0.0
    run_start: float | None = None
    run = 0
    async with httpx.AsyncClient(timeout=5.0) as client:
        while time.monotonic() - started < timeout_s:
            sent = time.monotonic()
            try:
                ok = (await client.get(url)).status_code == 200
            except httpx.HTTPError:
                ok = False
            slowest = max(slowest, time.monotonic() - sent)
            if ok:
                run_start = sent if run == 0 else run_start
                run += 1
                if run >= clean_run:
                    assert run_start is not None
                    return Recovery(run_start - started, failed, slowest)
            else:
                failed += 1
                run = 0
            await asyncio.sleep(probe_s)
    raise TimeoutError(f"the balancer at {url} did not answer {clean_run} times in a row within {timeout_s:g}s")


@dataclasses.dataclass(frozen=True, slots=True)
class InstanceKill:
    """SIGKILL every process of one gateway instance behind the balancer, keep it down, start it again."""

    count: int = 1
    first_s: Range = (1.5, 2.5)
    down_s: Range = (3.0, 4.0)
    """Longer than the balancer's two failed health checks (deploy/haproxy.cfg: `inter 1s fall 2`)."""
    probe_s: float = 0.02
    clean_run: int = 25

    async def run(self, ctx: FaultContext) -> None:
        balancer = ctx.stack.balancer
        if balancer is None:
            raise RuntimeError("instance-kill needs a stack behind the balancer (StackSpec.balancer)")
        gateways = ctx.stack.gateways
        schedule = [
            (ctx.rng.uniform(*self.first_s), ctx.rng.randrange(len(gateways)), ctx.rng.uniform(*self.down_s))
            for _ in range(self.count)
        ]
        for wait_s, index, down_s in schedule:
            await asyncio.sleep(wait_s)
            victim = gateways[index]
            pids = _instance_pids(victim)
            probe = asyncio.create_task(probe_until_clean(balancer.url + "/readyz", self.probe_s, self.clean_run, 60))
            killed = time.monotonic()
            victim.kill()  # SIGKILL to its process group: the supervisor and its workers at once
            if survivors := await _gone(pids):
                raise RuntimeError(f"{victim.name}: processes {survivors} survived the SIGKILL")
            ctx.count("instance SIGKILLed")
            ctx.count("instance processes SIGKILLed", len(pids))
            recovery = await probe
            ctx.count("lb recovery ms", round(recovery.seconds * 1000))
            ctx.count("lb requests failed", recovery.failed)
            ctx.progress(
                f"SIGKILL {victim.name} ({len(pids)} processes) at {ctx.elapsed():.1f}s; the balancer served "
                f"without errors again {recovery.seconds:.2f}s later ({recovery.failed} probes failed, the slowest "
                f"answered in {recovery.slowest_s:.2f}s)"
            )
            await asyncio.sleep(max(0.0, down_s - (time.monotonic() - killed)))
            await ctx.stack.restart(victim)
            ctx.progress(f"{victim.name} back {time.monotonic() - killed:.1f}s after its kill")
