"""Sending: one signed webhook request per claimed delivery, and how the subscriber answered it.

httpcore scans every connection of a pool on each request, so one pool of 32 connections spends more
CPU there than on HTTP; small keep-alive pools, one per group of worker slots, keep it flat. The
request timeout is kept below half the lease so a slow answer cannot outlive the lease it was sent
under.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time

import httpx

from nexus import metrics
from nexus.core.backoff import parse_retry_after
from nexus.core.delivery import AttemptOutcome, outcome_of_status
from nexus.delivery.claims import Claimed
from nexus.delivery.signing import delivery_headers

SLOTS_PER_CLIENT = 4


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    """How one claimed attempt ended."""

    claimed: Claimed
    outcome: AttemptOutcome
    status: int | None = None
    error: str | None = None
    retry_after_ms: float | None = None


class Sender:
    """Posts claimed deliveries with signed headers over a few keep-alive clients (one per slot group)."""

    def __init__(self, workers: int, request_timeout_s: float, owner: str) -> None:
        self.request_timeout_s = request_timeout_s
        self._clients = [
            httpx.AsyncClient(
                timeout=httpx.Timeout(request_timeout_s),
                limits=httpx.Limits(max_connections=SLOTS_PER_CLIENT, max_keepalive_connections=SLOTS_PER_CLIENT),
                headers={"user-agent": f"nexus-dispatcher ({owner})"},
                follow_redirects=False,
            )
            for _ in range(0, workers, SLOTS_PER_CLIENT)
        ]

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()

    async def send(self, c: Claimed, slot: int) -> Result:
        """Send `c` from worker slot `slot`; network failures are a RETRYABLE result, never an exception."""
        client = self._clients[slot // SLOTS_PER_CLIENT]
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
        started = time.perf_counter()
        try:
            response = await client.post(c.url, content=c.body, headers=headers)
        except httpx.TimeoutException:
            return Result(c, AttemptOutcome.RETRYABLE, error=f"timeout after {self.request_timeout_s:g}s")
        except httpx.HTTPError as exc:
            return Result(c, AttemptOutcome.RETRYABLE, error=f"{type(exc).__name__}: {exc}"[:500])
        finally:
            metrics.WEBHOOK_REQUEST_SECONDS.observe(time.perf_counter() - started)
        outcome = outcome_of_status(response.status_code)
        retry_after = None
        if outcome is AttemptOutcome.RETRYABLE:
            retry_after = parse_retry_after(response.headers.get("retry-after"), dt.datetime.now(dt.UTC))
        error = None if outcome is AttemptOutcome.DELIVERED else f"HTTP {response.status_code}"
        return Result(c, outcome, response.status_code, error, retry_after)
