"""Typed HTTP clients of the public API, sync (`NexusClient`) and async (`AsyncNexusClient`), same methods.

    with NexusClient(ClientConfig.from_env()) as client:
        client.submit(envelope)                      # one step -> SubmitResult
        client.submit([step1, step2])                # a batch, one transaction per order
        client.order("o-1"); client.plan("p-1")
        client.wait("o-1", after_seq=2, timeout=30)  # the order once its last_seq passed 2
        run = client.start_plan("order")             # the gateway numbers the steps (nexus_client.plans)

`wait` is the gateway's long poll (`GET /v1/orders/{id}?wait=S&after_seq=N|after_status=X`), asked again
until its own timeout; an answer that comes back early and unchanged (a gateway without the long poll) is
followed by a pause on the config's bounded `poll` schedule, so it never polls hot.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

import httpx

from nexus_client import _protocol as proto
from nexus_client import _tracing
from nexus_client.config import ClientConfig
from nexus_client.errors import ClientError, GatewayUnreachable, NotFound
from nexus_client.models import Approval, ApprovalAnswer, Approvals, Order, Plan, Process, SubmitResult
from nexus_client.plans import AsyncPlanRun, PlanRun, plan_info, start_body
from nexus_wire.envelope import EventEnvelope

Steps = EventEnvelope | Sequence[EventEnvelope]


def _limits(config: ClientConfig) -> httpx.Limits:
    return httpx.Limits(max_connections=config.max_connections, max_keepalive_connections=config.max_connections)


def _as_list(steps: Steps) -> Sequence[EventEnvelope]:
    return [steps] if isinstance(steps, EventEnvelope) else steps


def _unreachable(exc: httpx.TransportError) -> GatewayUnreachable:
    return GatewayUnreachable(f"{type(exc).__name__}: {exc}")


# The blocking NexusClient below repeats this class's methods line for line but for `await`: what they share
# (bodies, answers, the retry schedule) is in `_protocol.py`, and what is left is the I/O, which Python
# cannot write once for both colours of function (httpx keeps two clients for the same reason).
class AsyncNexusClient:
    """The public API over one pooled `httpx.AsyncClient`."""

    def __init__(
        self, config: ClientConfig | None = None, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.config = config or ClientConfig.from_env()
        self._http = httpx.AsyncClient(
            timeout=self.config.timeout_s,
            limits=_limits(self.config),
            headers=self.config.headers(),
            transport=transport,
        )

    async def submit(self, steps: Steps) -> SubmitResult:
        """POST /v1/events with one envelope or a batch; resent on 503 and transport errors."""
        with _tracing.publish(_as_list(steps), "http") as trace_headers:  # The agent's publish span
            return await self.submit_raw(proto.encode_steps(steps), headers=trace_headers)

    async def submit_raw(self, body: bytes | str, *, headers: dict[str, str] | None = None) -> SubmitResult:
        """POST a body as it is (the lab sends malformed ones on purpose); same answers and retries."""
        content = body.encode() if isinstance(body, str) else body
        sent = {**proto.JSON_HEADERS, **headers} if headers else proto.JSON_HEADERS
        attempt = 1
        while True:
            try:
                response = await self._http.post(self.config.url("/v1/events"), content=content, headers=sent)
                return proto.submit_result(response.status_code, response.content, attempt)
            except httpx.TransportError as exc:
                error: ClientError = _unreachable(exc)
            except ClientError as exc:
                error = exc
            delay = proto.retry_delay_s(self.config.retry, attempt, error, random.random())
            if delay is None:
                raise error
            await asyncio.sleep(delay)
            attempt += 1

    async def start_plan(
        self, process: str = "order", order_id: str | None = None, deadline_s: float | None = None
    ) -> AsyncPlanRun:
        """POST /v1/plans: a new order whose steps the gateway numbers (`AsyncPlanRun.step`)."""
        return AsyncPlanRun(self, plan_info(*await self._post("/v1/plans", start_body(process, order_id, deadline_s))))

    async def resume_plan(self, order_id: str) -> AsyncPlanRun:
        """The plan of an order started before (an agent that restarted); `NotFound` if there is none."""
        return AsyncPlanRun(self, plan_info(*await self._get(f"/v1/orders/{order_id}/plan")))

    async def _post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        """POST JSON; resent on 503 and transport errors (the plan helper's bodies carry idempotency keys)."""
        attempt = 1
        while True:
            try:
                response = await self._http.post(self.config.url(path), json=body)
                if response.status_code != 503:
                    return response.status_code, response.content
                error: ClientError = proto.api_error(response.status_code, response.content)
            except httpx.TransportError as exc:
                error = _unreachable(exc)
            delay = proto.retry_delay_s(self.config.retry, attempt, error, random.random())
            if delay is None:
                raise error
            await asyncio.sleep(delay)
            attempt += 1

    async def order(self, order_id: str) -> Order:
        """GET /v1/orders/{order_id}; `NotFound` when the gateway knows no such order."""
        return proto.read_model(Order, *await self._get(f"/v1/orders/{order_id}"))

    async def plan(self, plan_id: str) -> Plan:
        """GET /v1/plans/{plan_id}; `NotFound` when no order follows that plan."""
        return proto.read_model(Plan, *await self._get(f"/v1/plans/{plan_id}"))

    async def process(self, name: str, version: int | None = None) -> Process:
        """GET /v1/processes/{name} (the latest version, or `version`); `NotFound` for an unknown process."""
        query = f"?version={version}" if version is not None else ""
        return proto.read_model(Process, *await self._get(f"/v1/processes/{name}{query}"))

    async def approvals(self, limit: int = 100) -> list[Approval]:
        """GET /v1/approvals, the pending approvals of the key's tenant (approver or operator keys)."""
        return proto.read_model(Approvals, *await self._get(f"/v1/approvals?limit={limit}")).approvals

    async def answer_approval(self, approval_id: str, *, approve: bool) -> ApprovalAnswer:
        """POST /v1/approvals/{approval_id}/approve (or /deny) with an approver key."""
        url = self.config.url(proto.approval_path(approval_id, approve=approve))
        try:
            response = await self._http.post(url)
        except httpx.TransportError as exc:
            raise _unreachable(exc) from exc
        return proto.read_model(ApprovalAnswer, response.status_code, response.content)

    async def wait(  # same signature as the sync client and the long poll (`wait=S`): no asyncio.timeout
        self,
        order_id: str,
        *,
        after_seq: int | None = None,
        after_status: str | None = None,
        timeout: float = 30.0,  # noqa: ASYNC109
    ) -> Order:
        """The order once it changed (past `after_seq`, out of `after_status`, or else from its first reading);
        `WaitTimeout` when it did not within `timeout` seconds."""
        change = proto.Change(after_seq, after_status)
        poll = proto.LongPoll(order_id, change, timeout, now=time.monotonic(), poll=self.config.poll)
        while True:
            asked = time.monotonic()
            try:
                current: Order | None = proto.read_model(Order, *await self._get(poll.path()))
            except NotFound:
                current = None
            step = poll.answer(current, asked, time.monotonic())
            if isinstance(step, Order):
                return step
            if step > 0:
                await asyncio.sleep(step)

    async def _get(self, path: str) -> tuple[int, bytes]:
        try:
            response = await self._http.get(self.config.url(path), timeout=self.config.timeout_s + proto.wait_of(path))
        except httpx.TransportError as exc:
            raise _unreachable(exc) from exc
        return response.status_code, response.content

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


# The blocking twin of AsyncNexusClient (same methods, without `await`; see the comment there).
class NexusClient:
    """The public API over one pooled `httpx.Client` (blocking)."""

    def __init__(self, config: ClientConfig | None = None, *, transport: httpx.BaseTransport | None = None) -> None:
        self.config = config or ClientConfig.from_env()
        self._http = httpx.Client(
            timeout=self.config.timeout_s,
            limits=_limits(self.config),
            headers=self.config.headers(),
            transport=transport,
        )

    def submit(self, steps: Steps) -> SubmitResult:
        """POST /v1/events with one envelope or a batch; resent on 503 and transport errors."""
        with _tracing.publish(_as_list(steps), "http") as trace_headers:  # The agent's publish span
            return self.submit_raw(proto.encode_steps(steps), headers=trace_headers)

    def submit_raw(self, body: bytes | str, *, headers: dict[str, str] | None = None) -> SubmitResult:
        """POST a body as it is; same answers and retries as `submit`."""
        content = body.encode() if isinstance(body, str) else body
        sent = {**proto.JSON_HEADERS, **headers} if headers else proto.JSON_HEADERS
        attempt = 1
        while True:
            try:
                response = self._http.post(self.config.url("/v1/events"), content=content, headers=sent)
                return proto.submit_result(response.status_code, response.content, attempt)
            except httpx.TransportError as exc:
                error: ClientError = _unreachable(exc)
            except ClientError as exc:
                error = exc
            delay = proto.retry_delay_s(self.config.retry, attempt, error, random.random())
            if delay is None:
                raise error
            time.sleep(delay)
            attempt += 1

    def start_plan(
        self, process: str = "order", order_id: str | None = None, deadline_s: float | None = None
    ) -> PlanRun:
        """POST /v1/plans: a new order whose steps the gateway numbers (`PlanRun.step`)."""
        return PlanRun(self, plan_info(*self._post("/v1/plans", start_body(process, order_id, deadline_s))))

    def resume_plan(self, order_id: str) -> PlanRun:
        """The plan of an order started before (an agent that restarted); `NotFound` if there is none."""
        return PlanRun(self, plan_info(*self._get(f"/v1/orders/{order_id}/plan")))

    def _post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        """POST JSON; resent on 503 and transport errors (the plan helper's bodies carry idempotency keys)."""
        attempt = 1
        while True:
            try:
                response = self._http.post(self.config.url(path), json=body)
                if response.status_code != 503:
                    return response.status_code, response.content
                error: ClientError = proto.api_error(response.status_code, response.content)
            except httpx.TransportError as exc:
                error = _unreachable(exc)
            delay = proto.retry_delay_s(self.config.retry, attempt, error, random.random())
            if delay is None:
                raise error
            time.sleep(delay)
            attempt += 1

    def order(self, order_id: str) -> Order:
        """GET /v1/orders/{order_id}; `NotFound` when the gateway knows no such order."""
        return proto.read_model(Order, *self._get(f"/v1/orders/{order_id}"))

    def plan(self, plan_id: str) -> Plan:
        """GET /v1/plans/{plan_id}; `NotFound` when no order follows that plan."""
        return proto.read_model(Plan, *self._get(f"/v1/plans/{plan_id}"))

    def process(self, name: str, version: int | None = None) -> Process:
        """GET /v1/processes/{name} (the latest version, or `version`); `NotFound` for an unknown process."""
        query = f"?version={version}" if version is not None else ""
        return proto.read_model(Process, *self._get(f"/v1/processes/{name}{query}"))

    def approvals(self, limit: int = 100) -> list[Approval]:
        """GET /v1/approvals, the pending approvals of the key's tenant (approver or operator keys)."""
        return proto.read_model(Approvals, *self._get(f"/v1/approvals?limit={limit}")).approvals

    def answer_approval(self, approval_id: str, *, approve: bool) -> ApprovalAnswer:
        """POST /v1/approvals/{approval_id}/approve (or /deny) with an approver key."""
        url = self.config.url(proto.approval_path(approval_id, approve=approve))
        try:
            response = self._http.post(url)
        except httpx.TransportError as exc:
            raise _unreachable(exc) from exc
        return proto.read_model(ApprovalAnswer, response.status_code, response.content)

    def wait(
        self, order_id: str, *, after_seq: int | None = None, after_status: str | None = None, timeout: float = 30.0
    ) -> Order:
        """As `AsyncNexusClient.wait`, blocking."""
        change = proto.Change(after_seq, after_status)
        poll = proto.LongPoll(order_id, change, timeout, now=time.monotonic(), poll=self.config.poll)
        while True:
            asked = time.monotonic()
            try:
                current: Order | None = proto.read_model(Order, *self._get(poll.path()))
            except NotFound:
                current = None
            step = poll.answer(current, asked, time.monotonic())
            if isinstance(step, Order):
                return step
            if step > 0:
                time.sleep(step)

    def _get(self, path: str) -> tuple[int, bytes]:
        try:
            response = self._http.get(self.config.url(path), timeout=self.config.timeout_s + proto.wait_of(path))
        except httpx.TransportError as exc:
            raise _unreachable(exc) from exc
        return response.status_code, response.content

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
