"""Rate limits per API key: a token bucket per key, `now` passed in. Pure (no I/O, no clock).

Limits are divided across processes, not shared: with `rate_limit_processes = N` each gateway process
grants a key limit / N per second, so N processes behind a balancer that spreads a key's requests grant
about the limit in total, without a database round trip per request.
"""

from __future__ import annotations

import dataclasses
import math

from nexus.auth.roles import Role


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


class RateLimiter:
    """Token buckets per key id: capacity one second's worth (at least 1), refilled continuously."""

    def __init__(self, limits: RateLimits, max_keys: int = 100_000) -> None:
        self.limits = limits
        self.max_keys = max_keys
        self._buckets: dict[int, _Bucket] = {}

    def take(self, key_id: int, roles: frozenset[Role], now: float) -> float:
        """Spend one token; return 0.0 if allowed, else the seconds until a token is available."""
        rate = self.limits.rate_for(roles)
        if rate <= 0:
            return 0.0
        capacity = max(1.0, rate)
        bucket = self._buckets.get(key_id)
        if bucket is None:
            if len(self._buckets) >= self.max_keys:
                self._buckets.clear()
            bucket = self._buckets[key_id] = _Bucket(capacity, now)
        bucket.tokens = min(capacity, bucket.tokens + (now - bucket.updated) * rate)
        bucket.updated = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / rate


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
