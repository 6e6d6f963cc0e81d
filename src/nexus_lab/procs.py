"""Child processes for the lab and the tests, written once: a free port, a `nexus ...` process in its own
process group (so a crash can be simulated by SIGKILLing the whole group), and waiting until it answers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import psutil
import uvicorn

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.settings import Settings
from nexus.store.database import Database

REPO_ROOT = Path(__file__).resolve().parents[2]
# How every harness starts the `nexus` command: this interpreter, this checkout.
NEXUS_CMD: tuple[str, ...] = (sys.executable, "-m", "nexus_cli")


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on (now), and never one this process handed out before: a
    harness picks its sink's port, starts the sink, then picks its gateways' ports before the sink has bound
    its own, and the kernel may offer the same free port twice (an agent then talks to the sink: 401)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("no TCP port left on 127.0.0.1 that this process has not handed out already")


class Proc:
    """A child process in its own process group, its output appended to a log file; restartable."""

    def __init__(self, name: str, cmd: Sequence[str], env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.cmd = list(cmd)
        self.env = env
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> Proc:
        with self.log_path.open("ab") as log:
            log.write(f"=== start #{self.starts + 1}: {' '.join(self.cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter running our own code
                self.cmd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=REPO_ROOT,
            )
        self.starts += 1
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group; SIGKILL it if it has not exited within `timeout`."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def tail(self, chars: int = 3000) -> str:
        return self.log()[-chars:]

    def log_since_start(self) -> str:
        return self.log().rsplit("=== start #", 1)[-1]


class Workspace:
    """A demo's temporary directory, the environment its children start from (this one without NEXUS_* and
    SIM_* variables) and the children it started: leaving it stops them, the last started first, and removes
    the directory unless `keep`."""

    def __init__(self, prefix: str, *, keep: bool) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=prefix))
        self.keep = keep
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "SIM_"))}
        self.children: list[Proc] = []

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for child in reversed(self.children):
            child.stop(15.0)
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


async def new_keys(data_dir: Path, *wanted: tuple[str, Role, str | None]) -> list[str]:
    """New API keys, one per (tenant, role, name), made in the running embedded database under `data_dir`
    (shown once, as `nexus keys create` would)."""
    db = await Database(Settings(data_dir=data_dir)).open(migrate=False)
    try:
        return [(await create_key(db, tenant, frozenset({role}), name=name))[1] for tenant, role, name in wanted]
    finally:
        await db.close()


def kafka_script(command: str, env: dict[str, str], timeout_s: float, what: str = "") -> None:
    """Run the project's `scripts/kafka.sh <command>` with `env` (its NEXUS_KAFKA_* knobs); a RuntimeError with
    its output when it fails (`what` names the broker or cluster in the message)."""
    done = subprocess.run(  # noqa: S603 - the project's own kafka.sh
        [shutil.which("bash") or "/bin/bash", str(REPO_ROOT / "scripts" / "kafka.sh"), command],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"kafka.sh {command}{what} failed: {done.stdout}{done.stderr}")


def nexus(name: str, args: Sequence[str], env: dict[str, str], log_path: Path) -> Proc:
    """A `nexus <args>` process (not started)."""
    return Proc(name, [*NEXUS_CMD, *args], env, log_path)


def _ready(proc: Proc | None) -> None:
    if proc is not None and proc.proc is not None and not proc.alive:
        raise RuntimeError(f"{proc.name} exited early:\n{proc.tail()}")


def _serves(proc: Proc | None, url: str) -> bool:
    """Whether `url`'s port is listened on by `proc` or one of its children (True without a process): a port
    `free_port` handed out may be taken by another test worker's server, which would answer in its place."""
    if proc is None or proc.proc is None:
        return True
    port = httpx.URL(url).port
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(proc.proc.pid)
        for member in (root, *root.children(recursive=True)):
            with contextlib.suppress(psutil.Error):
                if any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in member.net_connections("tcp")):
                    return True
    return False


def wait_http(url: str, timeout: float = 30.0, proc: Proc | None = None) -> None:
    """Block until `url` answers below 500 from `proc`; fail at once if `proc` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _ready(proc)
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1.0).status_code < 500 and _serves(proc, url):
                return
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer in {timeout:g}s" + (f"\n{proc.tail()}" if proc else ""))


async def wait_ready(proc: Proc, url: str | None, timeout_s: float = 60.0) -> None:
    """Wait until `url` answers below 500 (HTTP processes) or the process says it serves (the others)."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=1.0) as client:
        while time.monotonic() < deadline:
            _ready(proc)
            if url is None:
                text = proc.log_since_start()
                if "nexus serving at" in text or "sink listening" in text:
                    return
            else:
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(url)).status_code < 500 and _serves(proc, url):
                        return
            await asyncio.sleep(0.1)
    raise TimeoutError(f"{proc.name} not ready within {timeout_s:g}s:\n{proc.tail()}")


async def serve_in_loop(app: Any, host: str, port: int) -> tuple[uvicorn.Server, asyncio.Task[None], int]:
    """Serve ASGI `app` on `host:port` (0: any free port) in this event loop; returns once it listens, with
    the server, its task and the bound port. The lab's in-process HTTP peers (sink, services) start here."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=1, http="httptools"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            await task
        await asyncio.sleep(0.01)
    bound_port: int = sock.getsockname()[1]
    return server, task, bound_port
