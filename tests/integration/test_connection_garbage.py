"""A closed connection is freed by reference counting alone (issue 34, the waits pattern): nothing of the
HTTP server's protocol makes a cycle, so a burst of clients going (A's long polls dropped and reopened a
thousand at a time) leaves no objects for the garbage collector, whose collection of them paused the whole
loop for hundreds of milliseconds."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref

from nexus.ingress.http_server import GuardedHttpToolsProtocol
from nexus.settings import Settings
from nexus.store.database import Database
from tests.integration.test_request_cap import (
    BURST,
    DEADLINE_S,
    SHARE,
    agent,
    answer,
    burst,
    get,
    long_poll,
    served,
    serving,
)


async def test_closed_connections_with_long_polls_and_refusals_are_freed_without_the_collector(
    db: Database, settings: Settings
) -> None:
    """With the collector off, acme's burst of long polls (some admitted, the rest refused 429) and globex's
    read are closed by their clients; every connection's protocol is then gone without a collection (on the
    code before: each protocol stayed alive in a cycle with its deadlines until the collector ran)."""
    acme, globex = await agent(db, "acme"), await agent(db, "globex")
    async with serving(db, settings) as (port, shares):
        await served(port, acme)
        await served(port, globex)
        gc.collect()
        gc.disable()
        try:
            polls, (reader, writer) = await burst(port, [long_poll(acme)] * BURST, get("/v1/processes", globex))
            assert (await answer(reader))[0] == 200
            refused = [await answer(r) for r, _ in polls[SHARE:]]
            assert {status for status, _ in refused} == {429}
            protocols = [weakref.ref(p) for p in gc.get_objects() if isinstance(p, GuardedHttpToolsProtocol)]
            assert len(protocols) >= BURST + 1
            writer.close()
            for _, w in polls:
                w.close()
            deadline = time.monotonic() + DEADLINE_S
            while shares.total or any(ref() is not None for ref in protocols):
                alive = sum(ref() is not None for ref in protocols)
                assert time.monotonic() < deadline, f"{alive} of {len(protocols)} protocols still alive"
                await asyncio.sleep(0.1)
        finally:
            gc.enable()
