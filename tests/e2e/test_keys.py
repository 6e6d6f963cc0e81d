"""`nexus keys` against the database, revocation seen by a second gateway process, /metrics access and
rate limits on a real `nexus serve`."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx

from nexus.settings import Settings
from tests.conftest import ROOT, api_headers, free_port, root_headers, settings_env


def keys_cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nexus.cli", "keys", *args],
        env=settings_env(settings),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_revoked_key_is_refused_by_every_gateway_within_a_second(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """A key made by `nexus keys create` (alone on the last line) works on two gateway processes; after
    `nexus keys revoke ID` both refuse it with 401 within ~1 s; `nexus keys list` starts lines with ids."""
    _, first = start_gateway("--no-dispatcher")
    _, second = start_gateway("--no-dispatcher")
    made = keys_cli(settings, "create", "--tenant", "acme", "--role", "agent,operator", "--name", "ci")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip().splitlines()[-1]
    assert key.startswith("nxk_") and " " not in key and len(key) > 40
    listed = keys_cli(settings, "list").stdout.strip().splitlines()
    mine = [line for line in listed if "name=ci" in line]
    assert len(mine) == 1 and key not in "".join(listed)
    key_id = mine[0].split()[0]
    assert key_id.isdigit()
    headers = {"Authorization": f"Bearer {key}"}
    for base in (first, second):
        assert httpx.get(f"{base}/v1/dead-letters", headers=headers).status_code == 200
    assert keys_cli(settings, "revoke", key_id).returncode == 0
    revoked_at = time.monotonic()
    pending = {first, second}
    while pending:
        assert time.monotonic() - revoked_at < 1.5, f"still accepted by {pending}"
        for base in list(pending):
            if httpx.get(f"{base}/v1/dead-letters", headers=headers).status_code == 401:
                pending.discard(base)
        time.sleep(0.05)
    assert "revoked" in next(line for line in keys_cli(settings, "list").stdout.splitlines() if line.startswith(key_id))


def test_keys_create_refuses_an_agent_key_for_every_tenant(settings: Settings) -> None:
    """`--tenant '*'` is for operators and admins: an agent-only key spanning tenants is refused."""
    done = keys_cli(settings, "create", "--tenant", "*", "--role", "agent")
    assert done.returncode == 1 and "span" in done.stderr
    assert keys_cli(settings, "create", "--tenant", "*", "--role", "operator").returncode == 0


def test_metrics_need_an_operator_key_unless_served_on_their_own_address(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """/metrics on the API: 401 without a key, 403 with a tenant's operator key, 200 with an operator key
    spanning every tenant; NEXUS_METRICS_BIND serves it
    without a key on its own port."""
    bind = f"127.0.0.1:{free_port()}"
    _, base = start_gateway("--no-dispatcher", settings_=settings.replace(metrics_bind=bind))
    assert httpx.get(f"{base}/metrics").status_code == 401
    assert httpx.get(f"{base}/metrics", headers=api_headers()).status_code == 403  # one tenant's operator
    assert httpx.get(f"{base}/metrics", headers=root_headers()).status_code == 200
    deadline = time.monotonic() + 10
    while True:
        try:
            answer = httpx.get(f"http://{bind}/metrics")
            break
        except httpx.ConnectError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert answer.status_code == 200 and "nexus_" in answer.text
    assert httpx.get(f"http://{bind}/v1/dead-letters").status_code == 404  # only metrics there


def test_rate_limit_per_key_answers_429_with_retry_after(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """With 5 requests/s for operators, a burst of 12 gets 429 RATE_LIMITED with Retry-After, and
    another key is unaffected."""
    _, base = start_gateway("--no-dispatcher", settings_=settings.replace(rate_limit_operator=5.0))
    burst, other = (
        keys_cli(settings, "create", "--tenant", "default", "--role", "operator").stdout.strip().splitlines()[-1]
        for _ in range(2)
    )
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {burst}"}) as api:
        answers = [api.get("/v1/dead-letters") for _ in range(12)]
    statuses = [a.status_code for a in answers]
    assert statuses.count(200) >= 5 and 429 in statuses
    limited = next(a for a in answers if a.status_code == 429)
    assert limited.json()["code"] == "RATE_LIMITED" and int(limited.headers["retry-after"]) >= 1
    assert httpx.get(f"{base}/v1/dead-letters", headers={"Authorization": f"Bearer {other}"}).status_code == 200
