"""The HTTP server's turn budget (issue 34, pattern (a) "waits"; `nexus.ingress.turns`), on a real uvicorn server
built by `server_config` over real sockets: while another tenant has a request in flight, one tenant's burst
of heads (or of closes) is spread over turns of the loop, N a turn, so another tenant's request is handled on
the next turn instead of behind the whole burst; one tenant alone is never put off."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
import uvicorn

from nexus.auth.shares import RequestShares
from nexus.metrics import REGISTRY
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import free_port
from tests.integration.test_request_cap import DEADLINE_S, agent, answer, connect, get, long_poll, served, uvicorn_app

pytestmark = pytest.mark.slow

PER_TURN = 2
BURST = 200


@contextlib.asynccontextmanager
async def serving(db: Database, settings: Settings) -> AsyncIterator[tuple[int, uvicorn.Server, RequestShares]]:
    """The gateway's app under uvicorn (`server_config`) in this loop with a budget of 2 heads and closes a turn
    and shares wide enough for the burst; its port, the server and its gate's shares."""
    port = free_port()
    settings = settings.replace(
        http_port=port,
        http_host="127.0.0.1",
        http_heads_per_turn=PER_TURN,
        max_requests_per_tenant=2 * BURST,
        auth_cache_ttl_s=300.0,  # the keys checked once stay known to the head's count
    )
    async with uvicorn_app(db, settings) as (server, app):
        yield port, server, app.state.gate.shares


async def polling_then_burst(
    port: int, globex: str, shares: RequestShares
) -> tuple[asyncio.StreamWriter, float, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]:
    """globex served once, then its long poll in flight on a connection of its own, then `BURST` new connections:
    the poll's writer, the deferred heads counted before the burst, and the burst's connections."""
    await served(port, globex)
    [(_, poll)] = await connect(port, 1)
    poll.write(long_poll(globex))
    await in_flight(shares, "globex")
    before = deferred("head")
    return poll, before, await connect(port, BURST)


def deferred(what: str) -> float:
    """`nexus_http_deferred_total{what}` in this process's registry."""
    return REGISTRY.get_sample_value("nexus_http_deferred_total", {"what": what}) or 0.0


async def in_flight(shares: RequestShares, tenant: str) -> None:
    """Until `tenant` has a request counted in flight."""
    deadline = time.monotonic() + DEADLINE_S
    while not shares.in_flight(tenant):
        assert time.monotonic() < deadline, f"{tenant} has nothing in flight"
        await asyncio.sleep(0.02)


async def answers_in_order(readers: dict[str, asyncio.StreamReader]) -> list[tuple[str, int]]:
    """Every connection's answer (name, status), in the order they arrived."""
    order: list[tuple[str, int]] = []

    async def read(name: str, reader: asyncio.StreamReader) -> None:
        status, _ = await answer(reader)
        order.append((name, status))

    await asyncio.gather(*(read(name, reader) for name, reader in readers.items()))
    return order


async def test_another_tenants_request_is_answered_before_most_of_a_burst(db: Database, settings: Settings) -> None:
    """With globex's long poll in flight, acme's 200 reads and then globex's read, written in one turn, leave
    globex's read answered among the first quarter (on the old code, or with the budget off, it was answered
    after nearly all of acme's), every read 200, and heads counted as deferred."""
    acme, globex = await agent(db, "acme"), await agent(db, "globex")
    async with serving(db, settings) as (port, _, shares):
        await served(port, acme)
        poll, before, conns = await polling_then_burst(port, globex, shares)
        [(reader, writer)] = await connect(port, 1)
        for _, w in conns:
            w.write(get("/v1/processes", acme))
        writer.write(get("/v1/processes", globex))
        order = await answers_in_order({**{f"acme-{i}": r for i, (r, _) in enumerate(conns)}, "globex": reader})
        assert {status for _, status in order} == {200}
        position = [name for name, _ in order].index("globex")
        assert position < BURST // 4, f"globex's read answered {position}th of {len(order)}"
        assert deferred("head") - before >= BURST // 2
        for _, w in [*conns, (reader, writer), (None, poll)]:
            w.close()


async def test_another_tenants_open_connection_is_enough_to_spread_a_burst(db: Database, settings: Settings) -> None:
    """With globex holding only an idle keep-alive connection (nothing in flight), acme's 200 reads and then
    globex's read on that connection, written in one turn, leave globex's read answered among the first quarter
    (counting requests in flight alone, nothing was deferred and it was answered after nearly all of acme's)."""
    acme, globex = await agent(db, "acme"), await agent(db, "globex")
    async with serving(db, settings) as (port, _, shares):
        await served(port, acme)
        await served(port, globex)
        [(reader, writer)] = await connect(port, 1)
        writer.write(get("/v1/processes", globex))
        assert (await answer(reader))[0] == 200  # the connection now holds globex's share, idle
        assert shares.total == 0
        conns = await connect(port, BURST)
        for _, w in conns:
            w.write(get("/v1/processes", acme))
        writer.write(get("/v1/processes", globex))
        order = await answers_in_order({**{f"acme-{i}": r for i, (r, _) in enumerate(conns)}, "globex": reader})
        position = [name for name, _ in order].index("globex")
        assert position < BURST // 4, f"globex's read answered {position}th of {len(order)}"
        for _, w in [*conns, (reader, writer)]:
            w.close()


async def test_probes_are_never_put_off(db: Database, settings: Settings) -> None:
    """With globex's long poll in flight, 200 `/healthz` and `/readyz` requests written in one turn are all
    answered 200 and none is deferred (a balancer's probe never waits behind a burst)."""
    globex = await agent(db, "globex")
    async with serving(db, settings) as (port, _, shares):
        poll, before, conns = await polling_then_burst(port, globex, shares)
        for i, (_, w) in enumerate(conns):
            w.write(f"GET /{'healthz' if i % 2 else 'readyz'} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        order = await answers_in_order({f"probe-{i}": r for i, (r, _) in enumerate(conns)})
        assert [status for _, status in order] == [200] * BURST
        assert deferred("head") == before
        for _, w in [*conns, (None, poll)]:
            w.close()


async def test_one_tenant_alone_is_never_put_off(db: Database, settings: Settings) -> None:
    """acme alone (no other tenant in flight) sending 200 reads in one turn has none deferred, and every read
    is answered 200."""
    acme = await agent(db, "acme")
    async with serving(db, settings) as (port, _, _):
        await served(port, acme)
        before = deferred("head"), deferred("close")
        conns = await connect(port, BURST)
        for _, w in conns:
            w.write(get("/v1/processes", acme))
        order = await answers_in_order({f"acme-{i}": r for i, (r, _) in enumerate(conns)})
        assert [status for _, status in order] == [200] * BURST
        for _, w in conns:
            w.close()
        await asyncio.sleep(0.5)  # the closes reach the server
        assert (deferred("head"), deferred("close")) == before


async def test_a_burst_of_closes_is_spread_and_every_connection_ends(db: Database, settings: Settings) -> None:
    """With globex's long poll in flight, acme's 200 connections (each after one answered read) closed at once
    have their closes deferred (`close` counted) and still all end: the server's connections go back to the
    poll's one, then to none once it closes too."""
    acme, globex = await agent(db, "acme"), await agent(db, "globex")
    async with serving(db, settings) as (port, server, shares):
        await served(port, globex)
        [(_, poll)] = await connect(port, 1)
        poll.write(long_poll(globex))
        await in_flight(shares, "globex")
        conns = await connect(port, BURST)
        for _, w in conns:
            w.write(get("/v1/processes", acme))
        await answers_in_order({f"acme-{i}": r for i, (r, _) in enumerate(conns)})
        before = deferred("close")
        for _, w in conns:
            w.close()
        connections = server.server_state.connections
        deadline = time.monotonic() + DEADLINE_S
        while len(connections) > 1:
            assert time.monotonic() < deadline, f"{len(connections)} connections still open"
            await asyncio.sleep(0.05)
        assert deferred("close") - before >= BURST // 2
        poll.close()
        while connections:
            assert time.monotonic() < deadline, f"{len(connections)} connections still open"
            await asyncio.sleep(0.05)
