"""The embedded PostgreSQL after a crash: the next `nexus serve` adopts the server left running, owns it,
and stops it when it stops."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from tests.conftest import NexusProcess, free_port, wait_http
from tests.factories import step_json


def _serve(tmp_path: Path, data: Path, name: str) -> tuple[NexusProcess, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env["NEXUS_HTTP_PORT"] = str(port)
    proc = NexusProcess(["serve", "--data-dir", str(data)], env, tmp_path / f"{name}.log").start()
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/healthz", timeout=60, proc=proc)
    return proc, base


def _postmaster(data: Path) -> int:
    return int((data / "pgdata" / "postmaster.pid").read_text().split()[0])


def _postgres_of(data: Path) -> list[psutil.Process]:
    """Running postgres processes serving `data`'s pgdata (the postmaster names it on its command line)."""
    pgdata = str((data / "pgdata").resolve())
    found = []
    for p in psutil.process_iter(["name", "cmdline", "status"]):
        if p.info["status"] != psutil.STATUS_ZOMBIE and pgdata in " ".join(p.info["cmdline"] or ()):
            found.append(p)
    return found


def _wait_gone(data: Path, timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    left = _postgres_of(data)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _postgres_of(data)
    return left


def test_the_server_left_by_a_killed_serve_is_adopted_and_stopped_by_its_adopter(tmp_path: Path) -> None:
    """SIGKILL `nexus serve`; a new `nexus serve` on the same --data-dir adopts the running PostgreSQL, and on
    SIGTERM stops it (no postgres process of that data directory is left); the data written before survives."""
    # Not under tmp_path: the embedded server runs as another user when we are root, and pytest resets
    # the permissions of its base directory when another pytest process starts (see PostgresForTests).
    data = Path(tempfile.mkdtemp(prefix="nexus-adopt-")) / "data"
    first, base = _serve(tmp_path, data, "first")
    procs = [first]
    try:
        # A fresh data directory: its only key is the bootstrap admin key, which makes the agent key we use.
        admin = {"authorization": f"Bearer {(data / 'admin.key').read_text().strip()}"}
        made = httpx.post(f"{base}/v1/keys", json={"tenant": "default", "roles": ["agent"]}, headers=admin)
        assert made.status_code == 201, made.text
        agent = {"authorization": f"Bearer {made.json()['key']}"}
        body = httpx.post(f"{base}/v1/events", json=step_json("o-adopt", "p-adopt", 1), headers=agent).json()
        assert body["results"][0]["decision"] == "APPLY"
        postmaster = _postmaster(data)
        assert first.proc is not None
        os.kill(first.proc.pid, signal.SIGKILL)  # the gateway only: its PostgreSQL lives on, as after a crash
        first.proc.wait(10)
        assert psutil.pid_exists(postmaster)

        second, base = _serve(tmp_path, data, "second")
        procs.append(second)
        assert _postmaster(data) == postmaster, "the running server was not adopted"
        assert second.proc is not None
        os.kill(second.proc.pid, signal.SIGTERM)
        assert second.proc.wait(30) == 0, second.log()[-2000:]
        left = _wait_gone(data, 15)
        assert left == [], f"postgres of {data} still running after its adopter stopped: {left}"

        third, base = _serve(tmp_path, data, "third")
        procs.append(third)
        order = httpx.get(f"{base}/v1/orders/o-adopt", headers=agent)
        assert order.status_code == 200
        assert order.json()["last_seq"] == 1
        third.terminate()
        assert _wait_gone(data, 15) == []
    finally:
        for p in procs:
            p.kill()
        for p in _postgres_of(data):
            p.kill()
        shutil.rmtree(data.parent, ignore_errors=True)
