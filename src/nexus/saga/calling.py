"""Calling the services: the one HTTP client of a process's saga executor, and a circuit breaker per service.

`ServiceCaller.call_service` is the one place a service is called (forward calls and compensations alike):
the call's derived `Idempotency-Key`, a `traceparent`, `Compensates` for a compensation; its answer is read
as a `CallResult` (`core.saga.outcome_of_status`; `Retry-After` kept for the retry rules). The breakers
(`core.breaker`) hold calls to a service that keeps failing, uncounted, until its cooldown ends.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import ssl
from typing import Any, NamedTuple

from yarl import URL

from nexus import tracing
from nexus.core.breaker import Breaker, BreakerConfig, BreakerState
from nexus.core.saga import CallOutcome, outcome_of_status
from nexus.errors import UnsafeUrlError
from nexus.outbound.http1 import ConnectFailedError, ConnectTimeoutError, Http1Client
from nexus.outbound.policy import OutboundPolicy
from nexus.settings import Settings
from nexus_wire.backoff import parse_retry_after
from nexus_wire.trace import new_traceparent

log = logging.getLogger("nexus.saga.executor")

# A service's answer is kept (and stored with the step) up to this size; a longer one is cut, and read as text.
_ANSWER_MAX_BYTES = 256 * 1024


class CallResult(NamedTuple):
    """How one call to a service ended: its outcome, the answer's JSON, the error, the `Retry-After` (ms)."""

    outcome: CallOutcome
    result: Any
    error: str | None
    retry_after_ms: float | None = None


class ServiceCaller:
    """The services' HTTP client and breakers of one executor process."""

    def __init__(self, settings: Settings, owner: str) -> None:
        self.settings = settings
        self.breaker_config = BreakerConfig(
            threshold=settings.saga_breaker_threshold,
            cooldown_s=settings.saga_breaker_cooldown_s,
            probe_ttl_s=max(settings.saga_call_timeout_s * 2, 1.0),
        )
        self.breakers: dict[str, Breaker] = {}
        # The outbound policy's client: the configured service URLs are trusted targets, anything else is
        # guarded as a webhook is; no redirects; one deadline per call (`saga_call_timeout_s`).
        self.client = Http1Client(
            OutboundPolicy.for_services(settings), f"nexus-saga ({owner})", body_limit=_ANSWER_MAX_BYTES
        )

    async def aclose(self) -> None:
        await self.client.aclose()

    async def call_service(
        self, url: str, body: dict[str, Any], key: str, traceparent: str | None, compensates: str | None
    ) -> CallResult:
        """The one place a service is called (forward calls and compensations alike)."""
        # Each effect and compensation call under its span, the request carrying its traceparent
        return await tracing.traced_effect(
            lambda sent: self._post(url, body, key, sent, compensates), url, traceparent, compensates is not None
        )

    async def _post(
        self, url: str, body: dict[str, Any], key: str, traceparent: str | None, compensates: str | None
    ) -> CallResult:
        headers = {
            "content-type": "application/json",
            "accept": "application/json",
            "Idempotency-Key": key,
            "traceparent": traceparent or new_traceparent(),
        }
        if compensates is not None:
            headers["Compensates"] = compensates
        try:
            target = URL(url)
            payload = json.dumps(body, separators=(",", ":")).encode()
        except (ValueError, TypeError) as exc:
            return CallResult(CallOutcome.REFUSED, None, f"request cannot be built: {exc}")
        if target.scheme not in ("http", "https") or not target.host:
            return CallResult(CallOutcome.REFUSED, None, "request cannot be built: not an http(s) URL")
        try:
            if tracing.active():  # the request's own CLIENT span (as a webhook's), the service's parent
                with tracing.http_request_span("POST", url) as request:
                    headers["traceparent"] = tracing.traceparent_of(request) or headers["traceparent"]
                    answer = await self.client.post(target, headers, payload)
                    request.set_attribute("http.response.status_code", answer.status)
            else:
                answer = await self.client.post(target, headers, payload)
        except UnsafeUrlError as exc:  # aimed inside, and not a configured service: never sent
            return CallResult(CallOutcome.REFUSED, None, str(exc)[:500])
        except (ConnectFailedError, ssl.SSLError) as exc:  # nothing reached the service
            return CallResult(CallOutcome.RETRYABLE, None, f"connection failed: {exc}")
        except ConnectTimeoutError as exc:
            return CallResult(CallOutcome.RETRYABLE, None, f"connect timeout: {exc}")
        except (TimeoutError, OSError) as exc:  # sent: the service may have acted
            return CallResult(CallOutcome.UNKNOWN, None, f"{type(exc).__name__}: outcome unknown")
        try:
            result: Any = json.loads(answer.body)
        except ValueError:
            result = {"text": answer.body[:500].decode("utf-8", "replace")}
        outcome = outcome_of_status(answer.status)
        error = None if outcome is CallOutcome.SUCCEEDED else f"HTTP {answer.status}: {str(result)[:300]}"
        retry_after = parse_retry_after(answer.retry_after, dt.datetime.now(dt.UTC)) if error else None
        return CallResult(outcome, result, error, retry_after)

    def admitted(self, service: str, owner: str) -> bool:
        """Whether a call to `service` may be made now (its breaker closed, or this call is the probe)."""
        breaker = self.breakers.get(service, Breaker())
        if breaker.admits_all():
            return True
        probe = breaker.take_probe(dt.datetime.now(dt.UTC), owner, self.breaker_config)
        if probe is None:
            return False
        self.breakers[service] = probe
        return True

    def closed_for(self, service: str) -> float | None:
        """None if the service's breaker lets a call through now; else the seconds until it might."""
        breaker = self.breakers.get(service)
        now = dt.datetime.now(dt.UTC)
        if breaker is None or breaker.admits_all() or breaker.probe_available(now):
            return None
        if breaker.open_until is not None and breaker.open_until > now:
            return (breaker.open_until - now).total_seconds()
        return self.settings.saga_call_timeout_s  # another call is the probe: it ends within its timeout

    def record(self, service: str, owner: str, outcome: CallOutcome) -> None:
        """The call's outcome as its service's breaker counts it (a refusal is an answer, not a failure)."""
        breaker = self.breakers.get(service, Breaker())
        success = outcome in (CallOutcome.SUCCEEDED, CallOutcome.REFUSED)
        after = breaker.record(success, dt.datetime.now(dt.UTC), self.breaker_config, probe_owner=owner)
        self.breakers[service] = after
        if after.state is not breaker.state and after.state in (BreakerState.OPEN, BreakerState.CLOSED):
            verb = "opened" if after.state is BreakerState.OPEN else "closed again"
            log.warning("saga breaker %s for %s", verb, service,
                        extra={"action": "saga_breaker", "service": service, "state": after.state.value})  # fmt: skip
