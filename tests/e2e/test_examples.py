"""The SDK's examples (examples/*.py), run as a user runs them, against a real `nexus serve`, with an agent
key of a tenant that is not `default`: from the tree, and with the SDK installed alone in a clean venv."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import asyncpg
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import ROOT

# What the SDK's distribution pulls from the index (httpx, pydantic and theirs) may take a while on a cold cache.
PIP_TIMEOUT_S = 240


async def _agent_key(settings: Settings, tenant: str) -> str:
    db = await Database(settings).open(migrate=False)
    try:
        _, key = await create_key(db, tenant, frozenset({Role.AGENT}))
    finally:
        await db.close()
    return key


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "PYTHON", "VIRTUAL_ENV"))}


def _run(example: str, base: str, key: str, python: str | None = None) -> str:
    """Run the example with the tree's sources (`PYTHONPATH=src`), or with `python` and nothing added."""
    env = _clean_env() | {"NEXUS_GATEWAY_URL": base, "NEXUS_API_KEY": key}
    if python is None:
        env["PYTHONPATH"] = str(ROOT / "src")
    done = subprocess.run(
        [python or sys.executable, str(ROOT / "examples" / example)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("example", ["sync_agent.py", "async_agent.py"])
async def test_an_example_agent_completes_its_order(start_gateway, settings: Settings, example: str) -> None:  # type: ignore[no-untyped-def]
    """The example runs a full order for tenant acme: five steps numbered 1..5 by the gateway (the sync one
    corrects a REJECTED payment, the async one sees a retried call answered DUPLICATE), ending completed."""
    _, base = start_gateway("--no-dispatcher")
    out = _run(example, base, await _agent_key(settings, "acme"))
    lines = out.strip().splitlines()
    assert lines[-1].endswith(": completed"), out
    assert "OrderCompleted: APPLY as seq 5, order completed" in out
    if example == "sync_agent.py":
        assert "PaymentProcessed: REJECTED CHECK_FAILED" in out
    else:
        assert "OrderCreated: APPLY, retried: DUPLICATE (first APPLY)" in out
    order_id = lines[-1].split(":")[0]
    conn = await asyncpg.connect(settings.database_url)
    try:
        tenant = await conn.fetchval("SELECT tenant_id FROM orders WHERE order_id = $1", order_id)
    finally:
        await conn.close()
    assert tenant == "acme"


def _pip(python: str, *args: str) -> None:
    """This environment's pip, run on the interpreter `python` (whose venv then needs no pip of its own)."""
    command = [sys.executable, "-m", "pip", "--python", python, "--disable-pip-version-check", "--quiet", *args]
    done = subprocess.run(command, env=_clean_env(), capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr


def _sdk_alone(where: Path) -> str:
    """A clean venv holding the SDK's distribution and the shared one, built from the tree (their own
    dependencies from the index): its python. The two wheels are built in a venv of their own, with the build
    requirements of their pyproject files installed once (pip's isolation would install them per project)."""
    builder, venv = where / "build-venv", where / "venv"
    for path in (builder, venv):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=60)
    requires = tomllib.loads((ROOT / "packages" / "nexus-client" / "pyproject.toml").read_text())["build-system"]
    _pip(str(builder / "bin" / "python"), "install", *requires["requires"])
    dists = [str(ROOT / "packages" / "nexus-wire"), str(ROOT / "packages" / "nexus-client")]
    wheels = where / "wheels"
    _pip(str(builder / "bin" / "python"), "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), *dists)
    python = str(venv / "bin" / "python")
    _pip(python, "install", *(str(w) for w in sorted(wheels.glob("*.whl"))))
    return python


@pytest.mark.slow
@pytest.mark.processes
async def test_the_sdk_installed_alone_runs_the_example_agent(  # type: ignore[no-untyped-def]
    start_gateway, settings: Settings, tmp_path: Path
) -> None:
    """The SDK installed by itself in a clean venv (nexus-client and nexus-wire, no gateway: `import nexus`
    fails there) runs the sync example agent to a completed order against a real `nexus serve`."""
    python = _sdk_alone(tmp_path)
    probe = [python, "-c", "import nexus_client, importlib.util as u; print(u.find_spec('nexus'))"]
    alone = subprocess.run(probe, env=_clean_env(), cwd=tmp_path, capture_output=True, text=True, check=True)
    assert alone.stdout.strip() == "None"
    _, base = start_gateway("--no-dispatcher")
    out = _run("sync_agent.py", base, await _agent_key(settings, "acme"), python=python)
    assert out.strip().splitlines()[-1].endswith(": completed"), out
    assert "OrderCompleted: APPLY as seq 5, order completed" in out
