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
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from nexus_client import _operations as ops
from nexus_client import _protocol as proto
from nexus_client import _tracing
from nexus_client.config import ClientConfig
from nexus_client.errors import GatewayUnreachable
from nexus_client.models import Approval, ApprovalAnswer, Approvals, Order, Plan, Process, SubmitResult
from nexus_client.plans import AsyncPlanRun, PlanRun, plan_info, start_body
from nexus_wire.envelope import EventEnvelope

Steps = EventEnvelope | Sequence[EventEnvelope]
T = TypeVar("T")


def _options(config: ClientConfig) -> dict[str, Any]:
    """The pool both clients open: timeout, connection limits and the key's headers."""
    limits = httpx.Limits(max_connections=config.max_connections, max_keepalive_connections=config.max_connections)
    return {"timeout": config.timeout_s, "limits": limits, "headers": config.headers()}


def _as_list(steps: Steps) -> Sequence[EventEnvelope]:
    return [steps] if isinstance(steps, EventEnvelope) else steps


def _body(body: bytes | str) -> bytes:
    return body.encode() if isinstance(body, str) else body


def _unreachable(exc: httpx.TransportError) -> GatewayUnreachable:
    error = GatewayUnreachable(f"{type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def _request(config: ClientConfig, call: ops.Call) -> dict[str, Any]:
    """httpx's arguments for one call: a long poll's read timeout is longer by its `wait`."""
    return {
        "method": call.method,
        "url": config.url(call.path),
        "content": call.content,
        "json": call.json,
        "headers": call.headers,
        "timeout": config.timeout_s + proto.wait_of(call.path),
    }


# Both clients run the same operations (`_operations.py`: requests, answers, retries, the long poll); each
# has only its own I/O: `_run` drives an operation with its send and its sleep (httpx keeps two clients too).
class AsyncNexusClient:
    """The public API over one pooled `httpx.AsyncClient`."""

    def __init__(
        self, config: ClientConfig | None = None, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.config = config or ClientConfig.from_env()
        self._http = httpx.AsyncClient(transport=transport, **_options(self.config))

    async def submit(self, steps: Steps) -> SubmitResult:
        """POST /v1/events with one envelope or a batch; resent on 502-504 and transport errors."""
        with _tracing.publish(_as_list(steps), "http") as trace_headers:  # The agent's publish span
            return await self.submit_raw(proto.encode_steps(steps), headers=trace_headers)

    async def submit_raw(self, body: bytes | str, *, headers: dict[str, str] | None = None) -> SubmitResult:
        """POST a body as it is (the lab sends malformed ones on purpose); same answers and retries."""
        return await self._run(ops.submit(_body(body), headers, self.config.retry))

    async def start_plan(
        self, process: str = "order", order_id: str | None = None, deadline_s: float | None = None
    ) -> AsyncPlanRun:
        """POST /v1/plans: a new order whose steps the gateway numbers (`AsyncPlanRun.step`)."""
        return AsyncPlanRun(self, plan_info(*await self._post("/v1/plans", start_body(process, order_id, deadline_s))))

    async def resume_plan(self, order_id: str) -> AsyncPlanRun:
        """The plan of an order started before (an agent that restarted); `NotFound` if there is none."""
        return AsyncPlanRun(self, plan_info(*await self._get(f"/v1/orders/{order_id}/plan")))

    async def _post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        """POST JSON; resent on 502-504 and transport errors (the plan helper's bodies carry idempotency keys)."""
        return await self._run(ops.post(path, body, self.config.retry))

    async def order(self, order_id: str) -> Order:
        """GET /v1/orders/{order_id}; `NotFound` when the gateway knows no such order."""
        return await self._run(ops.read(Order, f"/v1/orders/{order_id}"))

    async def plan(self, plan_id: str) -> Plan:
        """GET /v1/plans/{plan_id}; `NotFound` when no order follows that plan."""
        return await self._run(ops.read(Plan, f"/v1/plans/{plan_id}"))

    async def process(self, name: str, version: int | None = None) -> Process:
        """GET /v1/processes/{name} (the latest version, or `version`); `NotFound` for an unknown process."""
        query = f"?version={version}" if version is not None else ""
        return await self._run(ops.read(Process, f"/v1/processes/{name}{query}"))

    async def approvals(self, limit: int = 100) -> list[Approval]:
        """GET /v1/approvals, the pending approvals of the key's tenant (approver or operator keys)."""
        return (await self._run(ops.read(Approvals, f"/v1/approvals?limit={limit}"))).approvals

    async def answer_approval(
        self, approval_id: str, *, approve: bool, expect: Mapping[str, Any] | None = None
    ) -> ApprovalAnswer:
        """POST /v1/approvals/{approval_id}/approve (or /deny) with an approver key, `expect`ing a step."""
        return await self._run(ops.answer_approval(approval_id, approve=approve, expect=expect))

    async def wait(  # same signature as the sync client and the long poll (`wait=S`): no asyncio.timeout
        self,
        order_id: str,
        *,
        after_seq: int | None = None,
        after_status: str | None = None,
        timeout: float = 30.0,  # noqa: ASYNC109 - the sync client's signature and the long poll's `wait=S`
    ) -> Order:
        """The order once it changed (past `after_seq`, out of `after_status`, or else from its first reading);
        `WaitTimeout` when it did not within `timeout` seconds."""
        return await self._run(ops.wait(order_id, proto.Change(after_seq, after_status), timeout, self.config.poll))

    async def _get(self, path: str) -> tuple[int, bytes]:
        return await self._run(ops.get(path))

    async def _run(self, operation: ops.Operation[T]) -> T:
        step = ops.advance(operation, None)
        while not isinstance(step, ops.Done):
            if isinstance(step, ops.Pause):
                await asyncio.sleep(step.seconds)
                step = ops.advance(operation, None)
                continue
            try:
                response = await self._http.request(**_request(self.config, step))
            except httpx.TransportError as exc:
                step = ops.advance(operation, _unreachable(exc))
            else:
                step = ops.advance(operation, (response.status_code, response.content))
        return step.value

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
        self._http = httpx.Client(transport=transport, **_options(self.config))

    def submit(self, steps: Steps) -> SubmitResult:
        """POST /v1/events with one envelope or a batch; resent on 502-504 and transport errors."""
        with _tracing.publish(_as_list(steps), "http") as trace_headers:  # The agent's publish span
            return self.submit_raw(proto.encode_steps(steps), headers=trace_headers)

    def submit_raw(self, body: bytes | str, *, headers: dict[str, str] | None = None) -> SubmitResult:
        """POST a body as it is; same answers and retries as `submit`."""
        return self._run(ops.submit(_body(body), headers, self.config.retry))

    def start_plan(
        self, process: str = "order", order_id: str | None = None, deadline_s: float | None = None
    ) -> PlanRun:
        """POST /v1/plans: a new order whose steps the gateway numbers (`PlanRun.step`)."""
        return PlanRun(self, plan_info(*self._post("/v1/plans", start_body(process, order_id, deadline_s))))

    def resume_plan(self, order_id: str) -> PlanRun:
        """The plan of an order started before (an agent that restarted); `NotFound` if there is none."""
        return PlanRun(self, plan_info(*self._get(f"/v1/orders/{order_id}/plan")))

    def _post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        """POST JSON; resent on 502-504 and transport errors (the plan helper's bodies carry idempotency keys)."""
        return self._run(ops.post(path, body, self.config.retry))

    def order(self, order_id: str) -> Order:
        """GET /v1/orders/{order_id}; `NotFound` when the gateway knows no such order."""
        return self._run(ops.read(Order, f"/v1/orders/{order_id}"))

    def plan(self, plan_id: str) -> Plan:
        """GET /v1/plans/{plan_id}; `NotFound` when no order follows that plan."""
        return self._run(ops.read(Plan, f"/v1/plans/{plan_id}"))

    def process(self, name: str, version: int | None = None) -> Process:
        """GET /v1/processes/{name} (the latest version, or `version`); `NotFound` for an unknown process."""
        query = f"?version={version}" if version is not None else ""
        return self._run(ops.read(Process, f"/v1/processes/{name}{query}"))

    def approvals(self, limit: int = 100) -> list[Approval]:
        """GET /v1/approvals, the pending approvals of the key's tenant (approver or operator keys)."""
        return self._run(ops.read(Approvals, f"/v1/approvals?limit={limit}")).approvals

    def answer_approval(
        self, approval_id: str, *, approve: bool, expect: Mapping[str, Any] | None = None
    ) -> ApprovalAnswer:
        """POST /v1/approvals/{approval_id}/approve (or /deny) with an approver key, `expect`ing a step."""
        return self._run(ops.answer_approval(approval_id, approve=approve, expect=expect))

    def wait(
        self, order_id: str, *, after_seq: int | None = None, after_status: str | None = None, timeout: float = 30.0
    ) -> Order:
        """As `AsyncNexusClient.wait`, blocking."""
        return self._run(ops.wait(order_id, proto.Change(after_seq, after_status), timeout, self.config.poll))

    def _get(self, path: str) -> tuple[int, bytes]:
        return self._run(ops.get(path))

    def _run(self, operation: ops.Operation[T]) -> T:
        step = ops.advance(operation, None)
        while not isinstance(step, ops.Done):
            if isinstance(step, ops.Pause):
                time.sleep(step.seconds)
                step = ops.advance(operation, None)
                continue
            try:
                response = self._http.request(**_request(self.config, step))
            except httpx.TransportError as exc:
                step = ops.advance(operation, _unreachable(exc))
            else:
                step = ops.advance(operation, (response.status_code, response.content))
        return step.value

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
