"""Waiting for an order to change: one LISTEN connection per process, fanned out to the waiters.

`Gateway.submit` (and every other writer of decisions: sweepers, approvals) sends `NOTIFY nexus_orders,
'{"tenant": ..., "order_id": ...}'` in the deciding transaction, so PostgreSQL delivers it at commit and
only then. The process's `DecisionListener` holds the one connection that LISTENs and sets the events of
the waiters watching that order (an order is the pair tenant, order_id). A notification is only a wake-up:
a waiter always re-reads the order (or the decision log) itself, so a lost connection costs latency, never
a change. When the connection is lost (PostgreSQL restarting) every waiter is woken to re-read, and the
listener reconnects on the core/backoff schedule.

A wait ends with its client: every request runs with a `WaitingClient` (set by the request guard) that
knows whether the client's connection is gone (the HTTP server's protocol sets an event when it is lost)
and whether the credential that called is still valid. A long poll, a stream or an MCP `wait_for_order`
asks it at least every RECHECK_S, so it frees its slot and its task within a second of its client leaving,
ends within the auth cache's TTL plus a second of its key's revocation, and within a second of its OAuth
access token's `exp` (`KeyRevokedError`, 401, both). When the
process stops (`end_waits`, at the end of a drain) every wait answers what it has and ends, and a new one
answers at once: the client asks again, through the load balancer, an instance that is not stopping.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import json
import logging
import random
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from nexus.auth.slots import give_back_slot
from nexus.errors import KeyRevokedError, TooManyWaitsError
from nexus.retrying import Retrying, sleep_until_set
from nexus.settings import Settings
from nexus.store.listen import listen_forever
from nexus_wire.backoff import RetryPolicy

log = logging.getLogger(__name__)

CHANNEL = "nexus_orders"
# How often a quiet wait asks whether its client is still there and its key still valid (bound: 1 s).
RECHECK_S = 0.5


@dataclasses.dataclass(frozen=True, slots=True)
class WaitingClient:
    """The client a request serves, as the server and the key check know it."""

    gone: asyncio.Event | None = None
    """Set by the HTTP server when the client's connection is lost (None: a server that cannot tell)."""
    key_valid: Callable[[], Awaitable[bool]] | None = None
    """Whether the calling credential is still valid (a key through the auth cache: a revocation is seen
    within its TTL; an access token until its `exp`)."""
    tenant: str = "*"
    """The calling key's tenant (`*`: a key spanning every tenant), whose share of waits a wait takes."""

    async def check(self) -> bool:
        """Whether the wait should go on: False once the client has gone; KeyRevokedError once the credential
        is no longer valid (a key revoked, a token expired)."""
        if self.gone is not None and self.gone.is_set():
            return False
        if self.key_valid is not None and not await self.key_valid():
            raise KeyRevokedError()
        return True


CLIENT: contextvars.ContextVar[WaitingClient | None] = contextvars.ContextVar("nexus_waiting_client", default=None)
"""The current request's client: set per request by the request guard, read by every wait (MCP's too)."""


def current_client() -> WaitingClient:
    """The current request's client; outside a request, one that never leaves."""
    return CLIENT.get() or WaitingClient()


class DecisionListener:
    """The process's one LISTEN connection on `nexus_orders`, and the waiters it wakes."""

    def __init__(self, url: str | None, settings: Settings) -> None:
        self.url = url
        self.settings = settings
        self._waiters: dict[tuple[str, str], set[asyncio.Event]] = defaultdict(set)
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        self.ending = False
        """Set by `end_waits`: the process is stopping, waits answer their current state and end."""

    @contextlib.contextmanager
    def watch(self, tenant_id: str, order_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever a decision about the order commits (or the listener reconnected)."""
        self.ensure_running()
        event = asyncio.Event()
        key = (tenant_id, order_id)
        self._waiters[key].add(event)
        try:
            yield event
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[key]

    def ensure_running(self) -> None:
        """Start the listening task on first use when no one started it (an app without `nexus serve`)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.run(), name="decision-listener")

    def adopt(self, task: asyncio.Task[None]) -> None:
        self._task = task

    def end_waits(self) -> None:
        """Have every wait, now and from now on, answer its current state and end (the process stops)."""
        self.ending = True
        self._wake_all()

    def _wake_all(self) -> None:
        for events in list(self._waiters.values()):
            for event in events:
                event.set()

    def _on_notify(self, payload: str) -> None:
        try:
            body = json.loads(payload)
            key = (str(body["tenant"]), str(body["order_id"]))
        except (ValueError, KeyError, TypeError):
            return  # not ours (someone else NOTIFYing the channel): nothing to wake
        for event in self._waiters.get(key, ()):
            event.set()

    async def run(self) -> None:
        """LISTEN forever; reconnect after a loss (core/backoff schedule), waking every waiter each time."""
        assert self.url is not None
        base_ms = self.settings.listen_retry_s * 1000.0
        retrying = Retrying(RetryPolicy(base_ms=base_ms / 4, max_ms=base_ms * 5), random.Random())

        def connected() -> None:
            self.connected.set()
            self._wake_all()  # changes made while we were not listening: have everyone re-read

        def disconnected() -> None:
            self.connected.clear()
            self._wake_all()

        await listen_forever(
            self.url,
            CHANNEL,
            self._on_notify,
            retrying,
            on_connect=connected,
            on_disconnect=disconnected,
            check_s=self.settings.listen_check_s,
        )


class WaitSlots:
    """Open SSE streams, waiting long polls and MCP waits in this process: at most `per_key` per key
    (`NEXUS_MAX_WAITS_PER_KEY`) and `per_tenant` per tenant (`NEXUS_MAX_WAITS_PER_TENANT`; the tenant of
    the current request's key). A wait holds a connection for as long as it lasts, so the caps are what
    keep one key, or one tenant's many keys, from taking every connection the process has. Taking one gives
    the request's processing slot back (`nexus.auth.slots`): the wait goes on without one."""

    def __init__(self, per_key: int, per_tenant: int | None = None) -> None:
        self.per_key = per_key
        self.per_tenant = per_tenant
        self._held: dict[int, int] = {}
        self._tenants: dict[str, int] = {}
        self._tenant_of: dict[int, str] = {}

    def held(self, key_id: int) -> int:
        return self._held.get(key_id, 0)

    def held_by_tenant(self, tenant: str) -> int:
        return self._tenants.get(tenant, 0)

    def refusal_messages(self) -> tuple[str, str]:
        """What a refused wait is told: its key's cap reached, or its tenant's."""
        return (
            f"this key already holds {self.per_key} open streams and long polls",
            f"this tenant's keys already hold {self.per_tenant} open streams and long polls",
        )

    def refusal(self, key_id: int, tenant: str) -> str | None:
        """Why a new wait of the key (of `tenant`, unless it already holds waits) would be refused; None if
        it would be taken. Reads only: the early refusal (nexus.ingress.wait_refusals) asks before routing."""
        if self._held.get(key_id, 0) >= self.per_key:
            return self.refusal_messages()[0]
        tenant = self._tenant_of.get(key_id, tenant)
        if self.per_tenant is not None and self._tenants.get(tenant, 0) >= self.per_tenant:
            return self.refusal_messages()[1]
        return None

    def take(self, key_id: int) -> None:
        """Hold one slot of the key's (and its tenant's); raise TooManyWaitsError when all are held."""
        tenant = self._tenant_of.get(key_id) or current_client().tenant
        refused = self.refusal(key_id, tenant)
        if refused is not None:
            raise TooManyWaitsError(refused)
        self._held[key_id] = self._held.get(key_id, 0) + 1
        self._tenant_of[key_id] = tenant
        self._tenants[tenant] = self._tenants.get(tenant, 0) + 1
        give_back_slot()  # a wait holds a connection, not one of the process's processing slots

    def give_back(self, key_id: int) -> None:
        tenant = self._tenant_of.get(key_id)
        held = self._held.get(key_id, 0) - 1
        if held > 0:
            self._held[key_id] = held
        else:
            self._held.pop(key_id, None)
            self._tenant_of.pop(key_id, None)
        if tenant is not None:
            in_tenant = self._tenants.get(tenant, 0) - 1
            if in_tenant > 0:
                self._tenants[tenant] = in_tenant
            else:
                self._tenants.pop(tenant, None)

    @contextlib.contextmanager
    def hold(self, key_id: int) -> Iterator[None]:
        self.take(key_id)
        try:
            yield
        finally:
            self.give_back(key_id)


OrderView = dict[str, Any]


def changed(
    order: OrderView | None, baseline: OrderView | None, after_seq: int | None, after_status: str | None
) -> bool:
    """Whether a long poll may answer: last_seq passed `after_seq`, the status differs from `after_status`,
    or (with neither) the order differs from its first reading."""
    if after_seq is not None or after_status is not None:
        if order is None:
            return False
        if after_seq is not None and order["last_seq"] > after_seq:
            return True
        return after_status is not None and order["status"] != after_status
    return order != baseline


async def wait_for_order(
    listener: DecisionListener,
    read: Callable[[], Awaitable[OrderView | None]],
    tenant_id: str,
    order_id: str,
    wait_s: float,
    *,
    after_seq: int | None = None,
    after_status: str | None = None,
) -> OrderView | None:
    """The order as soon as it `changed`, else its current state after `wait_s` seconds (a long poll); its
    last reading as soon as the client has gone (nobody reads the answer); KeyRevokedError once the key is."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    client = current_client()
    with listener.watch(tenant_id, order_id) as woken:
        baseline = order = await read()
        while not listener.ending and not changed(order, baseline, after_seq, after_status):
            left = deadline - loop.time()
            if left <= 0 or not await client.check():
                break
            if await sleep_until_set(woken, min(left, RECHECK_S)):
                woken.clear()
                order = await read()  # the current state, also when the process is ending
    return order
