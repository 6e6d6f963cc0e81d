"""Rate limits per API key and per tenant: token buckets of units of work, `now` passed in. Pure (no I/O, no
clock).

Limits are divided across processes, not shared: with `rate_limit_processes = N` each gateway process
grants a key limit / N per second, so N processes behind a balancer that spreads a key's requests grant
about the limit in total, without a database round trip per request.
"""

from __future__ import annotations

import dataclasses
import math

from nexus.auth.roles import ALL_TENANTS, Role


@dataclasses.dataclass(frozen=True, slots=True)
class RateLimits:
    """Requests per second per role (0: unlimited); a key gets the highest limit among its roles."""

    per_role: dict[Role, float]
    processes: int = 1

    def rate_for(self, roles: frozenset[Role]) -> float:
        rates = [self.per_role.get(r, 0.0) for r in roles]
        if not rates or any(r <= 0 for r in rates):
            return 0.0
        return max(rates) / max(1, self.processes)


@dataclasses.dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class _Buckets:
    """Token buckets by name: capacity one second's worth (at least 1), refilled continuously. Work of many
    units passes while a unit is left and leaves the bucket in debt, repaid before the next work passes (a
    1,000-envelope batch under a limit of 500/s holds the name's next requests for about two seconds)."""

    def __init__(self, max_names: int = 100_000) -> None:
        self.max_names = max_names
        self._buckets: dict[object, _Bucket] = {}

    def take(self, name: object, rate: float, now: float, units: float = 1.0) -> float:
        """Spend `units`; return 0.0 if allowed, else the seconds until they would be (nothing spent)."""
        if rate <= 0:
            return 0.0
        capacity = max(1.0, rate)
        bucket = self._buckets.get(name)
        if bucket is None:
            if len(self._buckets) >= self.max_names:
                self._buckets.clear()
            bucket = self._buckets[name] = _Bucket(capacity, now)
        bucket.tokens = min(capacity, bucket.tokens + (now - bucket.updated) * rate)
        bucket.updated = now
        needed = min(units, 1.0)
        if bucket.tokens >= needed:
            bucket.tokens -= units
            return 0.0
        return (needed - bucket.tokens) / rate

    def refund(self, name: object, units: float) -> None:
        """Give back units spent for work that was then refused elsewhere."""
        bucket = self._buckets.get(name)
        if bucket is not None:
            bucket.tokens += units


class RateLimiter:
    """Units of work per second per key (its roles' limit) and per tenant (the sum over all its keys, any
    role: `tenant_rate`, 0 = off; keys spanning every tenant share one bucket), both divided among processes.
    A request is a unit; an envelope of a batch is one too (`charge` takes the rest of a batch's)."""

    def __init__(self, limits: RateLimits, max_keys: int = 100_000, tenant_rate: float = 0.0) -> None:
        self.limits = limits
        self.tenant_rate = tenant_rate / max(1, limits.processes)
        self._keys = _Buckets(max_keys)
        self._tenants = _Buckets(max_keys)
        self._rates: dict[frozenset[Role], float] = {}
        """`limits.rate_for` of each set of roles seen (a handful: the limits never change)."""

    def take(
        self, key_id: int, roles: frozenset[Role], now: float, units: float = 1.0, tenant: str | None = None
    ) -> float:
        """Spend `units` of the key's and its tenant's; return 0.0 if allowed, else the seconds to wait."""
        rate = self._rates.get(roles)
        if rate is None:
            rate = self._rates[roles] = self.limits.rate_for(roles)
        wait = self._keys.take(key_id, rate, now, units)
        if wait > 0:
            return wait
        wait = self._tenants.take(tenant or ALL_TENANTS, self.tenant_rate, now, units)
        if wait > 0:
            self._keys.refund(key_id, units)  # the tenant's limit refused the work: the key did nothing
        return wait


def retry_after_header(wait_s: float) -> str:
    """Retry-After in whole seconds, at least 1."""
    return str(max(1, math.ceil(wait_s)))


class FailureThrottle:
    """Failed authentications per source address: a token bucket per address holding `per_minute` / the
    process count attempts, refilled continuously. Only failures spend tokens and only failures are
    refused, so a valid key is never refused because others (or the same address) failed."""

    def __init__(self, per_minute: float, processes: int = 1, max_addresses: int = 100_000) -> None:
        self.capacity = per_minute / max(1, processes)
        self.rate = self.capacity / 60.0
        self.max_addresses = max_addresses
        self._buckets: dict[str, _Bucket] = {}

    def fail(self, address: str, now: float) -> float:
        """Record a failed attempt from `address`: 0.0 while it is within its allowance (answer 401), else
        the seconds until the next failed attempt would be (answer 429)."""
        if self.capacity <= 0:
            return 0.0
        bucket = self._buckets.get(address)
        if bucket is None:
            if len(self._buckets) >= self.max_addresses:
                self._buckets.clear()
            bucket = self._buckets[address] = _Bucket(self.capacity, now)
        bucket.tokens = min(self.capacity, bucket.tokens + (now - bucket.updated) * self.rate)
        bucket.updated = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self.rate
