"""Fair shares of one process (issue 34, items 1 and 3), on a real `nexus serve` over real sockets: a tenant at
its share of requests in flight or of waits leaves another tenant served, requests whose key is still
being checked have a share of their own, and at the connection cap the oldest idle connection is closed
so a new client is served; rates (over ASGI: no sockets needed) count envelopes, and a tenant's keys together."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.gateway import Gateway
from nexus.ingress.http import create_app
from nexus.settings import Settings
from nexus.store.database import Database
from tests.factories import step_json

pytestmark = pytest.mark.slow


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def app_client(db: Database, settings: Settings) -> httpx.AsyncClient:
    """A client of the app itself (ASGI) with `settings`: rates need no sockets."""
    app = create_app(db, Gateway(db), settings=settings)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")


async def agents(db: Database, tenant: str, n: int) -> list[str]:
    return [(await create_key(db, tenant, frozenset({Role.AGENT}), f"{tenant}-{i}"))[1] for i in range(n)]


async def until_held(api: httpx.AsyncClient, key: str, status: int, code: str) -> httpx.Response:
    """The answer to `key`'s next request once the waits opened before it hold their slots."""
    deadline = time.monotonic() + 20
    while True:
        answer = await api.get("/v1/processes", headers=bearer(key))
        if answer.status_code == status and answer.json().get("code") == code:
            return answer
        assert time.monotonic() < deadline, answer.text
        await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def unknown_keys_stuck(api: httpx.AsyncClient, database_url: str, n: int = 2) -> AsyncIterator[None]:
    """api_keys locked (ACCESS EXCLUSIVE) and `n` requests with unknown keys stuck in their check, filling the
    unchecked keys' share; on leaving, the lock goes and each stuck request is answered 401."""
    conn = await asyncpg.connect(database_url)
    try:
        lock = conn.transaction()
        await lock.start()
        await conn.execute("LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE")
        stuck = [asyncio.create_task(api.get("/v1/processes", headers=bearer(f"nxk_unknown-{i}"))) for i in range(n)]
        await asyncio.sleep(1.0)
        yield
        await lock.rollback()
    finally:
        await conn.close()
    assert [s.status_code for s in await asyncio.gather(*stuck)] == [401] * n


async def test_a_tenant_at_its_request_share_leaves_another_served(  # type: ignore[no-untyped-def]
    start_gateway, settings: Settings, db: Database
) -> None:
    """acme holding its share of requests in flight (long polls of two keys) gets 429 TENANT_BUSY with
    Retry-After on any other request; globex is served, /healthz and /readyz too; acme's share comes back."""
    _, base = start_gateway("--no-dispatcher", settings_=settings.replace(max_requests_per_tenant=2))
    acme, globex = await agents(db, "acme", 3), await agents(db, "globex", 1)
    async with httpx.AsyncClient(base_url=base, timeout=60) as api:
        polls = [
            asyncio.create_task(api.get("/v1/orders/o-1", params={"wait": "6"}, headers=bearer(k))) for k in acme[:2]
        ]
        await asyncio.sleep(0.5)  # the long polls in first
        busy = await until_held(api, acme[2], 429, "TENANT_BUSY")
        assert busy.headers["retry-after"] == "1" and {"code", "message", "request_id"} <= set(busy.json())
        assert (await api.get("/v1/processes", headers=bearer(globex[0]))).status_code == 200
        assert (await api.get("/healthz")).status_code == 200 and (await api.get("/readyz")).status_code == 200
        assert [p.status_code for p in await asyncio.gather(*polls)] == [404, 404]
        assert (await api.get("/v1/processes", headers=bearer(acme[2]))).status_code == 200


async def test_a_tenant_at_its_wait_share_leaves_another_waiting(  # type: ignore[no-untyped-def]
    start_gateway, settings: Settings, db: Database
) -> None:
    """With NEXUS_MAX_WAITS_PER_TENANT=3, acme's fourth wait (of another key, under its own per-key cap) is
    429 TOO_MANY_WAITS; globex's wait is accepted."""
    _, base = start_gateway("--no-dispatcher", settings_=settings.replace(max_waits_per_tenant=3))
    acme, globex = await agents(db, "acme", 4), await agents(db, "globex", 1)
    async with httpx.AsyncClient(base_url=base, timeout=60) as api:
        polls = {
            k: asyncio.create_task(api.get("/v1/orders/o-1", params={"wait": "8"}, headers=bearer(k))) for k in acme[:3]
        }
        deadline = time.monotonic() + 20
        await asyncio.sleep(0.5)
        while (
            refused := await api.get("/v1/orders/o-1", params={"wait": "0.1"}, headers=bearer(acme[3]))
        ).status_code != 429:
            assert time.monotonic() < deadline, refused.text
            for k, poll in polls.items():  # a probe holds a slot for 0.1 s: a wait refused meanwhile is sent again
                if poll.done():
                    polls[k] = asyncio.create_task(api.get("/v1/orders/o-1", params={"wait": "8"}, headers=bearer(k)))
            await asyncio.sleep(0.5)
        assert refused.json()["code"] == "TOO_MANY_WAITS"
        other = await api.get("/v1/orders/o-1", params={"wait": "0.1"}, headers=bearer(globex[0]))
        assert other.status_code == 404, other.text
        await asyncio.gather(*polls.values())


async def test_requests_whose_key_is_being_checked_have_a_share_of_their_own(  # type: ignore[no-untyped-def]
    start_gateway, settings: Settings, db: Database, database_url: str
) -> None:
    """While key lookups are blocked (api_keys locked), two requests with unchecked keys fill their share:
    a third is 429 TENANT_BUSY at once; a key already checked is served; /healthz is answered."""
    settings_ = settings.replace(max_requests_unauthenticated=2, auth_cache_ttl_s=300.0)
    _, base = start_gateway("--no-dispatcher", settings_=settings_)
    [known] = await agents(db, "acme", 1)
    async with httpx.AsyncClient(base_url=base, timeout=60) as api:
        assert (await api.get("/v1/processes", headers=bearer(known))).status_code == 200  # now cached
        async with unknown_keys_stuck(api, database_url):
            refused = await api.get("/v1/processes", headers=bearer("nxk_unknown-third"))
            assert refused.status_code == 429 and refused.json()["code"] == "TENANT_BUSY", refused.text
            assert (await api.get("/v1/processes", headers=bearer(known))).status_code == 200
            assert (await api.get("/healthz")).status_code == 200


async def test_a_known_key_due_for_its_next_check_is_not_held_to_the_unknown_keys_share(  # type: ignore[no-untyped-def]
    start_gateway, settings: Settings, db: Database, database_url: str
) -> None:
    """A key checked before whose cache entry has lapsed (every busy tenant's keys do, once per TTL) waits for its
    check behind the locked api_keys but is never 429 TENANT_BUSY for the unknown keys filling their share; it is
    served once the check can run (the noisy-neighbour run found tenant C refused while A flooded new keys)."""
    settings_ = settings.replace(max_requests_unauthenticated=2, auth_cache_ttl_s=0.3)
    _, base = start_gateway("--no-dispatcher", settings_=settings_)
    [known] = await agents(db, "acme", 1)
    async with httpx.AsyncClient(base_url=base, timeout=60) as api:
        assert (await api.get("/v1/processes", headers=bearer(known))).status_code == 200  # checked once
        await asyncio.sleep(0.6)  # its cache entry lapses
        async with unknown_keys_stuck(api, database_url):
            again = asyncio.create_task(api.get("/v1/processes", headers=bearer(known)))
            await asyncio.sleep(1.0)
            assert not again.done(), again.result().text  # waiting for its check, not refused
        assert (await again).status_code == 200


async def test_at_the_connection_cap_the_oldest_idle_connection_is_closed(  # type: ignore[no-untyped-def]
    start_gateway, settings: Settings, db: Database
) -> None:
    """With NEXUS_HTTP_MAX_CONNECTIONS=4 and four idle connections open, a new client's request is served
    and the oldest idle connection is closed; the others stay open."""
    settings_ = settings.replace(http_max_connections=4, http_head_timeout_s=60.0, http_keep_alive_s=60.0)
    _, base = start_gateway("--no-dispatcher", settings_=settings_)
    port = int(base.rsplit(":", 1)[1])
    [key] = await agents(db, "acme", 1)
    idle = []
    for _ in range(4):
        idle.append(await asyncio.open_connection("127.0.0.1", port))
        await asyncio.sleep(0.05)  # opened in order: the first is the oldest
    try:
        async with httpx.AsyncClient(base_url=base, timeout=10) as api:
            served = await api.get("/v1/processes", headers=bearer(key))
            assert served.status_code == 200, served.text
        oldest = await asyncio.wait_for(idle[0][0].read(), timeout=5)
        assert oldest == b"", "the oldest idle connection is still open"
        for reader, _ in idle[2:]:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(reader.read(), timeout=0.2)
    finally:
        for _, writer in idle:
            writer.close()


async def test_rates_count_envelopes_and_a_tenants_keys_together(db: Database) -> None:
    """A 150-envelope batch spends 150 of its key's 10 units/s (its next request is 429 RATE_LIMITED with
    Retry-After); with NEXUS_RATE_LIMIT_TENANT=5 acme's two keys share five units a second (the second key
    is refused too) while globex is served."""
    # 10/s: the batch leaves a debt of 14 s, so a slow machine cannot refill it before the next request.
    settings = db.settings.replace(rate_limit_agent=10.0, rate_limit_tenant=0.0)
    async with app_client(db, settings) as api:
        [key] = await agents(db, "acme", 1)
        batch = {"events": [step_json(f"o-{i}", f"p-{i}", 1) for i in range(150)]}
        posted = await api.post("/v1/events", json=batch, headers=bearer(key))
        assert posted.status_code == 200 and len(posted.json()["results"]) == 150, posted.text[:300]
        refused = await api.get("/v1/processes", headers=bearer(key))
        assert refused.status_code == 429 and refused.json()["code"] == "RATE_LIMITED", refused.text
        assert int(refused.headers["retry-after"]) >= 1
    settings = db.settings.replace(rate_limit_agent=0.0, rate_limit_tenant=5.0)
    async with app_client(db, settings) as api:
        first, second = await agents(db, "acme", 2)
        answers = [(await api.get("/v1/processes", headers=bearer(first))).status_code for _ in range(20)]
        assert 429 in answers and answers[0] == 200
        later = await api.get("/v1/processes", headers=bearer(second))
        assert later.status_code == 429 and later.json()["code"] == "RATE_LIMITED"
        [other] = await agents(db, "globex", 1)
        assert (await api.get("/v1/processes", headers=bearer(other))).status_code == 200
