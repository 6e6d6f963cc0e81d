"""Waits end when their OAuth access token expires (issue 34, item 2, for tokens): a long poll, an SSE stream and
an MCP `wait_for_order` authenticated by a token end within a second or so of its `exp`, as a key's waits end
on its revocation, over real sockets to a real `nexus serve` trusting a real issuer (nexus_lab.oauth_issuer)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import jwt
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.oauth_issuer import Issuer, serve
from nexus_lab.procs import free_port
from tests.integration.test_wait_release import bearer, mcp_wait, start_order

pytestmark = pytest.mark.slow

TOKEN_TTL_S = 3
# Generous (a loaded machine): the mechanism ends a wait within 0.5 s of `exp`; the waits' own time is 60 s.
ENDED_AFTER_EXP_S = 3.0


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    """A running authorization server whose tokens live TOKEN_TTL_S seconds, with one agent of acme."""
    with serve(Issuer({"alice": {"tenant": "acme", "roles": ["agent"]}}, token_ttl_s=TOKEN_TTL_S)) as running:
        yield running


async def test_every_kind_of_wait_ends_soon_after_its_token_expires(  # type: ignore[no-untyped-def]
    start_gateway, settings: Settings, db: Database, issuer: Issuer
) -> None:
    """A long poll, an SSE stream and an MCP wait opened with a token of exp = now + 3 s are open a second
    later and all end within a generous bound after `exp` (far under their 60 s); the long poll says 401."""
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    oauth = settings.replace(public_url=public, oauth_issuers=issuer.url)
    _, base = start_gateway("--no-dispatcher", settings_=oauth, port=port)
    _, key = await create_key(db, "acme", frozenset({Role.AGENT}), "starter")
    await start_order(base, key)
    token = issuer.issue("alice", "nexus:agent", public, "c")
    expires = float(jwt.decode(token, options={"verify_signature": False})["exp"])
    mcp_headers = {**bearer(token), "Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    call = mcp_wait(token).split(b"\r\n\r\n", 1)[1]
    async with httpx.AsyncClient(base_url=base, timeout=90) as api:

        async def sse() -> int:
            async with api.stream("GET", "/v1/orders/o-1/stream", headers=bearer(token)) as streamed:
                async for _ in streamed.aiter_lines():
                    pass  # keepalives until the server ends the body
                return streamed.status_code

        waits = [
            asyncio.create_task(
                api.get("/v1/orders/o-1", params={"wait": "60", "after_seq": "5"}, headers=bearer(token))
            ),
            asyncio.create_task(sse()),
            asyncio.create_task(api.post("/mcp", content=call, headers=mcp_headers)),
        ]
        try:
            await asyncio.sleep(1.0)
            assert time.time() < expires, "the waits were not open before the token expired (a slow start)"
            assert not any(w.done() for w in waits), [w.result() for w in waits if w.done()]
            done, _ = await asyncio.wait(waits, timeout=expires - time.time() + ENDED_AFTER_EXP_S)
            late = time.time() - expires
            assert len(done) == 3, f"{3 - len(done)} waits still open {late:.1f} s after the token's exp"
        finally:
            for wait in waits:
                wait.cancel()
        polled = waits[0].result()
        assert polled.status_code == 401 and polled.json()["code"] == "UNAUTHENTICATED", polled.text
        assert waits[1].result() == 200
