"""Sending: one signed webhook request per claimed delivery, and how the subscriber answered it.

httpcore scans every connection of a pool on each request, so one pool of 32 connections spends more
CPU there than on HTTP; small keep-alive pools, one per group of worker slots, keep it flat. The
request timeout is kept below half the lease so a slow answer cannot outlive the lease it was sent
under.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import time

import httpx

from nexus import metrics, tracing
from nexus.auth.transport import guarded_transport
from nexus.core.backoff import parse_retry_after
from nexus.core.delivery import AttemptOutcome, outcome_of_status
from nexus.delivery.claims import Claimed
from nexus.delivery.signing import delivery_headers
from nexus.errors import UnsafeUrlError
from nexus.settings import Settings

SLOTS_PER_CLIENT = 4


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    """How one claimed attempt ended."""

    claimed: Claimed
    outcome: AttemptOutcome
    status: int | None = None
    error: str | None = None
    retry_after_ms: float | None = None
    # issue 16 (obs): the attempt's record (delivery_attempts): when it was sent, how long it took, and
    # when the subscriber gave no status, what went wrong instead
    sent_at: float | None = None
    duration_ms: float | None = None
    error_class: str | None = None


class Sender:
    """Posts claimed deliveries with signed headers over a few keep-alive clients (one per slot group)."""

    def __init__(self, workers: int, request_timeout_s: float, owner: str, settings: Settings) -> None:
        self.request_timeout_s = request_timeout_s
        self._clients = [
            httpx.AsyncClient(
                timeout=httpx.Timeout(request_timeout_s),
                limits=httpx.Limits(max_connections=SLOTS_PER_CLIENT, max_keepalive_connections=SLOTS_PER_CLIENT),
                headers={"user-agent": f"nexus-dispatcher ({owner})"},
                follow_redirects=False,
                # issue 11: the address actually connected to is checked (no webhook aimed inside)
                transport=guarded_transport(settings, limits=SLOTS_PER_CLIENT),
            )
            for _ in range(0, workers, SLOTS_PER_CLIENT)
        ]

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()

    async def send(self, c: Claimed, slot: int) -> Result:
        """Send `c` from worker slot `slot`; network failures are a RETRYABLE result, never an exception."""
        if not tracing.active():
            return await self._send(c, slot, None)
        attributes = {
            "nexus.order_id": c.order_id,
            "nexus.outbox_id": str(c.outbox_id),
            "nexus.event_type": c.event_type,
            "nexus.delivery.attempt": c.attempt,
            "nexus.outbox.position": c.position,
        }
        with tracing.delivery_span(c.traceparent, attributes) as span:
            result = await self._send(c, slot, tracing.traceparent_of(span))
            span.set_attribute("nexus.delivery.outcome", result.outcome.value)
            if result.status is not None:
                span.set_attribute("http.response.status_code", result.status)
            if result.error is not None:
                span.set_attribute("error.type", result.error[:200])
            return result

    async def _send(self, c: Claimed, slot: int, traceparent: str | None) -> Result:
        client = self._clients[slot // SLOTS_PER_CLIENT]
        try:
            request = build_request(client, c, int(time.time()))
        except UnsendableRequest as exc:
            return Result(c, AttemptOutcome.UNSENDABLE, error=str(exc), error_class="UnsendableRequest")
        if traceparent is not None:  # issue 16: the attempt's own span, in the agent's trace
            request.headers["traceparent"] = traceparent
        sent_at, started = time.time(), time.perf_counter()
        try:
            response = await client.send(request)
        except httpx.TimeoutException as exc:
            reason = f"timeout after {self.request_timeout_s:g}s"
            return Result(c, AttemptOutcome.RETRYABLE, None, reason, None, sent_at, _ms(started), type(exc).__name__)
        except UnsafeUrlError as exc:  # issue 11: aimed inside; never sent, never retried, not the subscriber's fault
            reason = str(exc)[:500]
            return Result(c, AttemptOutcome.UNSENDABLE, None, reason, None, sent_at, None, type(exc).__name__)
        except httpx.HTTPError as exc:
            reason = f"{type(exc).__name__}: {exc}"[:500]
            return Result(c, AttemptOutcome.RETRYABLE, None, reason, None, sent_at, _ms(started), type(exc).__name__)
        finally:
            metrics.WEBHOOK_REQUEST_SECONDS.observe(time.perf_counter() - started)
        outcome = outcome_of_status(response.status_code)
        retry_after = None
        if outcome is AttemptOutcome.RETRYABLE:
            retry_after = parse_retry_after(response.headers.get("retry-after"), dt.datetime.now(dt.UTC))
        error = None if outcome is AttemptOutcome.DELIVERED else f"HTTP {response.status_code}"
        return Result(c, outcome, response.status_code, error, retry_after, sent_at, _ms(started))


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


class UnsendableRequest(ValueError):
    """A webhook request that cannot be built (a header value HTTP cannot carry, an unusable URL)."""


# RFC 9110 field-value: visible ASCII, spaces and tabs between them; nothing else goes on the wire.
_FIELD_VALUE = re.compile(r"^[\x21-\x7e]([\x20-\x7e\t]*[\x21-\x7e])?$|^$")


def build_request(client: httpx.AsyncClient, c: Claimed, timestamp: int) -> httpx.Request:
    """The signed webhook request of a claimed delivery; `UnsendableRequest` if HTTP cannot carry it.

    A permanent property of the notification (e.g. an order id with a newline, stored before
    identifiers were restricted): retrying cannot help, and the subscriber is not to blame.
    """
    headers = delivery_headers(
        key=c.key,
        outbox_id=str(c.outbox_id),
        order_id=c.order_id,
        event_type=c.event_type,
        position=c.position,
        attempt=c.attempt,
        timestamp=timestamp,
        body=c.body,
        traceparent=c.traceparent,
    )
    headers["content-type"] = c.content_type
    for name, value in headers.items():
        if not _FIELD_VALUE.match(value):
            raise UnsendableRequest(f"header {name} cannot carry its value")
    try:
        return client.build_request("POST", c.url, content=c.body, headers=headers)
    except (httpx.InvalidURL, httpx.UnsupportedProtocol, UnicodeError, ValueError) as exc:
        raise UnsendableRequest(f"request cannot be built: {type(exc).__name__}") from exc
