"""The request cap counts requests admitted to a share (issue 34, item 1), on a real uvicorn server built by
`server_config` over real sockets: a request is counted in its tenant's share (or the unauthenticated one)
as soon as its head is complete, so one tenant's burst of long polls, or a burst of unknown keys, is refused
429 TENANT_BUSY at its share and never fills the cap (503 SERVER_BUSY) for another tenant; the counts go back
to zero once the burst's clients have gone."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.auth.shares import RequestShares
from nexus.gateway import Gateway
from nexus.ingress.http import create_app
from nexus.ingress.http_server import server_config
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import free_port

pytestmark = pytest.mark.slow

CAP = 40
SHARE = 10
UNCHECKED = 4
BURST = 60  # more than the cap, sent in one go
DEADLINE_S = 20.0  # generous (a loaded machine); the long polls below wait 60 s


@contextlib.asynccontextmanager
async def serving(db: Database, settings: Settings) -> AsyncIterator[tuple[int, RequestShares]]:
    """The gateway's app under uvicorn (`server_config`) in this loop, with a small request cap; its port and
    the shares its gate counts in."""
    port = free_port()
    settings = settings.replace(
        http_port=port,
        http_host="127.0.0.1",
        http_limit_concurrency=CAP,
        max_requests_per_tenant=SHARE,
        max_requests_unauthenticated=UNCHECKED,
        auth_cache_ttl_s=300.0,  # the keys checked once stay known to the head's count
    )
    async with uvicorn_app(db, settings) as (_, app):
        yield port, app.state.gate.shares


@contextlib.asynccontextmanager
async def uvicorn_app(db: Database, settings: Settings) -> AsyncIterator[tuple[uvicorn.Server, Any]]:
    """The gateway's app under uvicorn (`server_config`, on `settings`' host and port) in this loop, once started:
    the server and the app; stopped on the way out."""
    app: Any = create_app(db, Gateway(db), settings=settings)
    server = uvicorn.Server(server_config(app, settings))
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + DEADLINE_S
    while not server.started:
        assert time.monotonic() < deadline and not task.done(), "the server did not start"
        await asyncio.sleep(0.05)
    try:
        yield server, app
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=30)


def get(path: str, key: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n".encode()


def long_poll(key: str) -> bytes:
    return get("/v1/orders/o-1?wait=60&after_seq=5", key)


async def connect(port: int, n: int) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    return [await asyncio.open_connection("127.0.0.1", port) for _ in range(n)]


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of the next answer on a connection."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=DEADLINE_S)
    lines = head.decode("latin-1").split("\r\n")
    length = next(int(v) for n, _, v in (x.partition(": ") for x in lines[1:]) if n.lower() == "content-length")
    body = await asyncio.wait_for(reader.readexactly(length), timeout=DEADLINE_S)
    return int(lines[0].split()[1]), json.loads(body)


async def served(port: int, key: str) -> None:
    """One request of `key`, answered 200 (its key is then in the cache)."""
    [(reader, writer)] = await connect(port, 1)
    writer.write(get("/v1/processes", key))
    assert (await answer(reader))[0] == 200
    writer.close()


async def agent(db: Database, tenant: str) -> str:
    return (await create_key(db, tenant, frozenset({Role.AGENT}), f"{tenant}-cap"))[1]


async def burst(
    port: int, heads: list[bytes], last: bytes
) -> tuple[list[tuple[asyncio.StreamReader, asyncio.StreamWriter]], tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """Every head of `heads`, then `last`, each on its own open connection, written in one turn of the loop (the
    server, in this loop, reads them all before any request's task runs)."""
    conns = await connect(port, len(heads))
    [other] = await connect(port, 1)
    for (_, writer), head in zip(conns, heads, strict=True):
        writer.write(head)
    other[1].write(last)
    return conns, other


async def test_one_tenants_burst_of_long_polls_never_makes_another_tenants_request_503(
    db: Database, settings: Settings
) -> None:
    """With a cap of 40 and shares of 10, acme's 60 long polls arriving at once leave globex's read answered
    200 (on main's code it was 503 SERVER_BUSY: the cap counted acme's 60 tasks before any ran); acme's polls
    beyond its share are 429 TENANT_BUSY at once, and once acme's clients have gone every count is back to 0."""
    acme, globex = await agent(db, "acme"), await agent(db, "globex")
    async with serving(db, settings) as (port, shares):
        await served(port, acme)
        await served(port, globex)
        polls, (reader, writer) = await burst(port, [long_poll(acme)] * BURST, get("/v1/processes", globex))
        status, body = await answer(reader)
        assert status == 200, body
        refused = [await answer(r) for r, _ in polls[SHARE:]]  # the first SHARE heads were admitted
        assert {(s, b["code"]) for s, b in refused} == {(429, "TENANT_BUSY")}, refused[:3]
        assert shares.in_flight("acme") == SHARE and shares.total == SHARE
        writer.close()
        for _, w in polls:
            w.close()
        deadline = time.monotonic() + DEADLINE_S
        while shares.total or shares.in_flight("acme") or shares.unchecked:
            assert time.monotonic() < deadline, f"still counted: {shares.total}"
            await asyncio.sleep(0.1)


async def test_a_burst_of_unknown_keys_is_bounded_by_the_unauthenticated_share(
    db: Database, settings: Settings
) -> None:
    """60 requests with unknown keys arriving at once (more than the cap of 40) are held to the unauthenticated
    share of 4 (the others 429 TENANT_BUSY at once, none 503) while a tenant's cached key is served 200."""
    known = await agent(db, "initech")
    async with serving(db, settings) as (port, shares):
        await served(port, known)
        heads = [get("/v1/processes", f"nxk_unknown-{i}") for i in range(BURST)]
        conns, (reader, writer) = await burst(port, heads, get("/v1/processes", known))
        status, body = await answer(reader)
        assert status == 200, body
        answers = [await answer(r) for r, _ in conns]
        codes = [b["code"] for _, b in answers]
        assert not {s for s, _ in answers} - {401, 429}, answers[:3]
        assert codes.count("TENANT_BUSY") >= BURST - UNCHECKED, codes
        for _, w in [*conns, (reader, writer)]:
            w.close()
        deadline = time.monotonic() + DEADLINE_S
        while shares.total:
            assert time.monotonic() < deadline, f"still counted: {shares.total}"
            await asyncio.sleep(0.1)


async def test_a_pipelined_request_that_never_runs_is_counted_out(db: Database, settings: Settings) -> None:
    """A request pipelined behind a long poll is counted at its head while it waits its turn; the client resets
    the connection, so when the poll's answer cannot be written the pipelined request never runs: its count is
    released with the connection (the tenant's share and the total back to 0)."""
    acme = await agent(db, "acme")
    async with serving(db, settings) as (port, shares):
        await served(port, acme)
        [(_, writer)] = await connect(port, 1)
        writer.write(get("/v1/orders/o-1?wait=2", acme) + get("/v1/processes", acme))
        deadline = time.monotonic() + DEADLINE_S
        while shares.in_flight("acme") < 2:  # both heads counted (the second waits behind the first)
            assert time.monotonic() < deadline, f"counted: {shares.in_flight('acme')}"
            await asyncio.sleep(0.05)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # closed with a reset
        writer.close()
        while shares.total or shares.in_flight("acme"):
            assert time.monotonic() < deadline, f"still counted: {shares.total}"
            await asyncio.sleep(0.1)
