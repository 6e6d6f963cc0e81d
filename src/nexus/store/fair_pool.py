"""Fair shares of the database pool's connections between tenants.

asyncpg's pool hands its connections out first come, first served. One tenant's legal burst (long polls that
each read their order, a flood of keys due for their next check, plans) then queues dozens of queries ahead of
every other tenant's, and while they run they hold every connection and most of PostgreSQL's CPU: another
tenant's read or step waits for all of them (measured under the noisy neighbour's `waits`: C's requests waited
75-160 ms for a connection of ten).

`FairPool` is asyncpg's pool with two rules on who gets a connection:

- the connections go round the shares with a query waiting (a share's next waiter, then the next share's), not
  in the order of arrival;
- while another tenant has used the pool within the last second, a tenant holds at most
  `NEXUS_DB_CONNECTIONS_PER_TENANT` connections at once (a quarter of `NEXUS_DB_POOL_SIZE` by default): the rest
  stay free for the others, and its queries do not crowd theirs out of PostgreSQL's CPU. A tenant alone keeps
  the whole pool.

A share is the tenant whose work the running task does: `DB_SHARE`, set by the key check (`nexus.auth`) once a
request's tenant is known, `UNCHECKED` while a key the cache does not know is being looked up. Work of the
gateway itself (`None`: the group commit, which decides many tenants' events in one transaction, the
sweepers, the relays) is never held to a tenant's share and takes its turn like any share.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

import asyncpg
import asyncpg.pool

from nexus.store.recent import ACTIVE_WINDOW_S, RecentTenants

DB_SHARE: contextvars.ContextVar[str | None] = contextvars.ContextVar("nexus_db_share", default=None)
"""The tenant whose work the running task does (`UNCHECKED`: a key being looked up); None: the gateway's own."""

UNCHECKED = ""
"""The share of the lookups of keys the cache does not know (a flood of unknown keys is one share)."""


class ConnectionShares:
    """Who may take one of `size` connections now: permits handed out round-robin by share, a tenant held to
    `per_tenant` of them while another tenant was active within `window_s`."""

    def __init__(
        self,
        size: int,
        per_tenant: int,
        *,
        window_s: float = ACTIVE_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.size = size
        self.per_tenant = max(1, per_tenant)
        self._free = size
        self._held: dict[str | None, int] = {}
        self._waiting: OrderedDict[str | None, deque[asyncio.Future[None]]] = OrderedDict()
        self._seen = RecentTenants(window_s, clock)  # the tenants that asked for a connection

    def held(self, share: str | None) -> int:
        return self._held.get(share, 0)

    def waiting(self, share: str | None) -> int:
        return len(self._waiting.get(share, ()))

    def last_seen(self, tenant: str) -> float | None:
        """When `tenant` last asked for a connection (the clock's seconds), if it still counts as active."""
        return self._seen.last_seen(tenant)

    async def take(self, share: str | None) -> None:
        """Wait for a permit for `share`; it is `give`n back once the connection is released."""
        if share is not None:
            self._seen.saw(share)
        if self._free > 0 and not self._waiting and not self._capped(share):
            self._grant(share)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(share, deque()).append(future)
        self._dispatch()
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # granted just as it was cancelled: hand it on
                self.give(share)
            else:
                self._forget(share, future)
            raise

    def give(self, share: str | None) -> None:
        held = self._held.get(share, 0) - 1
        if held > 0:
            self._held[share] = held
        else:
            self._held.pop(share, None)
        self._free += 1
        self._dispatch()

    def _grant(self, share: str | None) -> None:
        self._free -= 1
        self._held[share] = self._held.get(share, 0) + 1

    def _capped(self, share: str | None) -> bool:
        """Whether `share` holds its part of the pool while another tenant is active (never the gateway's own
        work; never a tenant alone)."""
        if share is None or self._held.get(share, 0) < self.per_tenant:
            return False
        return self._seen.other_than(share)

    def _dispatch(self) -> None:
        """Hand free permits to the waiting shares in turn, skipping a share at its part of the pool."""
        for _ in range(len(self._waiting)):
            if self._free <= 0:
                break
            share, queue = self._waiting.popitem(last=False)
            if not self._capped(share):
                while queue and queue[0].done():  # cancelled while waiting
                    queue.popleft()
                if queue:
                    self._grant(share)
                    queue.popleft().set_result(None)
            if queue:
                self._waiting[share] = queue  # the share's next waiter comes after every other share's

    def _forget(self, share: str | None, future: asyncio.Future[None]) -> None:
        queue = self._waiting.get(share)
        if queue is not None and future in queue:
            queue.remove(future)
            if not queue:
                del self._waiting[share]


class FairPool(asyncpg.pool.Pool):  # type: ignore[misc]  # asyncpg ships no types here (pyproject: asyncpg.*)
    """asyncpg's pool whose connections go to the shares in turn (`ConnectionShares`, by `DB_SHARE`)."""

    def __init__(self, *args: Any, per_tenant: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shares = ConnectionShares(kwargs["max_size"], per_tenant)
        self._share_of: dict[int, str | None] = {}

    async def _acquire(self, timeout: float | None) -> Any:  # noqa: ASYNC109 - asyncpg's own signature
        share = DB_SHARE.get()
        async with asyncio.timeout(timeout):
            await self.shares.take(share)
        try:
            connection = await super()._acquire(timeout)
        except BaseException:
            self.shares.give(share)
            raise
        self._share_of[id(connection)] = share
        return connection

    async def release(self, connection: Any, *, timeout: float | None = None) -> None:  # noqa: ASYNC109 - asyncpg's
        taken = id(connection) in self._share_of
        share = self._share_of.pop(id(connection), None)
        try:
            await super().release(connection, timeout=timeout)
        finally:
            if taken:
                self.shares.give(share)


async def create_fair_pool(url: str, *, per_tenant: int, **options: Any) -> FairPool:
    """A connected `FairPool`; `options` as `asyncpg.create_pool` takes them (its defaults for the rest)."""
    defaults: dict[str, Any] = {
        "max_queries": 50_000,
        "loop": None,
        "connection_class": asyncpg.Connection,
        "record_class": asyncpg.Record,
    }
    pool = FairPool(url, per_tenant=per_tenant, **(defaults | options))
    await pool
    return pool
