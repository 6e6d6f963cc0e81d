"""`nexus serve --workers 2`: two HTTP processes on one port, with metrics, rate limits and console
sessions that hold across them, and a supervisor that leaves no process behind."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import (
    NexusProcess,
    PostgresForTests,
    api_headers,
    fast_settings,
    free_port,
    root_headers,
    settings_env,
    wait_http,
)
from tests.factories import step_json

RATE = 10.0  # the agent role's requests per second, for the whole serve
CLOSE = {"connection": "close"}  # a new connection per request: the kernel picks a process for each
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclasses.dataclass
class Served:
    proc: NexusProcess
    base: str
    port: int
    metrics_port: int | None = None

    @property
    def pid(self) -> int:
        assert self.proc.proc is not None
        return self.proc.proc.pid

    def workers(self) -> list[psutil.Process]:
        """The HTTP processes (spawned children; not multiprocessing's resource tracker)."""
        children = psutil.Process(self.pid).children()
        return [c for c in children if "spawn_main" in " ".join(c.cmdline())]


def _start(pg: PostgresForTests, log: Path, *flags: str, metrics_port: int | None = None, workers: int = 2) -> Served:
    url = asyncio.run(pg.new_database())
    port = free_port()
    settings = fast_settings(url, rate_limit_agent=RATE, http_port=port)
    if metrics_port is not None:
        settings = settings.replace(metrics_bind=f"127.0.0.1:{metrics_port}")
    proc = NexusProcess(["serve", "--workers", str(workers), *flags], settings_env(settings), log).start()
    served = Served(proc, f"http://127.0.0.1:{port}", port, metrics_port)
    try:
        wait_http(served.base + "/healthz", proc=proc)
        deadline = time.monotonic() + 60
        while "nexus serving at" not in proc.log():  # printed once both processes answer
            assert proc.alive and time.monotonic() < deadline, proc.log()[-2000:]
            time.sleep(0.05)
    except BaseException:
        proc.kill()
        raise
    return served


@pytest.fixture(scope="module")
def two(pg: PostgresForTests, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One `nexus serve --workers 2` shared by the read-only tests of this module."""
    served = _start(pg, tmp_path_factory.mktemp("workers") / "serve.log", metrics_port=free_port())
    yield served
    served.proc.terminate()  # SIGTERM, then SIGKILL: the supervisor removes its metrics directory


@pytest.fixture
def own(pg: PostgresForTests, tmp_path: Path) -> Iterator[Served]:
    """A `nexus serve --workers 2` of this test's own, to be stopped or broken by it."""
    served = _start(pg, tmp_path / "serve.log", "--no-dispatcher")
    metrics_dir = Path(served.workers()[0].environ()["PROMETHEUS_MULTIPROC_DIR"])
    yield served
    served.proc.terminate()
    shutil.rmtree(metrics_dir, ignore_errors=True)  # left by a supervisor this test SIGKILLed


def test_two_processes_accept_connections_on_one_port(two: Served) -> None:
    """Connections to the one port are spread over both worker processes (each holds some of them)."""
    assert len(two.workers()) == 2
    clients = [httpx.Client(base_url=two.base, headers=api_headers()) for _ in range(32)]
    try:
        for client in clients:
            assert client.get("/healthz").status_code == 200
        holding = {
            w.pid
            for w in two.workers()
            if any(c.laddr.port == two.port and c.status == psutil.CONN_ESTABLISHED for c in w.net_connections("tcp"))
        }
        assert holding == {w.pid for w in two.workers()}
    finally:
        for client in clients:
            client.close()


def _applied(text: str) -> float:
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = families["nexus_events_processed"].samples
    return sum(s.value for s in samples if s.name.endswith("_total") and s.labels["outcome"] == "apply")


def test_metrics_of_any_process_count_the_events_of_both(two: Served) -> None:
    """After K events spread over both processes, /metrics answered by either (and the metrics listener)
    reports K applied events."""
    k = 30
    for i in range(k):
        body = httpx.post(
            f"{two.base}/v1/events", json=step_json(f"o-met-{i}", "p-met", 1), headers=api_headers(**CLOSE)
        )
        assert body.json()["results"][0]["decision"] == "APPLY"
    for _ in range(6):
        scraped = httpx.get(f"{two.base}/metrics", headers=root_headers(**CLOSE))
        assert scraped.status_code == 200 and _applied(scraped.text) == k
    # The keyless listener (NEXUS_METRICS_BIND) runs once, in the first process, and counts both too.
    assert _applied(httpx.get(f"http://127.0.0.1:{two.metrics_port}/metrics").text) == k


def test_a_console_session_made_by_one_process_is_known_to_the_other(two: Served) -> None:
    """Signed in once, every page answers on any connection (so on either process), never the sign-in redirect."""
    with httpx.Client(base_url=two.base, headers=CLOSE) as browser:
        token = CSRF.search(browser.get("/console/login").text)
        assert token is not None
        signed = browser.post(
            "/console/login", data={"csrf": token.group(1), "api_key": api_headers()["Authorization"][7:]}
        )
        assert signed.status_code == 303 and signed.headers["location"] == "/console/orders"
        statuses = [browser.get("/console/orders").status_code for _ in range(12)]
    assert statuses == [200] * 12


async def test_a_burst_over_many_connections_is_granted_the_limit_once_not_per_process(two: Served) -> None:
    """With 2 processes and an agent limit of RATE/s, a burst on 120 connections gets about RATE answers, not 2x."""
    made = httpx.post(f"{two.base}/v1/keys", json={"tenant": "default", "roles": ["agent"]}, headers=api_headers())
    assert made.status_code == 201, made.text
    headers = {"Authorization": f"Bearer {made.json()['key']}", **CLOSE}
    limits = httpx.Limits(max_connections=120, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=two.base, headers=headers, limits=limits, timeout=30) as client:
        started = time.monotonic()
        answers = await asyncio.gather(*(client.get("/v1/processes") for _ in range(120)))
        elapsed = time.monotonic() - started
    granted = sum(a.status_code == 200 for a in answers)
    assert {a.status_code for a in answers} == {200, 429}
    # One second's worth at first, then the refill while the burst lasts: 2x that is what two undivided
    # buckets would grant.
    assert RATE / 2 <= granted <= RATE * (1 + elapsed) + 1, (granted, elapsed)


def test_sigterm_stops_every_process_and_removes_the_metrics_directory(own: Served) -> None:
    """SIGTERM to the supervisor: exit 0, no worker (nor helper) process left, the metrics directory gone."""
    family = [psutil.Process(own.pid), *psutil.Process(own.pid).children(recursive=True)]
    assert len(family) >= 3
    metrics_dir = Path(own.workers()[0].environ()["PROMETHEUS_MULTIPROC_DIR"])
    assert metrics_dir.is_dir()
    os.kill(own.pid, signal.SIGTERM)
    assert own.proc.proc is not None and own.proc.proc.wait(30) == 0, own.proc.log()[-2000:]
    _, alive = psutil.wait_procs(family[1:], timeout=10)
    assert alive == [] and not metrics_dir.exists()


def test_a_worker_that_dies_takes_the_serve_down_non_zero(own: Served) -> None:
    """SIGKILL of one worker: the supervisor stops the other and exits 1 (a process supervisor restarts it)."""
    family = psutil.Process(own.pid).children(recursive=True)
    own.workers()[1].kill()
    assert own.proc.proc is not None and own.proc.proc.wait(30) == 1, own.proc.log()[-2000:]
    _, alive = psutil.wait_procs(family, timeout=10)
    assert alive == [] and "exited -9" in own.proc.log()


def test_workers_do_not_outlive_a_killed_supervisor(own: Served) -> None:
    """SIGKILL of the supervisor itself: its workers are stopped by the kernel's parent-death signal."""
    family = psutil.Process(own.pid).children(recursive=True)
    os.kill(own.pid, signal.SIGKILL)
    _, alive = psutil.wait_procs(family, timeout=20)
    assert alive == []


def test_one_worker_is_one_process_as_before(pg: PostgresForTests, tmp_path: Path) -> None:
    """`--workers 1` (the default) runs no supervisor: the serve process itself holds the connections."""
    served = _start(pg, tmp_path / "serve.log", "--no-dispatcher", workers=1)
    try:
        with httpx.Client(base_url=served.base, headers=api_headers()) as client:
            assert client.get("/healthz").status_code == 200
            me = psutil.Process(served.pid)
            assert me.children() == []
            assert any(
                c.laddr.port == served.port and c.status == psutil.CONN_ESTABLISHED for c in me.net_connections()
            )
        assert "(1 workers)" not in served.proc.log()
    finally:
        served.proc.terminate()
