"""`OutboxDispatcher`: delivers the outbox as signed webhooks, at least once and in order per order.

Three loops share one process and one keep-alive `httpx.AsyncClient`:

* the claimer takes, with one ``UPDATE ... FOR UPDATE SKIP LOCKED`` statement, up to as many due
  deliveries as there are free workers (only the oldest pending one of each (order, subscription);
  see ``claim`` in delivery.sql) and leases them to this instance;
* one task per claimed delivery sends its request (at most `webhook_workers` in flight);
* the flusher writes results back in batches, one transaction per batch (group commit), each result
  only if this instance still holds the lease, and feeds them to the subscription's circuit breaker.

A finished delivery wakes the claimer at once: it may have made the order's next notification the
oldest. Any number of instances may run against one database; the lease (`lease_s`) is what keeps
two of them from sending the same notification at the same time, and when an instance dies its
leases expire and another resends (the receiver deduplicates by ``Idempotency-Key``). The request
timeout is kept below half the lease so a slow answer cannot outlive the lease it was sent under.

Breakers (core/breaker.py) are rows shared by all instances: a subscription whose breaker is not
closed is left out of the claim, and once its cooldown is over the first instance to lock the row
takes the single probe slot and claims exactly one delivery for it. A request cancelled by shutdown
is released (lease cleared, attempt not counted) and tells the breaker nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import enum
import logging
import random
import time
from typing import Any

import asyncpg
import httpx

from nexus import metrics
from nexus.auth.transport import guarded_transport
from nexus.core.backoff import RetryPolicy, decide, parse_retry_after
from nexus.core.breaker import Breaker, BreakerConfig, BreakerState, transitions
from nexus.delivery.formats import render_body
from nexus.delivery.signing import delivery_headers, parse_secret
from nexus.errors import NexusError, UnsafeUrlError
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.errors import wrap_db_errors
from nexus.store.queries import query

log = logging.getLogger(__name__)

_FLUSH_MAX = 1000
_GAUGE_REFRESH_S = 1.0
_SLOTS_PER_CLIENT = 4


class Verdict(enum.StrEnum):
    """How an attempt ended, as the subscriber answered it."""

    DELIVERED = "delivered"  # 2xx
    RETRYABLE = "retryable"  # 5xx, 408, 429, timeout, connection error
    REJECTED = "rejected"  # any other status: the subscriber will never take it
    RELEASED = "released"  # cancelled by our shutdown: no answer, no evidence


def classify(status: int) -> Verdict:
    if 200 <= status < 300:
        return Verdict.DELIVERED
    if status >= 500 or status in (408, 429):
        return Verdict.RETRYABLE
    return Verdict.REJECTED


@dataclasses.dataclass(frozen=True, slots=True)
class Claimed:
    """One leased delivery attempt."""

    outbox_id: Any
    subscription_id: int
    order_id: str
    position: int
    attempt: int
    event_type: str
    body: bytes
    traceparent: str | None
    url: str
    key: bytes
    probe: bool = False
    tenant_id: str = "default"
    content_type: str = "application/json"


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    claimed: Claimed
    verdict: Verdict
    status: int | None = None
    error: str | None = None
    retry_after_ms: float | None = None


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
        self.db = db
        self.settings = settings
        self.owner = owner
        self.workers = max(1, settings.webhook_workers)
        self.policy = RetryPolicy(
            base_ms=settings.retry_base_ms, max_ms=settings.retry_max_ms, max_attempts=settings.max_attempts
        )
        self.breaker_config = BreakerConfig(
            threshold=settings.breaker_threshold,
            cooldown_s=settings.breaker_cooldown_s,
            probe_ttl_s=settings.lease_s,
        )
        self.request_timeout_s = min(settings.webhook_timeout_s, settings.lease_s / 2)
        self._rng = rng or random.Random()
        self._inflight: set[asyncio.Task[None]] = set()
        self._unreported: dict[tuple[Any, int], Claimed] = {}
        self._results: asyncio.Queue[Result] = asyncio.Queue()
        self._unflushed: list[Result] = []
        self._wake = asyncio.Event()
        self._keys: dict[str, bytes] = {}
        self._names: dict[int, str] = {}
        self._next_probe_check = 0.0
        self._turn = 0
        self._next_gauges = 0.0
        self._clients: list[httpx.AsyncClient] = []
        self._free_slots: list[int] = list(range(self.workers))

    async def run(self) -> None:
        """Deliver until cancelled; then release in-flight attempts and flush what is known."""
        if self.request_timeout_s < self.settings.webhook_timeout_s:
            log.warning(
                "webhook timeout clipped to half the lease",
                extra={"action": "dispatcher_config", "timeout_s": self.request_timeout_s},
            )
        # httpcore scans every connection of a pool on each request, so one pool of 32 connections
        # spends more CPU there than on HTTP; small pools, one per group of worker slots, keep it flat.
        self._clients = [
            httpx.AsyncClient(
                timeout=httpx.Timeout(self.request_timeout_s),
                limits=httpx.Limits(max_connections=_SLOTS_PER_CLIENT, max_keepalive_connections=_SLOTS_PER_CLIENT),
                headers={"user-agent": f"nexus-dispatcher ({self.owner})"},
                follow_redirects=False,
                # issue 11: the address actually connected to is checked (no webhook aimed inside)
                transport=guarded_transport(self.settings, limits=_SLOTS_PER_CLIENT),
            )
            for _ in range(0, self.workers, _SLOTS_PER_CLIENT)
        ]
        log.info("dispatcher started", extra={"action": "dispatcher_start", "workers": self.workers})
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
                self._results.put_nowait(Result(claimed, Verdict.RELEASED, error="cancelled by shutdown"))
            self._unreported.clear()
            try:
                await asyncio.wait_for(self._flush_remaining(), timeout=5.0)
            except (NexusError, TimeoutError, OSError):
                log.warning("results lost at shutdown; their leases will expire", exc_info=True)
            for client in self._clients:
                await client.aclose()
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
                        self._next_gauges = now + _GAUGE_REFRESH_S
                        await self._refresh_gauges()
                    if now >= self._next_probe_check:
                        self._next_probe_check = now + self.settings.dispatcher_poll_s
                        capacity -= await self._claim_probes()
                    rows = await self._claim(capacity) if capacity > 0 else []
                except NexusError as exc:
                    log.warning("claim failed", extra={"action": "claim", "error": str(exc)})
                    rows = []
                for claimed in rows:
                    self._start(claimed)
                got = len(rows)
            if capacity <= 0 or got < capacity:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=self.settings.dispatcher_poll_s)

    def _claimed(self, row: asyncpg.Record, probe: bool = False) -> Claimed:
        secret: str = row["secret"]
        key = self._keys.get(secret)
        if key is None:
            key = self._keys[secret] = parse_secret(secret)
        body, content_type = render_body(row["format"], row["body"], row["created_at"])
        return Claimed(
            outbox_id=row["outbox_id"],
            subscription_id=row["subscription_id"],
            order_id=row["order_id"],
            position=row["position"],
            attempt=row["attempts"],
            event_type=row["event_type"],
            body=body,
            traceparent=row["traceparent"],
            url=row["url"],
            key=key,
            probe=probe,
            tenant_id=row["tenant_id"],
            content_type=content_type,
        )

    async def _claim(self, limit: int) -> list[Claimed]:
        """Claim up to `limit` heads, shared across the claimable subscriptions (rotating who goes first),
        then any capacity left over to whoever still has work."""
        subscriptions = [r["id"] for r in await self.db.fetch(query("delivery.sql", "claimable_subscriptions"))]
        if not subscriptions:
            return []
        self._turn = (self._turn + 1) % len(subscriptions)
        subscriptions = subscriptions[self._turn :] + subscriptions[: self._turn]
        share = max(1, -(-limit // len(subscriptions)))
        rows: list[asyncpg.Record] = []
        busy: list[int] = []
        for subscription_id in subscriptions:
            want = min(share, limit - len(rows))
            if want <= 0:
                break
            got = await self._claim_for(subscription_id, want)
            rows.extend(got)
            if len(got) == want:
                busy.append(subscription_id)
        for subscription_id in busy:
            if len(rows) >= limit:
                break
            rows.extend(await self._claim_for(subscription_id, limit - len(rows)))
        return [self._claimed(r) for r in rows]

    async def _claim_for(self, subscription_id: int, limit: int) -> list[asyncpg.Record]:
        return await self.db.fetch(
            query("delivery.sql", "claim"), self.owner, self.settings.lease_s, limit, subscription_id, False
        )

    async def _claim_probes(self) -> int:
        """Take the probe slot of breakers whose cooldown is over, and claim one delivery for each."""
        taken: list[int] = []
        with wrap_db_errors():
            async with self.db.pool.acquire() as conn, conn.transaction():
                for row in await conn.fetch(query("delivery.sql", "lock_probe_candidates")):
                    before = _breaker(row)
                    after = before.take_probe(row["now"], self.owner, self.breaker_config)
                    if after is not None:
                        await _write_breaker(conn, row["subscription_id"], after)
                        self._transitioned(row["subscription_id"], before, after)
                        taken.append(row["subscription_id"])
        started = 0
        for subscription_id in taken:
            row = await self.db.fetchrow(
                query("delivery.sql", "claim"), self.owner, self.settings.lease_s, 1, subscription_id, True
            )
            if row is None:
                await self._release_probe(subscription_id)
                continue
            claimed = self._claimed(row, probe=True)
            log.info(
                "breaker probe",
                extra={"action": "breaker_probe", "subscription_id": subscription_id, "order_id": claimed.order_id},
            )
            self._start(claimed)
            started += 1
        return started

    async def _release_probe(self, subscription_id: int) -> None:
        with wrap_db_errors():
            async with self.db.pool.acquire() as conn, conn.transaction():
                rows = await conn.fetch(query("delivery.sql", "lock_breakers"), [subscription_id])
                for row in rows:
                    before = _breaker(row)
                    after = before.release_probe(self.owner)
                    if after != before:
                        await _write_breaker(conn, subscription_id, after)

    async def _refresh_gauges(self) -> None:
        for row in await self.db.fetch(query("delivery.sql", "breaker_states")):
            self._names[row["subscription_id"]] = row["name"]
            metrics.CIRCUIT_BREAKER_STATE.labels(subscription=row["name"]).set(BreakerState(row["state"]).gauge)

    # -- sending -------------------------------------------------------------------------------------

    def _start(self, claimed: Claimed) -> None:
        self._unreported[(claimed.outbox_id, claimed.subscription_id)] = claimed
        slot = self._free_slots.pop() if self._free_slots else 0
        task = asyncio.create_task(self._deliver(claimed, self._clients[slot // _SLOTS_PER_CLIENT]))
        self._inflight.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            self._inflight.discard(finished)
            self._free_slots.append(slot)

        task.add_done_callback(done)

    async def _deliver(self, claimed: Claimed, client: httpx.AsyncClient) -> None:
        try:
            result = await self._send(claimed, client)
        except asyncio.CancelledError:
            self._report(Result(claimed, Verdict.RELEASED, error="cancelled by shutdown"))
            raise
        except Exception as exc:  # a bug in one request must not leave its lease dangling
            log.exception("delivery failed unexpectedly", extra={"action": "deliver", "order_id": claimed.order_id})
            result = Result(claimed, Verdict.RETRYABLE, error=f"{type(exc).__name__}: {exc}"[:500])
        self._report(result)

    def _report(self, result: Result) -> None:
        c = result.claimed
        self._unreported.pop((c.outbox_id, c.subscription_id), None)
        self._results.put_nowait(result)

    async def _send(self, c: Claimed, client: httpx.AsyncClient) -> Result:
        headers = delivery_headers(
            key=c.key,
            outbox_id=str(c.outbox_id),
            order_id=c.order_id,
            event_type=c.event_type,
            position=c.position,
            attempt=c.attempt,
            timestamp=int(time.time()),
            body=c.body,
            traceparent=c.traceparent,
        )
        headers["content-type"] = c.content_type
        started = time.perf_counter()
        try:
            response = await client.post(c.url, content=c.body, headers=headers)
        except httpx.TimeoutException:
            return Result(c, Verdict.RETRYABLE, error=f"timeout after {self.request_timeout_s:g}s")
        except UnsafeUrlError as exc:  # issue 11: aimed inside; never sent, never retried
            return Result(c, Verdict.REJECTED, error=str(exc)[:500])
        except httpx.HTTPError as exc:
            return Result(c, Verdict.RETRYABLE, error=f"{type(exc).__name__}: {exc}"[:500])
        finally:
            metrics.WEBHOOK_REQUEST_SECONDS.observe(time.perf_counter() - started)
        verdict = classify(response.status_code)
        retry_after = None
        if verdict is Verdict.RETRYABLE:
            retry_after = parse_retry_after(response.headers.get("retry-after"), dt.datetime.now(dt.UTC))
        error = None if verdict is Verdict.DELIVERED else f"HTTP {response.status_code}"
        return Result(c, verdict, response.status_code, error, retry_after)

    async def _listen_loop(self) -> None:
        """Wake the claimer when a gateway commits new notifications (LISTEN/NOTIFY).

        Only a latency shortcut: the claimer still polls every `dispatcher_poll_s`, so a lost
        connection (PostgreSQL restarting) costs latency, never a notification.
        """
        url = self.db.url
        assert url is not None
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(url, timeout=10)
                closed = asyncio.Event()
                conn.add_termination_listener(lambda *_, closed=closed: closed.set())
                await conn.add_listener("nexus_outbox", lambda *_: self._wake.set())
                while not conn.is_closed():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(closed.wait(), timeout=5.0)
            except Exception:  # a shortcut must never take the dispatcher down with it
                log.debug("outbox listener lost its connection", exc_info=True)
            finally:
                if conn is not None:
                    conn.terminate()
            await asyncio.sleep(1.0)

    # -- recording -----------------------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        while True:
            if not self._unflushed:
                self._unflushed.append(await self._results.get())
            while not self._results.empty() and len(self._unflushed) < _FLUSH_MAX:
                self._unflushed.append(self._results.get_nowait())
            try:
                await self._write(self._unflushed)
            except NexusError as exc:
                # Kept for the next round; if we die first, the leases expire and the rows are resent.
                log.warning("recording results failed", extra={"action": "finish", "error": str(exc)})
                await asyncio.sleep(self.settings.dispatcher_poll_s)
                continue
            self._unflushed = []
            self._wake.set()

    async def _flush_remaining(self) -> None:
        while not self._results.empty():
            self._unflushed.append(self._results.get_nowait())
        if self._unflushed:
            await self._write(self._unflushed)
            self._unflushed = []

    async def _write(self, results: list[Result]) -> None:
        """Record a batch of results and their breaker evidence in one transaction."""
        columns: tuple[list[Any], ...] = ([], [], [], [], [], [], [])
        labels: dict[tuple[Any, int], str] = {}
        ending: set[tuple[str, str]] = set()
        for r in results:
            outcome, delay_ms, dead_reason, label = self._outcome(r)
            c = r.claimed
            if outcome in ("delivered", "dead"):
                ending.add((c.tenant_id, c.order_id))
            labels[(c.outbox_id, c.subscription_id)] = label
            for column, value in zip(
                columns,
                (c.outbox_id, c.subscription_id, outcome, delay_ms, r.status, r.error, dead_reason),
                strict=True,
            ):
                column.append(value)
        # A delivered or dead head hands the order over to its next notification: under the orders'
        # advisory locks, as the gateway adds notifications under them (see promote_heads).
        with wrap_db_errors():
            async with self.db.pool.acquire() as conn, conn.transaction():
                if ending:
                    await conn.execute(
                        query("gateway.sql", "lock_orders"), [t for t, _ in ending], [o for _, o in ending]
                    )
                applied = await conn.fetch(query("delivery.sql", "finish"), self.owner, *columns)
                moved = sorted(
                    {
                        (row["subscription_id"], row["order_id"], row["tenant_id"])
                        for row in applied
                        if row["outcome"] in ("delivered", "dead")
                    }
                )
                if moved:
                    await conn.execute(
                        query("delivery.sql", "promote_heads"),
                        [s for s, _, _ in moved],
                        [o for _, o, _ in moved],
                        [t for _, _, t in moved],
                    )
                changes = await self._feed_breakers(conn, results)
        for row in applied:
            metrics.WEBHOOK_DELIVERIES.labels(result=labels[(row["outbox_id"], row["subscription_id"])]).inc()
        for subscription_id, before, after in changes:
            self._transitioned(subscription_id, before, after)
        for r in results:
            if r.verdict is not Verdict.DELIVERED:
                c = r.claimed
                log.info(
                    "delivery attempt failed",
                    extra={
                        "action": labels[(c.outbox_id, c.subscription_id)],
                        "order_id": c.order_id,
                        "outbox_id": str(c.outbox_id),
                        "attempt": c.attempt,
                        "error": r.error,
                    },
                )

    def _outcome(self, r: Result) -> tuple[str, float, str | None, str]:
        """(finish outcome, retry delay ms, dead reason, metric label) of one result."""
        if r.verdict is Verdict.DELIVERED:
            return "delivered", 0.0, None, "delivered"
        if r.verdict is Verdict.RELEASED:
            return "released", 0.0, None, "released"
        if r.verdict is Verdict.REJECTED:
            return "dead", 0.0, f"rejected: {r.error}", "dead_rejected"
        decision = decide(self.policy, r.claimed.attempt, self._rng.random(), r.retry_after_ms)
        if decision.retry:
            return "retry", decision.delay_ms, None, "retry_scheduled"
        return "dead", 0.0, f"max_attempts: {r.claimed.attempt} attempts, last {r.error}", "dead_max_attempts"

    async def _feed_breakers(
        self, conn: asyncpg.Connection, results: list[Result]
    ) -> list[tuple[int, Breaker, Breaker]]:
        evidence = [r for r in results if r.verdict is not Verdict.RELEASED or r.claimed.probe]
        if not evidence:
            return []
        ids = sorted({r.claimed.subscription_id for r in evidence})
        rows = await conn.fetch(query("delivery.sql", "lock_breakers"), ids)
        if len(rows) < len(ids):
            await conn.execute(query("delivery.sql", "ensure_breakers"), ids)
            rows = await conn.fetch(query("delivery.sql", "lock_breakers"), ids)
        current = {row["subscription_id"]: _breaker(row) for row in rows}
        now: dt.datetime = rows[0]["now"]
        before = dict(current)
        for r in evidence:
            sid = r.claimed.subscription_id
            probe = self.owner if r.claimed.probe else None
            if r.verdict is Verdict.RELEASED:
                current[sid] = current[sid].release_probe(self.owner)
            else:
                # A subscriber that answers, even with a rejection, is up: only failures count.
                success = r.verdict is not Verdict.RETRYABLE
                current[sid] = current[sid].record(success, now, self.breaker_config, probe_owner=probe)
        changes = []
        for sid, after in current.items():
            if after != before[sid]:
                await _write_breaker(conn, sid, after)
                changes.append((sid, before[sid], after))
        return changes

    def _transitioned(self, subscription_id: int, before: Breaker, after: Breaker) -> None:
        for state in transitions(before, after):
            metrics.CIRCUIT_BREAKER_TRANSITIONS.labels(to=state.value).inc()
            name = self._names.get(subscription_id, str(subscription_id))
            metrics.CIRCUIT_BREAKER_STATE.labels(subscription=name).set(state.gauge)
            log.warning(
                "circuit breaker %s",
                state.value,
                extra={"action": "breaker", "subscription_id": subscription_id, "state": state.value},
            )


def _breaker(row: asyncpg.Record) -> Breaker:
    return Breaker(
        state=BreakerState(row["state"]),
        failure_count=row["failure_count"],
        last_failure_at=row["last_failure_at"],
        open_until=row["open_until"],
        probe_owner=row["probe_owner"],
        probe_until=row["probe_until"],
    )


async def _write_breaker(conn: asyncpg.Connection, subscription_id: int, b: Breaker) -> None:
    await conn.execute(
        query("delivery.sql", "write_breaker"),
        subscription_id,
        b.state.value,
        b.failure_count,
        b.last_failure_at,
        b.open_until,
        b.probe_owner,
        b.probe_until,
    )
