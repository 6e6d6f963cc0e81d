"""The series the shipped alerts read about the gateway's health: `nexus_ready`, `nexus_http_errors_total`
by code, and the age of the oldest undelivered notification, each read at scrape."""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
import uuid
from collections.abc import AsyncIterator

import httpx
from prometheus_client.parser import text_string_to_metric_families

from nexus.core.decide.items import Incoming
from nexus.delivery.subscriptions import add_subscription
from nexus.gateway import Gateway
from nexus.ingress.http import create_app
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import api_headers, root_headers
from tests.factories import plan_json, step_json

SECRET = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY"


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample of a /metrics text."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise AssertionError(f"no sample {name}{labels}")


class Cuttable:
    """A TCP relay in front of PostgreSQL whose connections (and listening socket) can be cut at once: the
    database becomes unreachable to whoever connects through it, as after a network failure."""

    def __init__(self, target: tuple[str, ...]) -> None:
        self.target = target
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if len(self.target) == 1:  # a unix socket (pgserver's default)
            return await asyncio.open_unix_connection(self.target[0])
        return await asyncio.open_connection(self.target[0], int(self.target[1]))

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await self._open()
        self.writers += [writer, up_writer]

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    def cut(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.transport.abort()


def _target(url: str) -> tuple[str, ...]:
    parts = urllib.parse.urlsplit(url)
    host = urllib.parse.parse_qs(parts.query).get("host", [parts.hostname or "127.0.0.1"])[0]
    port = parts.port or 5432
    return (f"{host}/.s.PGSQL.{port}",) if host.startswith("/") else (host, str(port))


@contextlib.asynccontextmanager
async def through_relay(settings: Settings) -> AsyncIterator[tuple[Database, Cuttable]]:
    """A Database connected to the test database through a `Cuttable` relay."""
    assert settings.database_url is not None
    relay = Cuttable(_target(settings.database_url))
    port = await relay.start()
    parts = urllib.parse.urlsplit(settings.database_url)
    user = parts.username or "postgres"
    url = f"postgresql://{user}@127.0.0.1:{port}{parts.path}"
    db = await Database(settings.replace(database_url=url, db_pool_size=2)).open(migrate=False)
    try:
        yield db, relay
    finally:
        relay.cut()
        with contextlib.suppress(Exception):  # a pool cut off may not close cleanly
            async with asyncio.timeout(5):
                await db.close()


async def test_the_age_of_the_oldest_undelivered_notification_is_read_at_scrape(db: Database) -> None:
    """Two minutes after a notification was written and not delivered, the gauge reads at least 120 s; with
    every notification delivered it reads 0."""
    app = create_app(db, Gateway(db))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as api:
        empty = (await api.get("/metrics", headers=root_headers())).text
        assert sample(empty, "nexus_outbox_oldest_pending_seconds") == 0
        await add_subscription(db, "default", "http://127.0.0.1:9/hook", SECRET)
        order = f"o-age-{uuid.uuid4().hex[:6]}"
        await Gateway(db).submit([Incoming.parse(e) for e in plan_json(order, f"p-{order}", steps=1)])
        await db.execute("UPDATE deliveries SET created_at = now() - interval '120 seconds'")
        aged = (await api.get("/metrics", headers=root_headers())).text
        assert sample(aged, "nexus_outbox_oldest_pending_seconds") >= 120
        assert sample(aged, "nexus_ready") == 1


async def test_an_unreachable_database_reads_not_ready_and_counts_database_unavailable(settings: Settings) -> None:
    """With the network to PostgreSQL cut, /readyz and a step (the events fast path) answer 503
    DATABASE_UNAVAILABLE, each counted by code in nexus_http_errors_total, and the next scrape reads
    nexus_ready 0 (1 before the cut)."""
    async with through_relay(settings) as (db, relay):
        # The scraper's key stays trusted through the cut (a lookup after it would answer 503 itself).
        app = create_app(db, Gateway(db), settings=settings.replace(auth_cache_ttl_s=600))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as api:
            assert (await api.get("/v1/orders/o-none", headers=api_headers())).status_code == 404  # key cached
            before = (await api.get("/metrics", headers=root_headers())).text
            assert sample(before, "nexus_ready") == 1
            counted = sample(before, "nexus_http_errors_total", code="DATABASE_UNAVAILABLE")
            relay.cut()
            answer = await api.get("/readyz")
            assert answer.status_code == 503 and answer.json()["code"] == "DATABASE_UNAVAILABLE"
            step = await api.post("/v1/events", json=step_json("o-cut", "p-cut", 1), headers=api_headers())
            assert step.status_code == 503 and step.json()["code"] == "DATABASE_UNAVAILABLE"
            after = (await api.get("/metrics", headers=root_headers())).text
    assert sample(after, "nexus_ready") == 0
    assert sample(after, "nexus_http_errors_total", code="DATABASE_UNAVAILABLE") >= counted + 2
