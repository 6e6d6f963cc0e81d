"""Sending: one signed webhook request per claimed delivery, and how the subscriber answered it.

The client is `outbound/http1.py`: httpx's request model was most of a dispatcher's samples,
then aiohttp's per-request machinery was still ~30 % of them (benchmarks/RESULTS.md); the webhook needs a
POST and a status. One keep-alive connection pool per subscriber (scheme, host, port), at most as many
connections as requests in flight (the worker slots). The outbound policy (`nexus.outbound.policy`) checks
every name's addresses before connecting and every address literal once per URL. The
request timeout is kept below half the lease so a slow answer cannot outlive the lease it was sent under.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import time

from yarl import URL

from nexus import metrics, tracing
from nexus.core.delivery import AttemptOutcome, outcome_of_status
from nexus.delivery.claims import Claimed
from nexus.delivery.signing import delivery_headers
from nexus.errors import UnsafeUrlError
from nexus.outbound.http1 import Http1Client
from nexus.outbound.policy import OutboundPolicy
from nexus.settings import Settings
from nexus_wire.backoff import parse_retry_after


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    """How one claimed attempt ended: the subscriber's HTTP status (None: it gave none), then by name why it
    failed, when to retry, and the attempt's record."""

    claimed: Claimed
    outcome: AttemptOutcome
    status: int | None = None
    _: dataclasses.KW_ONLY
    error: str | None = None
    retry_after_ms: float | None = None
    # The attempt's record (delivery_attempts): when it was sent, how long it took, and
    # when the subscriber gave no status, what went wrong instead
    sent_at: float | None = None
    duration_ms: float | None = None
    error_class: str | None = None


class Sender:
    """Posts claimed deliveries with signed headers over keep-alive pools, one per subscriber."""

    def __init__(self, workers: int, request_timeout_s: float, owner: str, settings: Settings) -> None:
        self.request_timeout_s = request_timeout_s
        self._guard = OutboundPolicy.for_webhooks(settings, request_timeout_s)
        self._user_agent = f"nexus-dispatcher ({owner})"
        self._workers = workers
        self._http: Http1Client | None = None
        self._urls: dict[str, URL] = {}

    def _client(self) -> Http1Client:
        if self._http is None:  # made in the running loop, on first use
            self._http = Http1Client(self._guard, self._user_agent)
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def send(self, c: Claimed, slot: int) -> Result:
        """Send `c` (`slot`: the worker slot, kept for the dispatcher's bookkeeping); network failures are a
        RETRYABLE result, never an exception."""
        if not tracing.active():
            return await self._send(c, None)
        attributes = {
            "nexus.order_id": c.order_id,
            "nexus.outbox_id": str(c.outbox_id),
            "nexus.event_type": c.event_type,
            "nexus.delivery.attempt": c.attempt,
            "nexus.outbox.position": c.position,
        }
        with tracing.delivery_span(c.traceparent, attributes) as span:
            # The receiver's parent: the request's own CLIENT span, child of the attempt's.
            with tracing.http_request_span("POST", c.url) as request:
                result = await self._send(c, tracing.traceparent_of(request))
                if result.status is not None:
                    request.set_attribute("http.response.status_code", result.status)
            span.set_attribute("nexus.delivery.outcome", result.outcome.value)
            if result.status is not None:
                span.set_attribute("http.response.status_code", result.status)
            if result.error is not None:
                span.set_attribute("error.type", result.error[:200])
            return result

    def _url(self, raw: str) -> URL:
        """The parsed URL, once it passed the checks that depend on it alone (kept: they cannot change)."""
        url = self._urls.get(raw)
        if url is None:
            try:
                url = URL(raw)
            except (ValueError, TypeError) as exc:
                raise UnsendableRequest(f"request cannot be built: {type(exc).__name__}") from exc
            if url.scheme not in ("http", "https") or not url.host:
                raise UnsendableRequest("request cannot be built: UnsupportedProtocol")
            self._guard.check_literal(url.raw_host or "", url.port or 0)
            if len(self._urls) > 10_000:
                self._urls.clear()
            self._urls[raw] = url
        return url

    async def _send(self, c: Claimed, traceparent: str | None) -> Result:
        try:
            url = self._url(c.url)
            headers = signed_headers(c, int(time.time()))
        except UnsendableRequest as exc:
            return Result(c, AttemptOutcome.UNSENDABLE, error=str(exc), error_class="UnsendableRequest")
        except UnsafeUrlError as exc:  # Aimed inside; never sent, never retried, not the subscriber's fault
            return Result(c, AttemptOutcome.UNSENDABLE, error=str(exc)[:500], error_class=type(exc).__name__)
        if traceparent is not None:  # The attempt's own span, in the agent's trace
            headers["traceparent"] = traceparent
        sent_at, started = time.time(), time.perf_counter()
        try:
            answer = await self._client().post(url, headers, c.body)
            status, retry_after_header = answer.status, answer.retry_after
        except TimeoutError as exc:
            reason = f"timeout after {self.request_timeout_s:g}s"
            return _unanswered(c, AttemptOutcome.RETRYABLE, reason, exc, sent_at, _ms(started))
        except UnsafeUrlError as exc:
            reason = str(exc)[:500]
            return _unanswered(c, AttemptOutcome.UNSENDABLE, reason, exc, sent_at, None)
        except (UnicodeError, ValueError) as exc:  # a URL or header HTTP/1.1 cannot carry
            reason = f"request cannot be built: {type(exc).__name__}"
            return _unanswered(c, AttemptOutcome.UNSENDABLE, reason, exc, sent_at, None)
        except OSError as exc:
            reason = f"{type(exc).__name__}: {exc}"[:500]
            return _unanswered(c, AttemptOutcome.RETRYABLE, reason, exc, sent_at, _ms(started))
        finally:
            metrics.WEBHOOK_REQUEST_SECONDS.observe(time.perf_counter() - started)
        outcome = outcome_of_status(status)
        retry_after = None
        if outcome is AttemptOutcome.RETRYABLE:
            retry_after = parse_retry_after(retry_after_header, dt.datetime.now(dt.UTC))
        error = None if outcome is AttemptOutcome.DELIVERED else f"HTTP {status}"
        return Result(
            c, outcome, status, error=error, retry_after_ms=retry_after, sent_at=sent_at, duration_ms=_ms(started)
        )


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def _unanswered(
    c: Claimed, outcome: AttemptOutcome, reason: str, exc: Exception, sent_at: float, duration_ms: float | None
) -> Result:
    """An attempt the subscriber gave no status to: why, and the exception's class for the attempt's record."""
    return Result(c, outcome, error=reason, sent_at=sent_at, duration_ms=duration_ms, error_class=type(exc).__name__)


class UnsendableRequest(ValueError):
    """A webhook request that cannot be built (a header value HTTP cannot carry, an unusable URL)."""


# RFC 9110 field-value: visible ASCII, spaces and tabs between them; nothing else goes on the wire.
_FIELD_VALUE = re.compile(r"^[\x21-\x7e]([\x20-\x7e\t]*[\x21-\x7e])?$|^$")
_STORED_VALUES = ("x-aggregate-id", "x-event-type", "traceparent", "content-type")


def signed_headers(c: Claimed, timestamp: int) -> dict[str, str]:
    """The signed headers of a claimed delivery's request; `UnsendableRequest` if HTTP cannot carry them.

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
    # Only these come from stored data; the others are digits, a UUID, base64 or our own constants.
    for name in _STORED_VALUES:
        if not _FIELD_VALUE.match(headers[name]):
            raise UnsendableRequest(f"header {name} cannot carry its value")
    return headers
