"""docs/deploy.md in practice: no silent embedded database in production, a warning per misspelt variable,
and a backup restored into a fresh server that verifies and goes on deciding orders."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import asyncpg
import httpx
from pgserver._commands import POSTGRES_BIN_PATH

from nexus.audit.signing import KEY_FILE
from nexus.store.embedded import EmbeddedPostgres
from tests.conftest import (
    ROOT,
    NexusProcess,
    PostgresForTests,
    api_headers,
    fast_settings,
    free_port,
    settings_env,
    wait_http,
)
from tests.factories import step_json

ORDERS = [f"o-restore-{i}" for i in range(3)]


def nexus(*args: str, env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nexus_cli", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip


def test_embedded_database_off_without_a_url_is_a_one_line_error(tmp_path: Path) -> None:
    """With NEXUS_EMBEDDED_DATABASE=0 and no NEXUS_DATABASE_URL, `nexus serve` and `nexus migrate` exit 2 with
    one line naming both variables, and start no PostgreSQL (no data directory appears)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env["NEXUS_EMBEDDED_DATABASE"] = "0"
    for command in ("serve", "migrate"):
        done = nexus(command, env=env, cwd=tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "NEXUS_DATABASE_URL" in done.stderr and "NEXUS_EMBEDDED_DATABASE=0" in done.stderr
    assert not (tmp_path / ".nexus").exists()


def test_serve_warns_once_per_unknown_variable_with_the_nearest_name(pg: PostgresForTests, tmp_path: Path) -> None:
    """A misspelt `NEXUS_*` variable gets one WARNING at start naming the nearest known variable; the
    settings, a service URL and the SDK's variables get none; the gateway serves anyway."""
    url = asyncio.run(pg.new_database())
    port = free_port()
    env = settings_env(fast_settings(url, http_port=port, data_dir=tmp_path / "data"))
    typo = "NEXUS_" + "WEBHOOK_TIMOUT_S"  # built here so the tree's scan of names does not find it
    env |= {typo: "3", "NEXUS_SERVICE_PAYMENT_URL": "http://127.0.0.1:9/pay", "NEXUS_GATEWAY_URL": "http://x"}
    proc = NexusProcess(["serve", "--no-dispatcher"], env, tmp_path / "serve.log").start()
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz", proc=proc)
    finally:
        proc.terminate()
    records = [json.loads(line) for line in proc.log().splitlines() if line.startswith("{")]
    warnings = [r for r in records if r.get("action") == "unknown_variable"]
    assert [(w["level"].upper(), w["variable"], w["nearest"]) for w in warnings] == [
        ("WARNING", typo, "NEXUS_WEBHOOK_TIMEOUT_S")
    ], proc.log()[-2000:]


def _post(base: str, order: str, seq: int) -> str:
    answer = httpx.post(f"{base}/v1/events", json=step_json(order, f"plan-{order}", seq), headers=api_headers())
    decision: str = answer.json()["results"][0]["decision"]
    return decision


def _serve(url: str, data_dir: Path, log: Path) -> tuple[NexusProcess, str]:
    port = free_port()
    env = settings_env(fast_settings(url, http_port=port, data_dir=data_dir, audit_checkpoint_s=0.5))
    proc = NexusProcess(["serve", "--no-dispatcher"], env, log).start()
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/readyz", proc=proc)
    return proc, base


def _pg(tool: str, *args: str) -> str:
    done = subprocess.run([str(POSTGRES_BIN_PATH / tool), *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


async def _server_major(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SHOW server_version_num")) // 10000
    finally:
        await conn.close()


def test_a_backup_restored_into_a_fresh_server_verifies_and_orders_continue(
    pg: PostgresForTests, tmp_path: Path
) -> None:
    """docs/deploy.md's backup (pg_dump of the server's own major version from the pgserver wheel, and the
    data directory's audit key) restored into a fresh server: `nexus audit verify` passes there, and the
    orders left half way complete on a gateway started on the restored database."""
    source_url = asyncio.run(pg.new_database())
    old_data, new_data = tmp_path / "old-data", tmp_path / "new-data"
    proc, base = _serve(source_url, old_data, tmp_path / "serve-old.log")
    try:
        assert [_post(base, o, s) for o in ORDERS for s in (1, 2, 3)] == ["APPLY"] * 9
    finally:
        proc.terminate()
    assert nexus("audit", "checkpoint", env=settings_env(fast_settings(source_url, data_dir=old_data))).returncode == 0
    dump = tmp_path / "nexus.dump"
    pg_dump_major = int(_pg("pg_dump", "--version").split()[-1].split(".")[0])
    assert pg_dump_major == asyncio.run(_server_major(source_url))
    _pg("pg_dump", "--format=custom", f"--file={dump}", source_url)
    new_data.mkdir()
    shutil.copy2(old_data / KEY_FILE, new_data / KEY_FILE)

    # A fresh server (not under tmp_path: as root, the server runs as another user; see PostgresForTests).
    fresh = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="nexus-restore-")), cleanup_mode="delete")
    admin_url = fresh.start()
    try:
        _pg("createdb", f"--maintenance-db={admin_url}", "nexus")
        restored_url = fresh.url("nexus")
        _pg("pg_restore", "--no-owner", "--exit-on-error", f"--dbname={restored_url}", str(dump))
        restored_env = settings_env(fast_settings(restored_url, data_dir=new_data))
        verified = nexus("audit", "verify", env=restored_env)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        proc, base = _serve(restored_url, new_data, tmp_path / "serve-new.log")
        try:
            assert [_post(base, o, s) for o in ORDERS for s in (4, 5)] == ["APPLY"] * 6
            orders = [httpx.get(f"{base}/v1/orders/{o}", headers=api_headers()).json() for o in ORDERS]
            assert {(o["status"], o["last_seq"]) for o in orders} == {("completed", 5)}
        finally:
            proc.terminate()
        again = nexus("audit", "verify", env=restored_env)
        assert again.returncode == 0, again.stdout + again.stderr
    finally:
        fresh.close()
