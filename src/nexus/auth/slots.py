"""Processing slots: the requests one process works on at once, granted fairly between the tenants waiting.

The in-flight shares (`nexus.auth.shares`) bound how many requests a tenant may *hold*; they do not say whose
request the event loop works on next. One event loop serves every request it holds turn by turn, so a tenant
with 30 CPU-bound requests in flight gets 30 turns for another tenant's one: the light tenant's request
waits behind every busy one's. With `NEXUS_PROCESSING_SLOTS` = N the process works on at most N requests at once;
a request past its key check and body (an authenticated request, its body read) takes a slot before its route
runs, and the requests waiting for one wait in a queue per tenant, granted by deficit round robin: each turn
round the tenants waiting adds one unit to the tenant's credit, and a request is granted once its tenant's
credit covers its cost (one unit, plus one per `COST_BYTES` of its body: a 1,000-envelope batch costs about
sixteen single steps). A tenant with a backlog waits in its own queue while another tenant's request takes
the next free slot.

A slot is for work, not for waiting: a request gives its slot back (`give_back_slot`) when it starts to wait
for something that does not need the event loop (a long poll, an SSE stream, an MCP wait, the group commit's
shared transaction), and goes on without one. Requests without a principal (`/healthz`, `/readyz`, the
console's sign-in) take no slot. Refusals are unchanged: a request is refused (TENANT_BUSY, RATE_LIMITED) before
it ever waits for a slot. N = 0: no slots (every admitted request runs at once, as before).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import dataclasses
from contextlib import AbstractAsyncContextManager

COST_BYTES = 16384
"""A request's cost is one unit plus one per this many bytes of its body."""


def cost_of(body_bytes: int) -> int:
    """The cost of a request with a body of `body_bytes` bytes, in units of deficit round robin."""
    return 1 + max(0, body_bytes) // COST_BYTES


@dataclasses.dataclass(eq=False, slots=True)
class Grant:
    """One request's claim on a slot: waiting (`future` pending), then held until `release`."""

    slots: ProcessingSlots | None
    tenant: str
    cost: int
    future: asyncio.Future[None] | None = None
    held: bool = False

    def release(self) -> None:
        """The slot is free again (once: a second call does nothing)."""
        if self.held and self.slots is not None:
            self.held = False
            self.slots.put_back()


class ProcessingSlots:
    """At most `slots` requests worked on at once in this process; the waiting served by deficit round robin
    over their tenants (FIFO within a tenant)."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._free = slots
        self._waiting: dict[str, collections.deque[Grant]] = {}
        self._credit: dict[str, int] = {}
        self._ring: collections.deque[str] = collections.deque()

    @property
    def free(self) -> int:
        return self._free

    def waiting(self, tenant: str | None = None) -> int:
        """Requests waiting for a slot (of `tenant`, or of every tenant)."""
        if tenant is not None:
            return len(self._waiting.get(tenant, ()))
        return sum(len(q) for q in self._waiting.values())

    def at_once(self, tenant: str, cost: int = 1) -> Grant | None:
        """A held slot for a request of `tenant` if one is free and nobody waits (`acquire`'s first case), else
        None (without waiting)."""
        if self._free > 0 and not self._ring:
            self._free -= 1
            return Grant(self, tenant, max(1, cost), held=True)
        return None

    async def acquire(self, tenant: str, cost: int = 1) -> Grant:
        """A held slot for a request of `tenant` costing `cost` units, once deficit round robin grants it."""
        granted = self.at_once(tenant, cost)
        if granted is not None:  # nobody waiting: at once
            return granted
        grant = Grant(self, tenant, max(1, cost))
        grant.future = asyncio.get_running_loop().create_future()
        queue = self._waiting.get(tenant)
        if queue is None:
            queue = self._waiting[tenant] = collections.deque()
            self._ring.append(tenant)
        queue.append(grant)
        self._dispatch()
        try:
            await grant.future
        except asyncio.CancelledError:
            if grant.held:  # granted while being cancelled: the slot goes to the next
                grant.release()
            else:
                self._forget(grant)
            raise
        return grant

    def put_back(self) -> None:
        """A held slot is free: the next request waiting gets it."""
        self._free += 1
        self._dispatch()

    def _dispatch(self) -> None:
        """Grant free slots: turn by turn round the tenants waiting, each turn adding a unit to the tenant's
        credit and granting its oldest request once the credit covers its cost."""
        while self._free > 0 and self._ring:
            tenant = self._ring[0]
            queue = self._waiting[tenant]
            head = queue[0]
            credit = self._credit.get(tenant, 0) + 1
            if credit >= head.cost:
                queue.popleft()
                credit -= head.cost
                self._free -= 1
                head.held = True
                if head.future is not None and not head.future.done():
                    head.future.set_result(None)
            self._ring.rotate(-1)
            if queue:
                self._credit[tenant] = credit
            else:
                self._drop(tenant)

    def _forget(self, grant: Grant) -> None:
        queue = self._waiting.get(grant.tenant)
        if queue is None:
            return
        with contextlib.suppress(ValueError):
            queue.remove(grant)
        if not queue:
            self._drop(grant.tenant)

    def _drop(self, tenant: str) -> None:
        """`tenant` has nobody waiting: out of the turn, its credit forgotten (a credit is not saved up)."""
        self._waiting.pop(tenant, None)
        self._credit.pop(tenant, None)
        with contextlib.suppress(ValueError):
            self._ring.remove(tenant)


_HELD: contextvars.ContextVar[Grant | None] = contextvars.ContextVar("nexus_processing_slot", default=None)
"""The slot the current request holds (tasks it starts see the same grant)."""


class _Holding:
    """`processing`'s block holding a slot: acquired on entry, released on exit (a class, not a generator-based
    context manager: no generator and no wrapper frames per request)."""

    __slots__ = ("_cost", "_grant", "_slots", "_tenant", "_token")

    def __init__(self, slots: ProcessingSlots, tenant: str, cost: int) -> None:
        self._slots, self._tenant, self._cost = slots, tenant, cost

    async def __aenter__(self) -> None:
        grant = self._slots.at_once(self._tenant, self._cost) or await self._slots.acquire(self._tenant, self._cost)
        self._grant = grant
        self._token = _HELD.set(grant)

    async def __aexit__(self, *exc: object) -> None:
        _HELD.reset(self._token)
        self._grant.release()


class _AtOnce:
    """`processing`'s block without slots: nothing held."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_AT_ONCE = _AtOnce()


def processing(slots: ProcessingSlots | None, tenant: str, cost: int = 1) -> AbstractAsyncContextManager[None]:
    """Run the block holding one of `slots` for a request of `tenant` (None or 0 slots: at once, holding none);
    the slot is free again when the block ends, or earlier through `give_back_slot`."""
    if slots is None or slots.slots <= 0:
        return _AT_ONCE
    return _Holding(slots, tenant, cost)


def give_back_slot() -> None:
    """The current request is about to wait (not work): its processing slot, if it holds one, is free again."""
    grant = _HELD.get()
    if grant is not None:
        grant.release()
