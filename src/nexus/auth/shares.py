"""Fair shares of one process's requests in flight: per tenant, and for requests whose key is not yet known.

The server's cap (`NEXUS_HTTP_LIMIT_CONCURRENCY`) bounds the requests of everyone together; one tenant's
legal load could still fill it. So a tenant holds at most `NEXUS_MAX_REQUESTS_PER_TENANT` requests in flight
(a quarter of the cap by default: four tenants at their limit leave the cap itself as the last word), and
requests whose key is still being checked at most `NEXUS_MAX_REQUESTS_UNAUTHENTICATED` (a sixteenth): a
flood of unknown keys, each costing a lookup, cannot hold the process either. Beyond: 429 TENANT_BUSY
with Retry-After. Counts per process (requests in flight are a process's own), not divided.

Under `nexus serve` a request is counted as soon as its head is complete, before its task runs
(`nexus.ingress.http_server`): in its key's tenant's share when the key is one the cache knows valid, else
in the unauthenticated share, as a `Ticket`; the key check then moves the ticket to the key's tenant, and the
ticket is released once, when the request ends. Only requests counted in a share count toward the cap, so a
burst of one tenant's requests refused at its share never fills the cap for the others.
"""

from __future__ import annotations

from nexus.auth.roles import ALL_TENANTS
from nexus.settings import Settings

TICKET = "nexus.request_share"
"""The scope extension holding a request's `Ticket` when the server counted it at its head."""

TENANT_BUSY_MESSAGE = "this tenant has as many requests in flight as it may"
UNCHECKED_BUSY_MESSAGE = "too many requests whose key is not yet checked"


class Ticket:
    """One request counted in a share (`share`: a tenant, ALL_TENANTS, or None for the unauthenticated
    share) until `release`, which counts it out once however often it is called."""

    __slots__ = ("_shares", "released", "share")

    def __init__(self, shares: RequestShares, share: str | None) -> None:
        self._shares = shares
        self.share = share
        self.released = False

    def move(self, tenant: str | None) -> bool:
        """Count the request in `tenant`'s share (None: every tenant) instead; False, leaving it counted where
        it was, when that share is full."""
        name = tenant or ALL_TENANTS
        if self.released or name == self.share:
            return True
        if self._shares.full(name):
            return False
        self._shares.drop(self.share)
        self._shares.add(name)
        self.share = name
        return True

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._shares.drop(self.share)


class RequestShares:
    """Requests in flight per tenant, and without a known key, in this process."""

    def __init__(self, per_tenant: int, unauthenticated: int) -> None:
        self.per_tenant = per_tenant
        self.unauthenticated = unauthenticated
        self._tenants: dict[str, int] = {}
        self._unknown = 0
        self.total = 0
        """Requests counted in any share: what the server's request cap bounds."""

    @classmethod
    def of(cls, settings: Settings) -> RequestShares:
        cap = settings.http_limit_concurrency
        per_tenant = settings.max_requests_per_tenant or max(1, cap // 4)
        return cls(per_tenant, settings.max_requests_unauthenticated or max(1, cap // 16))

    def in_flight(self, tenant: str | None) -> int:
        return self._tenants.get(tenant or ALL_TENANTS, 0)

    @property
    def unchecked(self) -> int:
        """Requests counted in the unauthenticated share."""
        return self._unknown

    def full(self, share: str | None) -> bool:
        """Whether `share` (a tenant, ALL_TENANTS, or None for the unauthenticated share) holds all it may."""
        if share is None:
            return self._unknown >= self.unauthenticated
        return self._tenants.get(share, 0) >= self.per_tenant

    def take(self, share: str | None) -> Ticket | None:
        """A ticket counting one request in `share`; None, counting nothing, when it is full."""
        if self.full(share):
            return None
        self.add(share)
        return Ticket(self, share)

    def add(self, share: str | None) -> None:
        """Count one request in `share` (whether it is full is the caller's to ask)."""
        self.total += 1
        if share is None:
            self._unknown += 1
        else:
            self._tenants[share] = self._tenants.get(share, 0) + 1

    def drop(self, share: str | None) -> None:
        """Count out one request of `share`."""
        self.total = max(0, self.total - 1)
        if share is None:
            self._unknown = max(0, self._unknown - 1)
            return
        held = self._tenants.get(share, 0) - 1
        if held > 0:
            self._tenants[share] = held
        else:
            self._tenants.pop(share, None)

    def enter(self, tenant: str | None) -> bool:
        """Count one request of `tenant` (None: every tenant); False, counting nothing, at its share."""
        name = tenant or ALL_TENANTS
        if self.full(name):
            return False
        self.add(name)
        return True

    def leave(self, tenant: str | None) -> None:
        self.drop(tenant or ALL_TENANTS)

    def enter_unauthenticated(self) -> bool:
        """Count one request whose key is being checked; False, counting nothing, at the share."""
        if self.full(None):
            return False
        self.add(None)
        return True

    def leave_unauthenticated(self) -> None:
        self.drop(None)
