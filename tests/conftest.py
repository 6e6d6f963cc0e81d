"""Shared fixtures: a real PostgreSQL (embedded, or NEXUS_TEST_DATABASE_URL), a migrated template database
cloned per test, settings with short intervals, and helpers to run `nexus` processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from nexus.auth.keys import create_key, hash_key
from nexus.auth.roles import Role
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.embedded import EmbeddedPostgres
from nexus.store.migrate import apply_migrations
from nexus_lab.procs import NEXUS_CMD, Proc, free_port, wait_http

__all__ = ["NexusProcess", "free_port", "wait_http"]

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = "nexus_template"


# What a test needs, as markers (registered in pyproject.toml; `make check` runs tests/unit without them):
# by fixture where the fixture is the need, by directory where the directory says it, explicitly otherwise
# (a test that runs `nexus` or promtool itself carries `@pytest.mark.processes`).
_NEEDS_BY_FIXTURE = {
    "pg": ("postgres",),
    "chaos_session": ("postgres", "processes"),
    "kafka_settings": ("kafka",),
    "running_ingress": ("kafka",),
    "producer": ("kafka",),
    "nexus_procs": ("processes",),
    "fuzz_server": ("processes",),
}
_NEEDS_BY_DIRECTORY = {"browser": ("browser", "processes"), "e2e": ("processes",), "chaos": ("processes",)}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        needs: set[str] = set()
        for fixture in getattr(item, "fixturenames", ()):
            needs.update(_NEEDS_BY_FIXTURE.get(fixture, ()))
        relative = Path(str(item.path)).resolve().relative_to(ROOT / "tests").parts
        needs.update(_NEEDS_BY_DIRECTORY.get(relative[0], ()) if len(relative) > 1 else ())
        for need in sorted(needs - {mark.name for mark in item.iter_markers()}):
            item.add_marker(need)


# A test that hangs is stopped by pytest-timeout, which shows the threads' stacks only; the event loop's
# tasks (where an async test actually waits) are shown here, shortly before it does.
_TASK_DUMP_BEFORE_TIMEOUT_S = 15.0


def _dump_asyncio_tasks(nodeid: str) -> None:
    tasks = [t for t in list(asyncio.tasks._all_tasks) if not t.done()]  # diagnostic only
    print(f"\n+++ {nodeid}: still running, {len(tasks)} asyncio task(s) pending +++", file=sys.stderr)
    for task in tasks:
        with contextlib.suppress(Exception):  # read from another thread: best effort
            task.print_stack(limit=12, file=sys.stderr)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    timeout = float(item.config.getoption("timeout", None) or item.config.getini("timeout") or 0)
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        timeout = float(marker.args[0])
    if timeout <= _TASK_DUMP_BEFORE_TIMEOUT_S:
        return (yield)
    timer = threading.Timer(timeout - _TASK_DUMP_BEFORE_TIMEOUT_S, _dump_asyncio_tasks, (item.nodeid,))
    timer.daemon = True
    timer.start()
    try:
        return (yield)
    finally:
        timer.cancel()


# The API key every test database holds (all roles, tenant "default"); see PostgresForTests.create_template.
TEST_API_KEY = "nxk_test-key-all-roles-tenant-default-0000000000000"
TEST_KEY_ROLES = ["admin", "agent", "approver", "operator"]


# A second key every test database holds: operator and admin of every tenant (what `/metrics` on the API
# and `?tenant=` filters need); see PostgresForTests.create_template.
TEST_ROOT_KEY = "nxk_test-key-operator-admin-every-tenant-00000000000"
TEST_ROOT_ROLES = ["admin", "operator"]


def root_headers(**extra: str) -> dict[str, str]:
    """Headers of a request made with the every-tenant operator key, and any `extra`."""
    return {"Authorization": f"Bearer {TEST_ROOT_KEY}", **extra}


def api_headers(**extra: str) -> dict[str, str]:
    """Headers every test request to the gateway's API carries: the test key, and any `extra`."""
    return {"Authorization": f"Bearer {TEST_API_KEY}", **extra}


# What the tests' server does not wait for: an fsync per commit and per checkpoint, whole pages after each
# checkpoint. Each takes effect on reload; none changes what a query or a clean restart sees.
TEST_SERVER_SETTINGS = ("fsync", "synchronous_commit", "full_page_writes")


async def durability_off(admin_url: str, settings: tuple[str, ...] = TEST_SERVER_SETTINGS) -> None:
    """Turn `settings` off on the server of `admin_url`, from now on (ALTER SYSTEM, then a reload)."""
    conn = await asyncpg.connect(admin_url)
    try:
        for setting in settings:
            await conn.execute(f"ALTER SYSTEM SET {setting} = off")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


class PostgresForTests:
    """The session's PostgreSQL server: hands out fresh databases cloned from a migrated template."""

    def __init__(self) -> None:
        self._tmp = tempfile.mkdtemp(prefix="nexus-test-pg-")
        self.embedded = EmbeddedPostgres(Path(self._tmp), cleanup_mode="delete")
        # Nothing written to disk waits for it: this server's data dies with the session (the product's
        # embedded server keeps PostgreSQL's durability; tests/integration/test_embedded_wal.py). A clean stop
        # (`stop_server`, as the outage tests do) still writes everything, so no test that restarts the server
        # loses a commit.
        self.admin_url = self.embedded.start()
        asyncio.run(durability_off(self.admin_url))

    def url(self, database: str) -> str:
        return self.embedded.url(database)

    async def create_template(self) -> None:
        conn = await asyncpg.connect(self.admin_url)
        try:
            await conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE}")
            await conn.execute(f"CREATE DATABASE {TEMPLATE}")
        finally:
            await conn.close()
        conn = await asyncpg.connect(self.url(TEMPLATE))
        try:
            await apply_migrations(conn)
            await conn.execute(
                "INSERT INTO api_keys (name, tenant_id, roles, key_hash) VALUES ('tests', 'default', $1, $2)",
                TEST_KEY_ROLES,
                hash_key(TEST_API_KEY),
            )
            await conn.execute(
                "INSERT INTO api_keys (name, tenant_id, roles, key_hash) VALUES ('tests-root', NULL, $1, $2)",
                TEST_ROOT_ROLES,
                hash_key(TEST_ROOT_KEY),
            )
        finally:
            await conn.close()

    async def new_database(self, template: str = TEMPLATE) -> str:
        """A new database, a copy of `template` (the migrated one, or a test's database no session is using)."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        conn = await asyncpg.connect(self.admin_url)
        try:
            # A file copy of the template's few MB: with fsync off, its two checkpoints write next to nothing,
            # where the default (WAL_LOG) writes every page of the template to the WAL.
            await conn.execute(f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY")
        finally:
            await conn.close()
        return self.url(name)

    def stop_server(self) -> None:
        self.embedded.stop_server()

    def resume(self) -> None:
        self.embedded.resume()

    def close(self) -> None:
        self.embedded.close()
        shutil.rmtree(self._tmp, ignore_errors=True)  # the server removed its pgdata, not the directory around it


@pytest.fixture(scope="session")
def pg() -> Iterator[PostgresForTests]:
    server = PostgresForTests()
    asyncio.run(server.create_template())
    yield server
    server.close()


@pytest.fixture
async def database_url(pg: PostgresForTests) -> str:
    """A fresh, migrated database of its own for each test."""
    return await pg.new_database()


def fast_settings(database_url: str, **overrides: object) -> Settings:
    """Settings with every interval shrunk for tests."""
    base: dict[str, object] = {
        "database_url": database_url,
        "buffer_sweep_interval_s": 0.2,
        "retry_base_ms": 20,
        "retry_max_ms": 200,
        "lease_s": 2.0,
        "breaker_cooldown_s": 1.0,
        "webhook_timeout_s": 2.0,
        "dispatcher_poll_s": 0.05,
        "db_pool_size": 5,
        "drain_grace_s": 0.2,  # no balancer watches a test's gateway: a SIGTERM'd one stops almost at once
        # the tests' receivers listen on 127.0.0.1; the outbound guard's own tests turn this off
        "allow_private_urls": "true",
    }
    base.update(overrides)
    return Settings(**base)  # type: ignore[arg-type]


@pytest.fixture
def settings(database_url: str) -> Settings:
    return fast_settings(database_url)


@pytest.fixture
async def db(settings: Settings) -> AsyncIterator[Database]:
    database = await Database(settings).open(migrate=False)
    yield database
    await database.close()


@pytest.fixture
async def api(db: Database) -> AsyncIterator[httpx.AsyncClient]:
    """The API in process (no server), with an agent key of tenant acme; a module needing another client
    defines its own `api`."""
    from nexus.gateway import Gateway
    from nexus.ingress.http import create_app

    _, key = await create_key(db, "acme", frozenset({Role.AGENT}))
    app = create_app(db, Gateway(db))
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api", headers=headers) as c:
        yield c


def settings_env(settings: Settings) -> dict[str, str]:
    """The NEXUS_* environment that reproduces `settings` in a child process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env["NEXUS_API_KEY"] = TEST_API_KEY  # what the lab's processes (agent, chaos, bench) call the API with
    env.update(settings.to_env())
    return env


class NexusProcess(Proc):
    """A `nexus ...` child process (`python -m nexus_cli`), in its own process group so it can be SIGKILLed
    whole; the lab's `Proc` under the tests' names."""

    def __init__(self, args: list[str], env: dict[str, str], log_path: Path) -> None:
        super().__init__(args[0] if args else "nexus", [*NEXUS_CMD, *args], env, log_path)
        self.args = args

    def start(self) -> NexusProcess:
        super().start()
        return self

    def terminate(self) -> None:
        self.stop(15.0)


@pytest.fixture
def nexus_procs(tmp_path: Path) -> Iterator[list[NexusProcess]]:
    """Collects started processes and kills whatever is still running at teardown."""
    procs: list[NexusProcess] = []
    yield procs
    for p in procs:
        p.kill()


def gateway_starter(settings: Settings, procs: list[NexusProcess], log_dir: Path):  # type: ignore[no-untyped-def]
    """What `start_gateway` returns, for a fixture of any scope: starts go to `procs`, logs to `log_dir`."""

    def _start(*extra: str, settings_: Settings | None = None, port: int | None = None) -> tuple[NexusProcess, str]:
        s = settings_ or settings
        port = port or free_port()
        env = settings_env(s.replace(http_port=port))
        proc = NexusProcess(["serve", *extra], env, log_dir / f"serve-{port}-{len(procs)}.log").start()
        procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        if "--dispatcher-only" not in extra:
            wait_http(base + "/healthz", proc=proc)
        return proc, base

    return _start


@pytest.fixture
def start_gateway(settings: Settings, nexus_procs: list[NexusProcess], tmp_path: Path):  # type: ignore[no-untyped-def]
    """Start `nexus serve` on a free port against the test database; returns (process, base_url)."""
    return gateway_starter(settings, nexus_procs, tmp_path)
