"""`OutboxDispatcher`: delivers the outbox as signed webhooks, at least once and in order per order.

Three loops share one process:

* the claimer leases due deliveries to this instance, up to the free workers, within the tenants' and
  subscriptions' bulkheads (delivery/claims.py, delivery/bulkheads.py);
* one task per claimed delivery sends its request (delivery/sender.py; at most `webhook_workers` in flight);
* the flusher writes results back in batches (delivery/outcomes.py), each delivery's next state decided by
  the pure state machine of core/delivery.py.

A finished delivery wakes the claimer at once: it may have made the order's next notification the
oldest. Any number of instances may run against one database; the lease (`lease_s`) is what keeps
two of them from sending the same notification at the same time, and when an instance dies its
leases expire and another resends (the receiver deduplicates by ``Idempotency-Key``). A request
cancelled by shutdown is released (lease cleared, attempt not counted) and tells the breaker nothing.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

from nexus.core.breaker import BreakerConfig
from nexus.core.delivery import AttemptOutcome
from nexus.delivery.breakers import BreakerReport
from nexus.delivery.bulkheads import BulkheadConfig, Bulkheads
from nexus.delivery.claims import Claimed, Claimer
from nexus.delivery.outcomes import OutcomeWriter
from nexus.delivery.sender import Result, Sender
from nexus.errors import NexusError
from nexus.retrying import Retrying, sleep_until_set
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.listen import listen_forever
from nexus_wire.backoff import RetryPolicy

log = logging.getLogger(__name__)

_FLUSH_MAX = 1000


class OutboxDispatcher:
    """Claims, sends and records webhook deliveries until cancelled."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        owner: str,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.db, self.settings, self.owner = db, settings, owner
        self.workers = max(1, settings.webhook_workers)
        self.policy = RetryPolicy(
            base_ms=settings.retry_base_ms, max_ms=settings.retry_max_ms, max_attempts=settings.max_attempts
        )
        breaker_config = BreakerConfig(
            threshold=settings.breaker_threshold,
            cooldown_s=settings.breaker_cooldown_s,
            probe_ttl_s=settings.lease_s,
        )
        self.request_timeout_s = min(settings.webhook_timeout_s, settings.lease_s / 2)
        self._rng = rng or random.Random()
        self._report = BreakerReport(settings.metrics_max_subscriptions)
        self._claimer = Claimer(
            db, owner, settings.lease_s, breaker_config, self._report, subscriptions_ttl_s=settings.dispatcher_poll_s
        )
        self._bulkheads = Bulkheads(
            BulkheadConfig.of(
                self.workers,
                settings.delivery_max_inflight_per_tenant,
                settings.delivery_max_inflight_per_subscription,
            )
        )
        self._writer = OutcomeWriter(db, owner, self.policy, breaker_config, self._report, self._rng)
        self._sender: Sender | None = None
        self._inflight: set[asyncio.Task[None]] = set()
        self._unreported: dict[tuple[Any, int], Claimed] = {}
        self._results: asyncio.Queue[Result] = asyncio.Queue()
        self._unflushed: list[Result] = []
        self._wake = asyncio.Event()
        self._next_probe_check = 0.0
        self._next_gauges = 0.0
        self._free_slots: list[int] = list(range(self.workers))

    async def run(self) -> None:
        """Deliver until cancelled; then release in-flight attempts and flush what is known."""
        if self.request_timeout_s < self.settings.webhook_timeout_s:
            log.warning(
                "webhook timeout clipped to half the lease",
                extra={"action": "dispatcher_config", "timeout_s": self.request_timeout_s},
            )
        self._sender = Sender(self.workers, self.request_timeout_s, self.owner, self.settings)
        bulkheads = self._bulkheads.config
        log.info(
            "dispatcher started",
            extra={
                "action": "dispatcher_start",
                "workers": self.workers,
                "max_inflight_per_tenant": bulkheads.per_tenant,
                "max_inflight_per_subscription": bulkheads.per_subscription,
            },
        )
        loops = [
            asyncio.create_task(self._claim_loop()),
            asyncio.create_task(self._flush_loop()),
            asyncio.create_task(self._listen_loop()),
        ]
        try:
            await asyncio.gather(*loops)
        finally:
            for task in [*loops, *self._inflight]:
                task.cancel()
            await asyncio.gather(*loops, *self._inflight, return_exceptions=True)
            # Tasks cancelled before their first step never reported: release their leases too.
            for claimed in self._unreported.values():
                self._results.put_nowait(Result(claimed, AttemptOutcome.RELEASED, error="cancelled by shutdown"))
            self._unreported.clear()
            try:
                async with asyncio.timeout(self.settings.dispatcher_stop_flush_s):
                    await self._flush_remaining()
            except (NexusError, TimeoutError, OSError):
                log.warning(
                    "results lost at shutdown; their leases will expire", exc_info=True, extra={"action": "finish"}
                )
            await self._sender.aclose()
            log.info("dispatcher stopped", extra={"action": "dispatcher_stop"})

    # -- claiming ------------------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        while True:
            capacity = self.workers - len(self._inflight)
            got = 0
            self._wake.clear()
            if capacity > 0:
                try:
                    now = time.monotonic()
                    if now >= self._next_gauges:
                        self._next_gauges = now + self.settings.dispatcher_gauges_s
                        await self._report.refresh_gauges(self.db)
                    if now >= self._next_probe_check:
                        self._next_probe_check = now + self.settings.dispatcher_poll_s
                        for probe in await self._claimer.claim_probes(self._bulkheads):
                            self._start(probe)
                            capacity -= 1
                    rows = await self._claimer.claim(capacity, self._bulkheads) if capacity > 0 else []
                except NexusError as exc:
                    log.warning("claim failed", extra={"action": "claim", "error": str(exc)})
                    rows = []
                for claimed in rows:
                    self._start(claimed)
                got = len(rows)
            if capacity <= 0 or got < capacity:
                await sleep_until_set(self._wake, self.settings.dispatcher_poll_s)

    # -- sending -------------------------------------------------------------------------------------

    def _start(self, claimed: Claimed) -> None:
        self._unreported[(claimed.outbox_id, claimed.subscription_id)] = claimed
        slot = self._free_slots.pop() if self._free_slots else 0
        task = asyncio.create_task(self._deliver(claimed, slot))
        self._inflight.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            self._inflight.discard(finished)
            self._free_slots.append(slot)
            self._bulkheads.release(claimed.bulkhead, claimed.subscription_id)  # taken by the claimer

        task.add_done_callback(done)

    async def _deliver(self, claimed: Claimed, slot: int) -> None:
        assert self._sender is not None
        try:
            result = await self._sender.send(claimed, slot)
        except asyncio.CancelledError:
            self._report_result(Result(claimed, AttemptOutcome.RELEASED, error="cancelled by shutdown"))
            raise
        except Exception as exc:  # a bug in one request must not leave its lease dangling
            log.exception("delivery failed unexpectedly", extra={"action": "deliver", "order_id": claimed.order_id})
            result = Result(claimed, AttemptOutcome.RETRYABLE, error=f"{type(exc).__name__}: {exc}"[:500])
        self._report_result(result)

    def _report_result(self, result: Result) -> None:
        c = result.claimed
        self._unreported.pop((c.outbox_id, c.subscription_id), None)
        self._results.put_nowait(result)

    async def _listen_loop(self) -> None:
        """Wake the claimer when a gateway commits new notifications (LISTEN/NOTIFY).

        Only a latency shortcut: the claimer still polls every `dispatcher_poll_s`, so a lost
        connection (PostgreSQL restarting) costs latency, never a notification.
        """
        url = self.db.url
        assert url is not None
        # A constant wait between reconnections: the shortcut must come back as soon as the server does.
        retrying = Retrying(RetryPolicy.constant(self.settings.listen_retry_s * 1000.0), self._rng)
        await listen_forever(
            url, "nexus_outbox", lambda _: self._wake.set(), retrying, check_s=self.settings.listen_check_s
        )

    # -- recording -----------------------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        # A failed write is kept and tried again after `dispatcher_poll_s` (constant: the claimer polls at
        # the same pace); if we die first, the leases expire and the rows are resent.
        retrying = Retrying(RetryPolicy.constant(self.settings.dispatcher_poll_s * 1000.0), self._rng)
        while True:
            if not self._unflushed:
                self._unflushed.append(await self._results.get())
            while not self._results.empty() and len(self._unflushed) < _FLUSH_MAX:
                self._unflushed.append(self._results.get_nowait())
            try:
                await self._writer.write(self._unflushed)
            except NexusError as exc:
                log.warning("recording results failed", extra={"action": "finish", "error": str(exc)})
                await retrying.wait()
                continue
            retrying.reset()
            self._unflushed = []
            self._wake.set()

    async def _flush_remaining(self) -> None:
        while not self._results.empty():
            self._unflushed.append(self._results.get_nowait())
        if self._unflushed:
            await self._writer.write(self._unflushed)
            self._unflushed = []
