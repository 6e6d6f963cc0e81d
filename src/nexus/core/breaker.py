"""The circuit breaker of one webhook subscription, as a pure state machine. Clock passed in.

A subscriber that keeps failing is skipped for a cooldown instead of being hammered: nothing is claimed
for it and no attempt is counted, so its notifications do not burn their ten attempts against a
receiver that is down. The state lives in PostgreSQL (one `circuit_breakers` row per subscription,
shared by every dispatcher instance); the dispatcher reads the row under a lock, asks this module for
the next state and writes it back. Every transition lives here::

    CLOSED --(threshold consecutive failures)--> OPEN --(cooldown over, one instance takes the probe)-->
    HALF_OPEN --(probe succeeds)--> CLOSED
    HALF_OPEN --(probe fails)--> OPEN (a new cooldown)

Results of requests that were already in flight when the breaker opened arrive late; they are stale
evidence and change nothing while OPEN or HALF_OPEN (only the probe's own result decides HALF_OPEN).
The probe slot has an expiry (`probe_until`) so a dispatcher that dies holding it cannot wedge the
subscription. A request cancelled by shutdown is no evidence at all: the dispatcher does not call
`record` for it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum


class BreakerState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"

    @property
    def gauge(self) -> int:
        """The value of `nexus_circuit_breaker_state`: 0 closed, 1 half-open, 2 open."""
        return {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}[self]


@dataclasses.dataclass(frozen=True, slots=True)
class BreakerConfig:
    threshold: int = 5
    """Consecutive failures that open a closed breaker."""
    cooldown_s: float = 30.0
    """How long an open breaker skips its subscription before letting a probe through."""
    probe_ttl_s: float = 60.0
    """How long a taken probe slot stays taken if its holder never reports (it died)."""

    def __post_init__(self) -> None:
        if self.threshold < 1:
            raise ValueError("threshold must be at least 1")
        if self.cooldown_s < 0 or self.probe_ttl_s <= 0:
            raise ValueError("cooldown must not be negative and probe ttl must be positive")


@dataclasses.dataclass(frozen=True, slots=True)
class Breaker:
    """One subscription's breaker: the columns of its `circuit_breakers` row."""

    state: BreakerState = BreakerState.CLOSED
    failure_count: int = 0
    last_failure_at: dt.datetime | None = None
    open_until: dt.datetime | None = None
    probe_owner: str | None = None
    probe_until: dt.datetime | None = None

    def admits_all(self) -> bool:
        """Whether deliveries may be claimed freely (not just one probe)."""
        return self.state is BreakerState.CLOSED

    def probe_available(self, now: dt.datetime) -> bool:
        """Whether a dispatcher could take the probe slot now."""
        if self.state is BreakerState.OPEN:
            return self.open_until is None or now >= self.open_until
        if self.state is BreakerState.HALF_OPEN:
            return self.probe_owner is None or self.probe_until is None or now >= self.probe_until
        return False

    def take_probe(self, now: dt.datetime, owner: str, config: BreakerConfig) -> Breaker | None:
        """Take the single probe slot (OPEN after its cooldown -> HALF_OPEN); None if not available."""
        if not self.probe_available(now):
            return None
        return dataclasses.replace(
            self,
            state=BreakerState.HALF_OPEN,
            probe_owner=owner,
            probe_until=now + dt.timedelta(seconds=config.probe_ttl_s),
        )

    def release_probe(self, owner: str) -> Breaker:
        """Give the probe slot back unused (nothing was due to probe with, or the request was cancelled)."""
        if self.state is BreakerState.HALF_OPEN and self.probe_owner == owner:
            return dataclasses.replace(self, probe_owner=None, probe_until=None)
        return self

    def record(
        self, success: bool, now: dt.datetime, config: BreakerConfig, *, probe_owner: str | None = None
    ) -> Breaker:
        """The breaker after one request's result; `probe_owner` is set when the request was the probe."""
        if self.state is BreakerState.CLOSED:
            if success:
                return self if self.failure_count == 0 else dataclasses.replace(self, failure_count=0)
            count = self.failure_count + 1
            if count >= config.threshold:
                return self._opened(now, config, count)
            return dataclasses.replace(self, failure_count=count, last_failure_at=now)
        is_probe = self.state is BreakerState.HALF_OPEN and probe_owner is not None and probe_owner == self.probe_owner
        if not is_probe:
            return self  # stale: a request claimed before the breaker opened
        if success:
            return Breaker()
        return self._opened(now, config, self.failure_count + 1)

    @staticmethod
    def _opened(now: dt.datetime, config: BreakerConfig, count: int) -> Breaker:
        return Breaker(
            state=BreakerState.OPEN,
            failure_count=count,
            last_failure_at=now,
            open_until=now + dt.timedelta(seconds=config.cooldown_s),
        )


def transitions(before: Breaker, after: Breaker) -> list[BreakerState]:
    """The states entered going from `before` to `after` (for the transitions counter)."""
    return [] if before.state is after.state else [after.state]
