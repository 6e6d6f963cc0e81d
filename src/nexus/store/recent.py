"""Tenants seen recently: who counts as "another tenant there" for the fair shares that only bind while tenants
share (the pool's connections, `store/fair_pool.py`; the group commit's contended share and paced heavy lanes,
`ingress/batcher.py`)."""

from __future__ import annotations

import time
from collections.abc import Callable

ACTIVE_WINDOW_S = 1.0
"""How long after it was last seen a tenant still counts as there."""


class RecentTenants:
    """When each tenant was last seen, by `clock`; a tenant not seen within `window_s` counts no more."""

    def __init__(self, window_s: float = ACTIVE_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._seen: dict[str, float] = {}

    def saw(self, tenant: str) -> None:
        self._seen[tenant] = self._clock()
        if len(self._seen) > 64:  # tenants not seen within the window are forgotten
            since = self._clock() - self.window_s
            self._seen = {other: seen for other, seen in self._seen.items() if seen > since}

    def last_seen(self, tenant: str) -> float | None:
        """When `tenant` was last seen (the clock's seconds), if it still counts as there."""
        seen = self._seen.get(tenant)
        return seen if seen is not None and seen > self._clock() - self.window_s else None

    def other_than(self, tenant: str) -> bool:
        """Whether a tenant other than `tenant` was seen within the window."""
        since = self._clock() - self.window_s
        return any(other != tenant and seen > since for other, seen in self._seen.items())

    def several(self) -> bool:
        """Whether two or more tenants were seen within the window."""
        since = self._clock() - self.window_s
        return sum(1 for seen in self._seen.values() if seen > since) > 1
