"""A streaming standby made by `nexus db standby`: it follows its primary, a synchronous one holds readiness, and a
gateway on a multi-host URL goes on on it once the primary's machine is gone and it is promoted."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest

from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.embedded import EmbeddedPostgres
from nexus_wire.codes import Decision
from tests.factories import step_json
from tests.helpers import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.processes, pytest.mark.timeout(180)]


@pytest.fixture
def servers_dir() -> Iterator[Path]:
    """A directory PostgreSQL's own user can reach (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="nexus-test-standby-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def primary(servers_dir: Path) -> Iterator[tuple[EmbeddedPostgres, str]]:
    server = EmbeddedPostgres(servers_dir / "primary")
    url = server.start()
    yield server, url
    server.close()


class StandbyProcess:
    """`nexus db standby` as the operator runs it; `url` once it printed where it listens."""

    def __init__(self, primary_url: str, data_dir: Path, name: str) -> None:
        self.data_dir = data_dir
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "nexus_cli", "db", "standby", "--primary", primary_url),
                *("--name", name),
                *(
                    "--data-dir",
                    str(data_dir),
                ),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"nexus db standby exited {self.proc.wait()}"
        self.url: str = json.loads(line)["url"]

    async def connect(self) -> asyncpg.Connection:
        for _ in range(150):
            try:
                return await asyncpg.connect(self.url)
            except (OSError, asyncpg.PostgresError):  # starting up: no socket yet, or not accepting yet
                await asyncio.sleep(0.1)
        return await asyncpg.connect(self.url)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
async def standby(primary: tuple[EmbeddedPostgres, str], servers_dir: Path) -> AsyncIterator[StandbyProcess]:
    process = StandbyProcess(primary[1], servers_dir / "standby", "s1")
    try:
        yield process
    finally:
        process.stop()


def _socket_dir(url: str) -> str:
    return url.split("host=", 1)[1].split("&", 1)[0]


async def test_standby_follows_its_primary_and_takes_writes_once_promoted(
    primary: tuple[EmbeddedPostgres, str], standby: StandbyProcess
) -> None:
    """A row committed on the primary reaches the standby, which refuses writes until `nexus db promote`."""
    main = await asyncpg.connect(primary[1])
    await main.execute("CREATE TABLE followed (x int); INSERT INTO followed VALUES (1)")
    replica = await standby.connect()
    assert await replica.fetchval("SELECT pg_is_in_recovery()") is True

    async def arrived() -> bool:
        return bool(await replica.fetchval("SELECT to_regclass('followed') IS NOT NULL"))

    await wait_until(arrived, 30, "the primary's table on the standby")
    assert await replica.fetchval("SELECT count(*) FROM followed") == 1
    with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
        await replica.execute("INSERT INTO followed VALUES (2)")
    names = [r["application_name"] for r in await main.fetch("SELECT application_name FROM pg_stat_replication")]
    assert names == ["s1"]

    done = subprocess.run(
        [sys.executable, "-m", "nexus_cli", "db", "promote", "--data-dir", str(standby.data_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    promoted = await standby.connect()
    await promoted.execute("INSERT INTO followed VALUES (2)")
    assert await promoted.fetchval("SELECT count(*) FROM followed") == 2
    for conn in (main, replica, promoted):
        await conn.close()


async def test_a_synchronous_standby_away_makes_the_gateway_not_ready(
    primary: tuple[EmbeddedPostgres, str], standby: StandbyProcess
) -> None:
    """With NEXUS_SYNC_STANDBY the primary waits for that standby, and readiness is refused once it stops."""
    db = await Database(Settings(database_url=primary[1], sync_standby="s1")).open()
    try:
        assert await db.fetchval("SHOW synchronous_standby_names") == '"s1"'

        async def synchronous() -> bool:
            return await db.not_ready() is None

        await wait_until(synchronous, 30, "the standby acknowledged as synchronous")
        state = await db.fetchval("SELECT sync_state FROM pg_stat_replication WHERE application_name = 's1'")
        assert state == "sync"
        standby.stop()

        async def refused() -> bool:
            return await db.not_ready() is not None

        await wait_until(refused, 30, "readiness refused without the standby")
        assert "s1" in (await db.not_ready() or "")
    finally:
        await db.close()


async def test_a_gateway_on_a_multi_host_url_follows_the_promoted_standby(
    primary: tuple[EmbeddedPostgres, str], standby: StandbyProcess
) -> None:
    """Primary SIGKILLed and its data directory deleted: after the promotion the same gateway applies the order's
    next step on the standby, every step acknowledged before the loss is there, and none is applied twice."""
    server, url = primary
    hosts = f"{_socket_dir(url)},{_socket_dir(standby.url)}"
    multi = f"postgresql://postgres@/postgres?host={hosts}&port=5432,5432&target_session_attrs=read-write"
    db = await Database(Settings(database_url=multi, sync_standby="s1")).open()
    gateway = Gateway(db)
    try:
        await wait_until(lambda: _ready(db), 30, "the standby synchronous")
        first = [Incoming.parse(step_json("o-fail", "p-fail", seq)) for seq in (1, 2)]
        assert [o.decision for o in await gateway.submit(first)] == [Decision.APPLY, Decision.APPLY]

        pgdata = server.pgdata
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)  # the primary's machine is gone
        shutil.rmtree(pgdata, ignore_errors=True)
        done = subprocess.run(
            [sys.executable, "-m", "nexus_cli", "db", "promote", "--data-dir", str(standby.data_dir)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr

        again = Incoming.parse(step_json("o-fail", "p-fail", 2))
        third = Incoming.parse(step_json("o-fail", "p-fail", 3))
        outcomes = await _submit_retrying(gateway, [again, third])
        assert [o.decision for o in outcomes] == [Decision.DUPLICATE, Decision.APPLY]
        assert await db.fetchval("SELECT last_seq FROM orders WHERE order_id = 'o-fail'") == 3
        assert await db.fetchval("SELECT pg_is_in_recovery()") is False
    finally:
        server._server = None  # its data directory is gone: nothing to stop
        await db.close()


async def _ready(db: Database) -> bool:
    return await db.not_ready() is None


async def _submit_retrying(gateway: Gateway, items: list[Incoming]) -> list[object]:
    """What an ingress does with a transient failure: submit the same batch again."""
    from nexus.errors import TransientDatabaseError

    for _ in range(100):
        try:
            return list(await gateway.submit(items))
        except TransientDatabaseError:
            await asyncio.sleep(0.1)
    return list(await gateway.submit(items))
