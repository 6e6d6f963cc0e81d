"""Waking a process's idle saga claimer at once (LISTEN/NOTIFY on `nexus_sagas`), with the poll as the fallback.

The transaction that records a saga step, turns a saga to compensation or redrives one also runs
`SELECT pg_notify('nexus_sagas', '')` (`saga.sql` `notify_sagas`); PostgreSQL delivers it at commit, and
only then, so a woken claimer always finds the work it was woken for. One connection per process LISTENs
and calls `wake` (the executor's claim loop looks again).

One claim loop per process leases due sagas in batches (`SagaExecutor`), so a notification wakes one
claim, never a herd of loops each claiming for work one of them will take.

Only a latency shortcut: an idle claimer still looks every `saga_poll_s` and at the next time a saga it
knows of falls due (a retry's backoff, a lease running out), so a lost connection (PostgreSQL restarting)
costs latency, never work. The connection is opened again on the schedule of `nexus_wire/backoff.py`, and a
(re)connection wakes the claimer, since a notification may have been missed while it was away.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from nexus.retrying import Retrying
from nexus.store.listen import listen_forever
from nexus_wire.backoff import RetryPolicy

log = logging.getLogger(__name__)

CHANNEL = "nexus_sagas"
_RECONNECT_BASE_MS = 50.0


class SagaWakeups:
    """One LISTEN connection that calls `wake` for every notification and on every (re)connection."""

    def __init__(
        self,
        url: str,
        wake: Callable[[], None],
        *,
        reconnect_max_s: float,
        check_s: float,
        rng: random.Random | None = None,
    ) -> None:
        self.url, self.wake, self.check_s = url, wake, check_s
        self.connected = asyncio.Event()
        """Set while the LISTEN connection is up (tests wait for it before they count on a NOTIFY)."""
        policy = RetryPolicy(base_ms=min(_RECONNECT_BASE_MS, reconnect_max_s * 1000.0), max_ms=reconnect_max_s * 1000.0)
        self._retrying = Retrying(policy, rng)
        self.notifications = 0

    def _notified(self, *_: object) -> None:
        self.notifications += 1
        self.wake()

    async def run(self) -> None:
        """Listen until cancelled, reconnecting after any loss."""

        def connected() -> None:
            self.connected.set()
            self.wake()  # notifications sent while we were away are lost: look once now

        await listen_forever(
            self.url,
            CHANNEL,
            lambda _: self._notified(),
            self._retrying,
            on_connect=connected,
            on_disconnect=self.connected.clear,
            check_s=self.check_s,
        )
