"""`nexus serve` logs JSON lines with the stable keys, and refuses a malformed setting by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from nexus.logging import STABLE_KEYS
from tests.conftest import ROOT, NexusProcess, api_headers
from tests.factories import step_json

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def _json_lines(text: str) -> list[dict[str, Any]]:
    lines = []
    for raw in text.splitlines():
        if raw.startswith("{"):
            lines.append(json.loads(raw))
    return lines


def test_an_applied_step_is_logged_with_the_stable_keys(start_gateway: Any) -> None:
    """The log of a real `nexus serve` (not a terminal: JSON lines) has the applied step with every stable key."""
    proc, base = start_gateway()
    assert isinstance(proc, NexusProcess)
    event = step_json("o-logged", "p-logged", 1)
    headers = api_headers(traceparent=f"00-{TRACE_ID}-00f067aa0ba902b7-01")
    body = httpx.post(f"{base}/v1/events", json=event, headers=headers).json()
    assert body["results"][0]["decision"] == "APPLY"
    deadline = time.monotonic() + 10
    found: dict[str, Any] | None = None
    while found is None and time.monotonic() < deadline:
        for line in _json_lines(proc.log()):
            if line.get("event_id") == event["event_id"] and line.get("action") == "decide":
                found = line
        time.sleep(0.05)
    assert found is not None, proc.log()[-3000:]
    assert set(STABLE_KEYS) <= found.keys()
    assert found["decision"] == "APPLY"
    assert found["order_id"] == "o-logged"
    assert found["plan_id"] == "p-logged"
    assert found["tenant_id"] == "default"
    assert found["trace_id"] == TRACE_ID
    assert found["level"] == "info"


def test_a_malformed_variable_stops_serve_naming_it(tmp_path: Path) -> None:
    """NEXUS_HTTP_PORT=abc ends `nexus serve` at once with status 2 and a message naming the variable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env["NEXUS_HTTP_PORT"] = "abc"
    env["NEXUS_DATA_DIR"] = str(tmp_path / "data")
    done = subprocess.run(
        [sys.executable, "-m", "nexus.cli", "serve"], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 2
    assert "NEXUS_HTTP_PORT" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "data").exists()
