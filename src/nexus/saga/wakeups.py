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
import contextlib
import logging
import random

import asyncpg

from nexus.core.backoff import RetryPolicy
from nexus.retrying import Retrying

log = logging.getLogger(__name__)

CHANNEL = "nexus_sagas"
_RECONNECT_BASE_MS = 50.0
_LIVENESS_CHECK_S = 5.0


class SagaWakeups:
    """One LISTEN connection and the event the executor loops of this process wait on."""

    def __init__(self, url: str, *, reconnect_max_s: float, rng: random.Random | None = None) -> None:
        self.url = url
        self.event = asyncio.Event()
        self.connected = asyncio.Event()
        """Set while the LISTEN connection is up (tests wait for it before they count on a NOTIFY)."""
        policy = RetryPolicy(base_ms=min(_RECONNECT_BASE_MS, reconnect_max_s * 1000.0), max_ms=reconnect_max_s * 1000.0)
        self._retrying = Retrying(policy, rng)
        self.notifications = 0

    def clear(self) -> None:
        """Forget earlier wake-ups: called before looking for work, so none arriving after is lost."""
        self.event.clear()

    async def wait(self, timeout_s: float) -> bool:
        """Sleep until a wake-up or `timeout_s`; True if woken."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.event.wait(), timeout=max(timeout_s, 0.0))
            return True
        return False

    def _notified(self, *_: object) -> None:
        self.notifications += 1
        self.event.set()

    async def run(self) -> None:
        """Listen until cancelled, reconnecting after any loss."""
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(self.url, timeout=10)
                closed = asyncio.Event()
                conn.add_termination_listener(lambda *_, closed=closed: closed.set())
                await conn.add_listener(CHANNEL, self._notified)
                self._retrying.reset()
                self.connected.set()
                self.event.set()  # notifications sent while we were away are lost: look once now
                while not conn.is_closed():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(closed.wait(), timeout=_LIVENESS_CHECK_S)
            except Exception:  # a shortcut must never take the executors down with it
                log.debug("saga listener lost its connection", exc_info=True, extra={"action": "saga_listen"})
            finally:
                self.connected.clear()
                if conn is not None:
                    conn.terminate()
            await self._retrying.wait()
