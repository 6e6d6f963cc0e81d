"""SIGTERM drains `nexus serve` (nexus.ingress.drain): not ready but still serving for the grace, then its
waits answer their current state and it exits; a hard stop when it takes longer than the drain timeout."""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import time
from pathlib import Path

import httpx

from nexus.ingress.drain import HARD_STOP_STATUS
from tests.conftest import (
    NexusProcess,
    PostgresForTests,
    api_headers,
    fast_settings,
    free_port,
    settings_env,
    wait_http,
)
from tests.factories import step_json


def _serve(pg: PostgresForTests, log: Path, grace_s: float, timeout_s: float) -> tuple[NexusProcess, str]:
    url = asyncio.run(pg.new_database())
    port = free_port()
    settings = fast_settings(url, http_port=port, drain_grace_s=grace_s, drain_timeout_s=timeout_s)
    proc = NexusProcess(["serve"], settings_env(settings), log).start()
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/readyz", timeout=60, proc=proc)
    return proc, base


def _sigterm(proc: NexusProcess) -> int:
    assert proc.proc is not None
    proc.proc.send_signal(signal.SIGTERM)
    return proc.proc.pid


def _read_stream(url: str) -> str:
    """The whole body of an SSE stream, read until the server ends it."""
    with httpx.stream("GET", url, headers=api_headers(), timeout=90) as answer:
        assert answer.status_code == 200, answer.read()
        return "".join(answer.iter_text())


def _wait_draining(base: str) -> httpx.Response:
    deadline = time.monotonic() + 5
    while True:
        ready = httpx.get(base + "/readyz", timeout=5)
        if ready.status_code == 503 or time.monotonic() > deadline:
            return ready
        time.sleep(0.05)


def test_sigterm_answers_not_ready_serves_during_the_grace_then_ends_waits_and_exits(
    pg: PostgresForTests, tmp_path: Path
) -> None:
    """After SIGTERM /readyz answers 503 draining while a step is still applied, then a waiting long poll
    answers the order's current state, an SSE stream ends after sending what it had, and the process exits 0
    before the drain timeout."""
    proc, base = _serve(pg, tmp_path / "serve.log", grace_s=2.5, timeout_s=20.0)
    try:
        first = httpx.post(base + "/v1/events", json=step_json("o-wait", "p-wait", 1), headers=api_headers())
        assert first.json()["results"][0]["decision"] == "APPLY", first.text
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            poll = pool.submit(
                httpx.get,
                base + "/v1/orders/o-wait",
                params={"wait": 60, "after_seq": 1},
                headers=api_headers(),
                timeout=90,
            )
            stream = pool.submit(_read_stream, base + "/v1/orders/o-wait/stream")
            time.sleep(0.5)  # the long poll and the stream are waiting
            signalled = time.monotonic()
            _sigterm(proc)
            ready = _wait_draining(base)
            assert ready.status_code == 503 and ready.json()["status"] == "draining", ready.text
            step = httpx.post(base + "/v1/events", json=step_json("o-grace", "p-grace", 1), headers=api_headers())
            assert step.status_code == 200 and step.json()["results"][0]["decision"] == "APPLY", step.text
            assert time.monotonic() - signalled < 2.5, "the step was not served within the grace"
            answered = poll.result(timeout=30)
            streamed = stream.result(timeout=30)
        assert answered.status_code == 200, answered.text
        assert streamed.count("event: decision") == 1, streamed  # the order's one decision, then its end
        assert answered.json()["last_seq"] == 1  # its current state, long before its 60 s
        assert proc.proc is not None
        assert proc.proc.wait(20) == 0, proc.tail()
        assert time.monotonic() - signalled < 20
    finally:
        proc.kill()


def test_a_drain_longer_than_the_timeout_is_cut_by_the_hard_stop(pg: PostgresForTests, tmp_path: Path) -> None:
    """A process still draining when NEXUS_DRAIN_TIMEOUT_S has passed since SIGTERM exits with the hard
    stop's status, well before its grace would have ended."""
    proc, base = _serve(pg, tmp_path / "serve.log", grace_s=120.0, timeout_s=3.0)
    try:
        signalled = time.monotonic()
        _sigterm(proc)
        assert _wait_draining(base).status_code == 503
        assert proc.proc is not None
        assert proc.proc.wait(60) == HARD_STOP_STATUS, proc.tail()
        assert time.monotonic() - signalled < 60
        assert "not stopped 3s after the signal" in proc.log()
    finally:
        proc.kill()
