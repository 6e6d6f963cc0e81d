"""The LLM planner fails fast and says why: a refused key, a wrong URL or nothing listening (at the model
or at the gateway) stops `nexus agent --planner llm` at once, non-zero, with one line and no traceback."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, TEST_API_KEY, free_port

pytestmark = pytest.mark.slow


class Refusing:
    """A real HTTP server answering every request with one status and an OpenAI-style error body."""

    def __init__(self, status: int) -> None:
        self.requests = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.requests += 1
                self.rfile.read(int(self.headers.get("content-length") or 0))
                body = json.dumps({"error": {"message": f"refused with {status}", "type": "invalid_request"}})
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            do_GET = do_POST

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def gateway(start_gateway: Any) -> str:
    _, base = start_gateway("--no-dispatcher")
    return str(base)


@pytest.fixture
def refusing() -> Iterator[Any]:
    servers: list[Refusing] = []

    def make(status: int) -> Refusing:
        servers.append(Refusing(status))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def run_planner(
    gateway: str, model_url: str, tmp: Path, **env_extra: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "SIM_"))}
    env.update(
        NEXUS_LLM_BASE_URL=model_url,
        NEXUS_LLM_MODEL="nexus-fake-1",
        NEXUS_API_KEY=TEST_API_KEY,
        NEXUS_LLM_RETRY_BASE_MS="5",
        NEXUS_LLM_RETRY_MAX_MS="20",
        NEXUS_LLM_RETRY_ATTEMPTS="3",
    )
    env.update(env_extra)
    args = [sys.executable, "-m", "nexus_cli", "agent", "--planner", "llm", "--orders", "6", "--concurrency", "3",
            "--gateway-url", gateway, "--report", str(tmp / "report.json")]  # fmt: skip
    t0 = time.monotonic()
    done = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    return done, time.monotonic() - t0


def assert_one_line(done: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit non-zero; stderr is one line naming the cause; no traceback anywhere."""
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "Traceback" not in output and "ExceptionGroup" not in output, output
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, output
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(("status", "hint"), [(401, "NEXUS_LLM_API_KEY"), (403, "NEXUS_LLM_API_KEY"),
                                              (404, "NEXUS_LLM_BASE_URL")])  # fmt: skip
def test_a_model_refusing_the_request_stops_the_run_at_once(
    gateway: str, refusing: Any, tmp_path: Path, status: int, hint: str
) -> None:
    """401/403/404 from the model: no retry, no plan given up one by one; one line with the status and hint."""
    model = refusing(status)
    done, elapsed = run_planner(gateway, model.url, tmp_path)
    assert_one_line(done, f"HTTP {status}", f"refused with {status}", hint)
    assert model.requests <= 3  # one per concurrent plan at most, never a retry
    assert elapsed < 30
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["error"] and not report["complete"]


def test_a_model_nobody_answers_for_stops_the_run_after_its_retries(gateway: str, tmp_path: Path) -> None:
    """Connection refused at the model's URL: after NEXUS_LLM_RETRY_ATTEMPTS, exit non-zero with one line."""
    done, _ = run_planner(gateway, f"http://127.0.0.1:{free_port()}/v1", tmp_path)
    assert_one_line(done, "cannot reach the model", "after 3 attempts")


def test_a_gateway_refusing_the_key_stops_the_run(refusing: Any, gateway: str, tmp_path: Path) -> None:
    """A wrong NEXUS_API_KEY: the gateway's 401 stops the run with one line naming NEXUS_API_KEY."""
    model = refusing(500)
    done, _ = run_planner(gateway, model.url, tmp_path, NEXUS_API_KEY="nx_wrong-key")
    assert_one_line(done, "HTTP 401", "NEXUS_API_KEY")
    assert model.requests == 0


def test_a_gateway_that_is_down_stops_the_run(refusing: Any, tmp_path: Path) -> None:
    """Nothing listening at the gateway's URL: one line (no 80-line exception group), non-zero."""
    model = refusing(500)
    done, _ = run_planner(f"http://127.0.0.1:{free_port()}", model.url, tmp_path)
    assert_one_line(done, "cannot reach the gateway", "nexus serve")
