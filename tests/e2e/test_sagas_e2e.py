"""Sagas through the real processes: `nexus services`, `nexus serve` (HTTP API and executors), `nexus sagas`."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from nexus.settings import Settings
from nexus_lab.procs import NEXUS_CMD
from nexus_lab.services import SERVICES
from tests.conftest import NexusProcess, api_headers, fast_settings, free_port, settings_env, wait_http
from tests.factories import step_json


def _wait_order(client: httpx.Client, order: str, status: str, timeout: float = 20.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body: dict[str, Any] = client.get(f"/v1/orders/{order}").json()
        if body.get("status") == status and (body.get("effect") is None or status == "aborted"):
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"order {order} never reached {status}: {body}")
        time.sleep(0.1)


def test_serve_performs_effects_and_shows_the_saga(
    database_url: str, nexus_procs: list[NexusProcess], tmp_path: Path
) -> None:
    """`nexus serve` with NEXUS_SERVICE_<NAME>_URL calls the services once per step; GET /v1/orders/{id}
    shows `effect` while a step waits and the saga with its steps at the end; a declined charge is
    compensated and aborts the plan; `nexus sagas list --status COMPENSATED` lists it."""
    port = free_port()
    services = NexusProcess(["services", "--port", str(port)], {"PATH": "/usr/bin:/bin"}, tmp_path / "s.log").start()
    nexus_procs.append(services)
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/health", proc=services)
    settings: Settings = fast_settings(database_url, saga_poll_s=0.05, saga_retry_base_ms=10, saga_max_attempts=2)
    gateway_port = free_port()
    env = settings_env(settings.replace(http_port=gateway_port))
    env.update({f"NEXUS_SERVICE_{name.upper()}_URL": f"{base}/{name}" for name in SERVICES})
    gateway = NexusProcess(["serve"], env, tmp_path / "serve.log").start()
    nexus_procs.append(gateway)
    url = f"http://127.0.0.1:{gateway_port}"
    wait_http(url + "/healthz", proc=gateway)
    with httpx.Client(base_url=url, headers=api_headers(), timeout=10) as client:
        steps = [step_json("e1", "plan-e1", s, process="fulfilment") for s in (1, 2)]
        answers = client.post("/v1/events", json={"events": steps}).json()["results"]
        assert answers[1]["decision"] == "APPLY" and answers[1]["effect"]["status"] == "running"
        _wait_order(client, "e1", "inventory_validated")
        for s in (3, 4, 5):
            client.post("/v1/events", json=step_json("e1", "plan-e1", s, process="fulfilment"))
        done = _wait_order(client, "e1", "completed")
        assert done["saga"]["status"] == "COMPLETED"
        assert [st["status"] for st in done["saga"]["steps"]] == ["COMPLETED"] * 4
        httpx.post(base + "/_faults", json={"service": "payment", "permanent_fail_rate": 1})
        for s in (1, 2, 3):
            client.post("/v1/events", json=step_json("e2", "plan-e2", s, process="fulfilment"))
        aborted = _wait_order(client, "e2", "aborted")
        assert aborted["saga"]["status"] == "COMPENSATED"
        ledgers = httpx.get(base + "/ledgers").json()
    assert [e["kind"] for e in ledgers["inventory"]["entries"]] == ["reserve", "reserve", "release"]
    assert [e["kind"] for e in ledgers["payment"]["entries"]] == ["charge"]
    listed = subprocess.run(
        [*NEXUS_CMD, "sagas", "list", "--status", "COMPENSATED"],
        env=settings_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert [s["order_id"] for s in json.loads(listed.stdout)] == ["e2"]


async def test_reactive_agent_follows_both_seed_paths(
    database_url: str, nexus_procs: list[NexusProcess], tmp_path: Path
) -> None:
    """The reactive agent, through the SDK's wait(after_status), completes an order whose effects all
    succeed, and ends a plan whose charge is declined as payment_rejected (the gateway released the
    reservation and aborted the plan); `nexus agent --reactive` runs the same graph."""
    from nexus_client import AsyncNexusClient
    from nexus_client.config import ClientConfig
    from nexus_lab.agent.reactive import run_reactive

    port = free_port()
    services = NexusProcess(["services", "--port", str(port)], {"PATH": "/usr/bin:/bin"}, tmp_path / "s.log").start()
    nexus_procs.append(services)
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/health", proc=services)
    settings: Settings = fast_settings(database_url, saga_poll_s=0.05, saga_retry_base_ms=10, saga_max_attempts=2)
    gateway_port = free_port()
    env = settings_env(settings.replace(http_port=gateway_port))
    env.update({f"NEXUS_SERVICE_{name.upper()}_URL": f"{base}/{name}" for name in SERVICES})
    gateway = NexusProcess(["serve"], env, tmp_path / "serve.log").start()
    nexus_procs.append(gateway)
    url = f"http://127.0.0.1:{gateway_port}"
    wait_http(url + "/healthz", proc=gateway)
    client = AsyncNexusClient(ClientConfig.from_env(env, gateway_url=url))
    try:
        ok = await run_reactive(client, 1, prefix="ok")
        httpx.post(base + "/_faults", json={"service": "payment", "permanent_fail_rate": 1})
        declined = await run_reactive(client, 1, prefix="no")
    finally:
        await client.aclose()
    assert [r["outcome"] for r in ok] == ["completed"], ok
    assert [r["outcome"] for r in declined] == ["payment_rejected"], declined
    assert declined[0]["status"] == "aborted"
    ledgers = httpx.get(base + "/ledgers").json()
    assert [e["kind"] for e in ledgers["inventory"]["entries"]] == ["reserve", "reserve", "release"]
    httpx.post(base + "/_faults", json={"service": "payment", "permanent_fail_rate": 0})
    cli = subprocess.run(
        [*NEXUS_CMD, "agent", "--reactive", "--orders", "1", "--gateway-url", url, "--seed", "cli"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "completed 1" in cli.stdout, cli.stdout + cli.stderr
