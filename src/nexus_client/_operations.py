"""The client's operations without their I/O, written once for the blocking and the async client.

An operation is a generator: it yields each `Call` it needs made and each `Pause` it needs slept, is sent
each call's `Reply` (a pause's is None), and returns its result or raises the typed error. `NexusClient`
and `AsyncNexusClient` each drive it (`advance`) with their own I/O, so the retries of a submit, the
resends of a plan request and `wait`'s long poll are the same code in both: what is left in
`http.py` is only what Python cannot write once for both colours of function (a send and a sleep).
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from nexus_client import _protocol as proto
from nexus_client.errors import ClientError, NotFound
from nexus_client.models import ApprovalAnswer, Order, SubmitResult
from nexus_wire.backoff import RetryPolicy

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

Reply = tuple[int, bytes] | ClientError
"""What a call came back with: (status, body), or the error that stands for no answer at all."""


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
    """One HTTP request to make; its read timeout is the client's plus the long poll's `wait`."""

    method: str
    path: str
    content: bytes | None = None
    json: dict[str, Any] | None = None
    headers: Mapping[str, str] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Pause:
    """Seconds to sleep before the operation goes on."""

    seconds: float


@dataclasses.dataclass(frozen=True, slots=True)
class Done(Generic[T]):
    """The operation's result."""

    value: T


Operation = Generator[Call | Pause, Reply | None, T]


def advance(operation: Operation[T], reply: Reply | None) -> Call | Pause | Done[T]:
    """Send the last call's reply (None to start, or after a pause) and get what the operation needs next."""
    try:
        return operation.send(reply)
    except StopIteration as stop:
        return Done(stop.value)


def answered(reply: Reply | None) -> tuple[int, bytes]:
    """The call's (status, body), or its error raised."""
    if isinstance(reply, ClientError):
        raise reply
    assert reply is not None, "a call is answered by a reply"
    return reply


def _resent(
    call: Call, read: Callable[[int, bytes, int], T], policy: RetryPolicy, rand: Callable[[], float]
) -> Operation[T]:
    """`call`, made again after a 503 or no answer on the `policy` schedule; `read(status, body, attempt)`
    gives the result or raises the typed error (which decides whether to try again)."""
    attempt = 1
    while True:
        reply = yield call
        try:
            return read(*answered(reply), attempt)
        except ClientError as exc:
            error = exc
        delay = proto.retry_delay_s(policy, attempt, error, rand())
        if delay is None:
            raise error
        yield Pause(delay)
        attempt += 1


def submit(
    content: bytes, headers: Mapping[str, str] | None, policy: RetryPolicy, rand: Callable[[], float] = random.random
) -> Operation[SubmitResult]:
    """POST /v1/events with a body as it is; resent on 503 and when the gateway does not answer."""
    sent = {**proto.JSON_HEADERS, **headers} if headers else proto.JSON_HEADERS
    return _resent(Call("POST", "/v1/events", content=content, headers=sent), proto.submit_result, policy, rand)


def _unless_unavailable(status: int, content: bytes, attempt: int) -> tuple[int, bytes]:
    if status in proto.UNAVAILABLE_STATUSES:
        raise proto.api_error(status, content)
    return status, content


def post(
    path: str, body: dict[str, Any], policy: RetryPolicy, rand: Callable[[], float] = random.random
) -> Operation[tuple[int, bytes]]:
    """POST JSON; resent on 503 and when the gateway does not answer (the plan helper's bodies carry
    idempotency keys); any other answer as it is."""
    return _resent(Call("POST", path, json=body), _unless_unavailable, policy, rand)


def get(path: str) -> Operation[tuple[int, bytes]]:
    """GET once: the answer as it is."""
    return answered((yield Call("GET", path)))


def read(model: type[M], path: str) -> Operation[M]:
    """GET once, read as `model` (an error answer raised as the typed error)."""
    return proto.read_model(model, *answered((yield Call("GET", path))))


def answer_approval(
    approval_id: str, *, approve: bool, expect: Mapping[str, Any] | None = None
) -> Operation[ApprovalAnswer]:
    """POST /v1/approvals/{approval_id}/approve (or /deny), once; `expect`: the step meant (any of event_id,
    data_sha256, process_version, seq_id; another step's is 409 APPROVAL_MISMATCH and nothing decided)."""
    body = {"expect": dict(expect)} if expect else None
    reply = yield Call("POST", proto.approval_path(approval_id, approve=approve), json=body)
    return proto.read_model(ApprovalAnswer, *answered(reply))


def wait(
    order_id: str,
    change: proto.Change,
    timeout: float,
    poll_policy: RetryPolicy,
    clock: Callable[[], float] = time.monotonic,
) -> Operation[Order]:
    """The order once it changed (`proto.LongPoll`); `WaitTimeout` when it did not within `timeout`."""
    poll = proto.LongPoll(order_id, change, timeout, now=clock(), poll=poll_policy)
    while True:
        asked = clock()
        reply = yield Call("GET", poll.path())
        try:
            current: Order | None = proto.read_model(Order, *answered(reply))
        except NotFound:
            current = None
        step = poll.answer(current, asked, clock())
        if isinstance(step, Order):
            return step
        if step > 0:
            yield Pause(step)
