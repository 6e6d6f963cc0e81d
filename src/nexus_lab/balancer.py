"""HAProxy (Debian's package, `make haproxy`) in front of two gateway instances, run from deploy/haproxy.cfg as
it ships: the file takes its addresses from the environment, so the lab fills in its own ports and nothing
else. Used by the `instance-kill` chaos scenario and the balancer benchmark."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from nexus_lab.procs import REPO_ROOT, Proc, free_port

HAPROXY_CFG = REPO_ROOT / "deploy" / "haproxy.cfg"
INSTANCES = 2
"""The `server` lines of deploy/haproxy.cfg (GATEWAY_1, GATEWAY_2)."""


def haproxy_binary() -> str:
    found = shutil.which("haproxy")
    if found is None:
        raise RuntimeError("haproxy is not installed: `make haproxy` (Debian's package)")
    return found


def balancer_env(bind: str, backends: Sequence[str]) -> dict[str, str]:
    """The variables deploy/haproxy.cfg reads: where it listens, and the instances' host:port."""
    if len(backends) != INSTANCES:
        raise ValueError(f"deploy/haproxy.cfg balances {INSTANCES} instances, not {len(backends)}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env["GATEWAY_LB_BIND"] = bind
    env.update({f"GATEWAY_{i}": backend for i, backend in enumerate(backends, start=1)})
    return env


class Balancer:
    """One HAProxy process on a free port of 127.0.0.1 before `backends` (host:port each)."""

    def __init__(self, backends: Sequence[str], log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = balancer_env(f"127.0.0.1:{self.port}", backends)
        # -db: in the foreground, as a child the lab can stop; -f: the shipped file, unchanged
        self.proc = Proc("haproxy", [haproxy_binary(), "-db", "-f", str(HAPROXY_CFG)], env, log_path)

    async def start(self, timeout_s: float = 30.0) -> Balancer:
        """Start HAProxy and return once a request through it reaches a ready instance."""
        self.proc.start()
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(timeout=2.0) as client:
            while True:
                if not self.proc.alive:
                    raise RuntimeError(f"haproxy exited:\n{self.proc.tail()}")
                try:
                    if (await client.get(self.url + "/readyz")).status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no ready instance behind haproxy within {timeout_s:g}s:\n{self.proc.tail()}")
                await asyncio.sleep(0.1)

    def stop(self) -> None:
        self.proc.stop()
