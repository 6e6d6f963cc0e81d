"""`nexus serve` on its embedded PostgreSQL: starts with nothing installed, and stops cleanly."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from tests.conftest import NexusProcess, free_port, wait_http
from tests.factories import step_json


def test_sigterm_shuts_down_and_stops_the_embedded_postgres(tmp_path: Path) -> None:
    """SIGTERM to `nexus serve` ends it with status 0 after it stopped the embedded PostgreSQL it started."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env["NEXUS_HTTP_PORT"] = str(port)
    # Not under tmp_path: the embedded server runs as another user when we are root, and pytest resets the
    # permissions of its base directory when another pytest process starts (see PostgresForTests).
    data = Path(tempfile.mkdtemp(prefix="nexus-life-")) / "data"
    proc = NexusProcess(["serve", "--data-dir", str(data)], env, tmp_path / "serve.log").start()
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60, proc=proc)
        # A fresh database: the first serve wrote a bootstrap admin key (0600), which makes an agent key.
        admin_file = data / "admin.key"
        assert admin_file.stat().st_mode & 0o777 == 0o600
        admin = admin_file.read_text().strip()
        assert str(admin_file.resolve()) in proc.log() and admin not in proc.log()
        made = httpx.post(
            f"http://127.0.0.1:{port}/v1/keys",
            json={"tenant": "default", "roles": ["agent"]},
            headers={"Authorization": f"Bearer {admin}"},
        )
        assert made.status_code == 201, made.text
        body = httpx.post(
            f"http://127.0.0.1:{port}/v1/events",
            json=step_json("o-life", "p", 1),
            headers={"Authorization": f"Bearer {made.json()['key']}"},
        ).json()
        assert body["results"][0]["decision"] == "APPLY"
        postmaster = int((data / "pgdata" / "postmaster.pid").read_text().split()[0])
        assert psutil.pid_exists(postmaster)
        assert proc.proc is not None
        os.kill(proc.proc.pid, signal.SIGTERM)  # the process only, not its group: it must stop PostgreSQL itself
        assert proc.proc.wait(30) == 0, proc.log()[-2000:]
        deadline = time.monotonic() + 15
        while psutil.pid_exists(postmaster) and psutil.Process(postmaster).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "embedded PostgreSQL still running after nexus serve exited"
            time.sleep(0.1)
    finally:
        proc.kill()
