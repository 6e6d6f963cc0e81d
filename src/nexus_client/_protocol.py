"""What the sync and async clients share: encoding requests, reading answers, deciding to retry and
whether an order changed. Pure (no I/O), so both clients behave the same (as httpx's `_auth.py`)."""

from __future__ import annotations

import dataclasses
import json
import random
import urllib.parse
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from nexus_client.errors import ApiError, ClientError, GatewayUnreachable, NotFound, Unavailable, WaitTimeout
from nexus_client.models import Order, SubmitResult
from nexus_wire.backoff import RetryPolicy, decide, jittered_ms
from nexus_wire.envelope import EventEnvelope

M = TypeVar("M", bound=BaseModel)

JSON_HEADERS = {"content-type": "application/json"}


def envelope_json(envelope: EventEnvelope) -> bytes:
    """One envelope as sent: `tenant_id` only when the caller set it, so the gateway takes the key's tenant
    (an envelope naming another tenant than its key's is refused)."""
    exclude = None if "tenant_id" in envelope.model_fields_set else {"tenant_id"}
    return envelope.model_dump_json(exclude=exclude).encode()


def encode_steps(steps: EventEnvelope | Sequence[EventEnvelope]) -> bytes:
    """One envelope as itself, several as `{"events": [...]}`."""
    if isinstance(steps, EventEnvelope):
        return envelope_json(steps)
    return b'{"events": [' + b", ".join(envelope_json(s) for s in steps) + b"]}"


def _json(content: bytes) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return None


UNAVAILABLE_STATUSES = frozenset({502, 503, 504})
"""Answers meaning no instance served the request now, resent on the retry policy: the gateway's 503, and a
load balancer's 502 and 504 (the instance it chose died or timed out mid-request). Safe: a step that was
decided before its answer was lost is answered DUPLICATE with its first verdict."""


def api_error(status: int, content: bytes) -> ApiError:
    """The typed error of a non-2xx answer, carrying its {code, message} body."""
    body = _json(content)
    fields = body if isinstance(body, dict) else {}
    code = str(fields.get("code") or f"HTTP_{status}")
    message = str(fields.get("message") or content[:200].decode("utf-8", "replace"))
    request_id = fields.get("request_id")
    kind = NotFound if status == 404 else Unavailable if status in UNAVAILABLE_STATUSES else ApiError
    return kind(status, code, message, body, str(request_id) if request_id is not None else None)


def submit_result(status: int, content: bytes, attempt: int) -> SubmitResult:
    """The gateway's decisions, or the typed error. A 4xx with `results` is a decision (dead letter)."""
    body = _json(content)
    results = body.get("results") if isinstance(body, dict) else None
    if status < 500 and (status < 400 or results):
        try:
            return SubmitResult.model_validate({"results": results or [], "http_status": status, "attempts": attempt})
        except ValidationError as exc:
            raise ApiError(status, "UNREADABLE_ANSWER", str(exc), body) from exc
    raise api_error(status, content)


def read_model(model: type[M], status: int, content: bytes) -> M:
    if status >= 400:
        raise api_error(status, content)
    try:
        return model.model_validate_json(content)
    except ValidationError as exc:
        raise ApiError(status, "UNREADABLE_ANSWER", str(exc), _json(content)) from exc


def retry_delay_s(policy: RetryPolicy, attempt: int, error: ClientError, rand: float) -> float | None:
    """Seconds to wait before resending after failed attempt `attempt`, or None to give up. Only a 503 and
    an unreachable gateway are worth another attempt."""
    if not isinstance(error, Unavailable | GatewayUnreachable):
        return None
    decision = decide(policy, attempt, rand)
    return decision.delay_ms / 1000.0 if decision.retry else None


@dataclasses.dataclass(frozen=True, slots=True)
class Change:
    """What `wait` waits for: the order past `after_seq`, or out of `after_status`. With neither, any
    change from the first reading."""

    after_seq: int | None = None
    after_status: str | None = None

    def seen_in(self, order: Order | None, baseline: Order | None) -> bool:
        if order is None:
            return False
        if self.after_seq is None and self.after_status is None:
            if baseline is None:
                return False
            return (order.last_seq, order.status, order.buffered) != (
                baseline.last_seq,
                baseline.status,
                baseline.buffered,
            )
        if self.after_seq is not None and order.last_seq > self.after_seq:
            return True
        return self.after_status is not None and order.status != self.after_status


MAX_WAIT_S = 50.0
"""Longest single long poll the client asks for (the gateway clips at NEXUS_WAIT_MAX_S, 60 s by default)."""


def long_poll_path(order_id: str, wait_s: float, change: Change, baseline: Order | None) -> str:
    """GET /v1/orders/{id}, as a long poll of `wait_s` seconds when > 0. With no criterion, the order's
    baseline reading is the criterion (its last_seq and status)."""
    if wait_s <= 0:
        return f"/v1/orders/{order_id}"
    after_seq, after_status = change.after_seq, change.after_status
    if after_seq is None and after_status is None and baseline is not None:
        after_seq, after_status = baseline.last_seq, baseline.status
    params: dict[str, str] = {"wait": f"{wait_s:.3f}"}
    if after_seq is not None:
        params["after_seq"] = str(after_seq)
    if after_status is not None:
        params["after_status"] = after_status
    return f"/v1/orders/{order_id}?{urllib.parse.urlencode(params)}"


class LongPoll:
    """`wait`'s loop without its I/O, shared by the async and the blocking client: `path()` is the next GET
    to make; `answer(order, asked, now)` takes what it returned (None: 404), when it was asked and now, and
    gives the order once it changed, or the seconds to sleep before the next `path()` (0: none). Raises
    `WaitTimeout` once `timeout` has passed unchanged."""

    def __init__(
        self,
        order_id: str,
        change: Change,
        timeout: float,
        *,
        now: float,
        poll: RetryPolicy,
        rng: random.Random | None = None,
    ) -> None:
        self.order_id = order_id
        self.change = change
        self.timeout = timeout
        self.deadline = now + timeout
        self.poll = poll
        self.rng = rng or random.Random()
        self.baseline: Order | None = None
        self.attempt = 1
        self.wait_s = 0.0  # the first reading answers at once: it is the baseline

    def path(self) -> str:
        return long_poll_path(self.order_id, self.wait_s, self.change, self.baseline)

    def answer(self, current: Order | None, asked: float, now: float) -> Order | float:
        if self.change.seen_in(current, self.baseline):
            assert current is not None
            return current
        self.baseline = self.baseline or current
        left = self.deadline - now
        if left <= 0:
            raise WaitTimeout(f"order {self.order_id} did not change within {self.timeout}s")
        sleep_s = 0.0
        if now - asked < self.wait_s / 2:  # answered early, unchanged: no long poll there
            sleep_s = min(left, jittered_ms(self.poll, self.attempt, self.rng.random()) / 1000.0)
            self.attempt += 1
        self.wait_s = min(left, MAX_WAIT_S)
        return sleep_s


def wait_of(path: str) -> float:
    """The `wait` a request path asks the gateway for (0 when none): added to the read timeout."""
    query = urllib.parse.urlsplit(path).query
    values = urllib.parse.parse_qs(query).get("wait")
    return float(values[0]) if values else 0.0


def approval_path(approval_id: str, *, approve: bool) -> str:
    """Where an approver answers one held step."""
    return f"/v1/approvals/{approval_id}/{'approve' if approve else 'deny'}"
