"""Waking idle saga executors at once (LISTEN/NOTIFY on `nexus_sagas`), with the poll as the fallback.

The transaction that records a saga step, turns a saga to compensation or redrives one also runs
`SELECT pg_notify('nexus_sagas', '')` (`saga.sql` `notify_sagas`); PostgreSQL delivers it at commit, and
only then, so a woken executor always finds the work it was woken for. One connection per process LISTENs
and sets an `asyncio.Event` that the process's executor loops wait on.

Only a latency shortcut: an idle executor still looks every `saga_poll_s` and at the next time a saga it
knows of falls due (a retry's backoff, a lease running out), so a lost connection (PostgreSQL restarting)
costs latency, never work. The connection is opened again on the schedule of `core/backoff.py`, and a
(re)connection wakes the executors, since a notification may have been missed while it was away.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random

from nexus.core.backoff import RetryPolicy
from nexus.retrying import Retrying
from nexus.store.listen import listen_forever

log = logging.getLogger(__name__)

CHANNEL = "nexus_sagas"
_RECONNECT_BASE_MS = 50.0


class SagaWakeups:
    """One LISTEN connection, and the idle executor loops of this process it wakes.

    A notification wakes one idle loop, not all of them: a herd of loops claiming at once, for work one
    of them will take, costs a claim per loop per notification (measured: with 16 loops, sagas ran 3x
    slower than polling). A woken loop that found work wakes the next (`wake_one`), so a burst spreads
    over the loops one claim at a time; a notification with no loop idle is kept (`pending`) for the
    next loop that would otherwise sleep.
    """

    def __init__(self, url: str, *, reconnect_max_s: float, check_s: float, rng: random.Random | None = None) -> None:
        self.url = url
        self.check_s = check_s
        self.connected = asyncio.Event()
        """Set while the LISTEN connection is up (tests wait for it before they count on a NOTIFY)."""
        policy = RetryPolicy(base_ms=min(_RECONNECT_BASE_MS, reconnect_max_s * 1000.0), max_ms=reconnect_max_s * 1000.0)
        self._retrying = Retrying(policy, rng)
        self._idle: collections.deque[asyncio.Future[None]] = collections.deque()
        self._pending = False
        self.notifications = 0

    def clear(self) -> None:
        """Forget a kept wake-up: called by a loop about to look for work (it will see what it was for)."""
        self._pending = False

    def wake_one(self) -> None:
        """Wake one idle loop; with none idle, the next loop about to sleep looks again instead."""
        while self._idle:
            waiter = self._idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._pending = True

    async def wait(self, timeout_s: float) -> bool:
        """Sleep until woken or `timeout_s`; True if woken."""
        if self._pending:
            self._pending = False
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._idle.append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout=max(timeout_s, 0.0))
        except TimeoutError:
            return False
        finally:
            if not waiter.done():
                waiter.cancel()
            with contextlib.suppress(ValueError):
                self._idle.remove(waiter)
        return True

    def _notified(self, *_: object) -> None:
        self.notifications += 1
        self.wake_one()

    async def run(self) -> None:
        """Listen until cancelled, reconnecting after any loss."""

        def connected() -> None:
            self.connected.set()
            self.wake_one()  # notifications sent while we were away are lost: look once now

        await listen_forever(
            self.url,
            CHANNEL,
            lambda _: self._notified(),
            self._retrying,
            on_connect=connected,
            on_disconnect=self.connected.clear,
            check_s=self.check_s,
        )
