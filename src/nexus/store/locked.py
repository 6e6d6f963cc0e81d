"""A transaction begun with its orders' locks taken, in one round trip.

`asyncpg`'s `Connection.transaction()` sends BEGIN alone, then the gateway sends `lock_orders`: two round trips
before the batch's read, each a turn of the event loop that waits behind whatever else the loop holds. Here BEGIN
and the locks go in one simple-protocol query (several statements in one message: asyncpg's `execute` without
arguments). That protocol takes no parameters, so the orders' keys go in the text as the hex of their JSON (only
`0-9a-f`: nothing a key holds can reach the SQL), and the locks are those of `lock_orders` (the same keys,
`nexus_order_lock`'s, taken in the same order), so a writer taking its locks either way excludes the other.

The transaction ends with COMMIT when the block ends, ROLLBACK when it raises (the pool's reset would roll back a
connection left inside one anyway).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Sequence

import asyncpg
import orjson

from nexus.store.queries import query


def begin_locked(keys: Sequence[tuple[str, str]]) -> str:
    """The query beginning a transaction with `keys`' locks (gateway.sql `begin_locked` without its comment;
    BEGIN alone when there are none)."""
    if not keys:
        return "BEGIN"
    return _statement(query("gateway.sql", "begin_locked")).replace(
        "{keys}", orjson.dumps([list(k) for k in keys]).hex()
    )


@functools.lru_cache(maxsize=4)
def _statement(text: str) -> str:
    """A named query's text without its comment lines (sent with every transaction), once per text."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("--"))


@contextlib.asynccontextmanager
async def locked_transaction(conn: asyncpg.Connection, keys: Sequence[tuple[str, str]]) -> AsyncIterator[None]:
    """A transaction on `conn` holding the advisory locks of the orders `keys` from its first round trip."""
    try:
        await conn.execute(begin_locked(keys))
        yield
    except BaseException:
        if not conn.is_closed():
            with contextlib.suppress(Exception):  # the error the caller sees is the block's, not the rollback's
                await conn.execute("ROLLBACK")
        raise
    await conn.execute("COMMIT")
