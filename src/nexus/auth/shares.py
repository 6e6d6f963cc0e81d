"""Fair shares of one process's requests in flight: per tenant, and for requests whose key is not yet known.

The server's cap (`NEXUS_HTTP_LIMIT_CONCURRENCY`) bounds the requests of everyone together; one tenant's
legal load could still fill it. So a tenant holds at most `NEXUS_MAX_REQUESTS_PER_TENANT` requests in flight
(a quarter of the cap by default: four tenants at their limit leave the cap itself as the last word), and
requests whose key is still being checked at most `NEXUS_MAX_REQUESTS_UNAUTHENTICATED` (a sixteenth): a
flood of unknown keys, each costing a lookup, cannot hold the process either. Beyond: 429 TENANT_BUSY
with Retry-After. Counts per process (requests in flight are a process's own), not divided.
"""

from __future__ import annotations

from nexus.auth.roles import ALL_TENANTS
from nexus.settings import Settings


class RequestShares:
    """Requests in flight per tenant, and without a known key, in this process."""

    def __init__(self, per_tenant: int, unauthenticated: int) -> None:
        self.per_tenant = per_tenant
        self.unauthenticated = unauthenticated
        self._tenants: dict[str, int] = {}
        self._unknown = 0

    @classmethod
    def of(cls, settings: Settings) -> RequestShares:
        cap = settings.http_limit_concurrency
        per_tenant = settings.max_requests_per_tenant or max(1, cap // 4)
        return cls(per_tenant, settings.max_requests_unauthenticated or max(1, cap // 16))

    def in_flight(self, tenant: str | None) -> int:
        return self._tenants.get(tenant or ALL_TENANTS, 0)

    def enter(self, tenant: str | None) -> bool:
        """Count one request of `tenant` (None: every tenant); False, counting nothing, at its share."""
        name = tenant or ALL_TENANTS
        held = self._tenants.get(name, 0)
        if held >= self.per_tenant:
            return False
        self._tenants[name] = held + 1
        return True

    def leave(self, tenant: str | None) -> None:
        name = tenant or ALL_TENANTS
        held = self._tenants.get(name, 0) - 1
        if held > 0:
            self._tenants[name] = held
        else:
            self._tenants.pop(name, None)

    def enter_unauthenticated(self) -> bool:
        """Count one request whose key is being checked; False, counting nothing, at the share."""
        if self._unknown >= self.unauthenticated:
            return False
        self._unknown += 1
        return True

    def leave_unauthenticated(self) -> None:
        self._unknown = max(0, self._unknown - 1)
