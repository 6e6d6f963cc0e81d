"""The plan helper: an agent that never counts. The gateway numbers its steps (`POST /v1/plans`,
`POST /v1/orders/{order_id}/steps`).

    with NexusClient() as client:
        run = client.start_plan("order")                  # or client.resume_plan(order_id) after a restart
        result = run.step("OrderCreated", {...})          # -> StepResult (decision, seq_id, code, message...)
        if result.decision == "REJECTED": ...             # correct the step and propose it again
        run.wait(timeout=30)                              # e.g. after HELD: until the order moves on
        run.abort("customer cancelled")                   # or run.replan("a better way")

Each `step` call carries an idempotency key (yours, or one the helper makes for that call), so the
client's own resends after a 503 or a lost connection are answered DUPLICATE with the first verdict,
never applied twice. `AsyncPlanRun` is the same for `AsyncNexusClient`.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import TYPE_CHECKING, Any

from nexus_client import _protocol as proto
from nexus_client.models import Order, StepResult

if TYPE_CHECKING:
    from nexus_client.http import AsyncNexusClient, NexusClient


@dataclasses.dataclass(frozen=True, slots=True)
class PlanInfo:
    """A started plan: its order, plan id and process."""

    order_id: str
    plan_id: str
    process: str


def start_body(process: str, order_id: str | None, deadline_s: float | None) -> dict[str, Any]:
    body: dict[str, Any] = {"process": process}
    if order_id is not None:
        body["order_id"] = order_id
    if deadline_s is not None:
        body["deadline_s"] = deadline_s
    return body


def step_body(step: str, data: dict[str, Any] | None, idempotency_key: str | None) -> dict[str, Any]:
    return {"step": step, "data": data or {}, "idempotency_key": idempotency_key or uuid.uuid4().hex}


def plan_info(status: int, content: bytes) -> PlanInfo:
    """The plan of a `POST /v1/plans` or `GET /v1/orders/{order_id}/plan` answer, or the typed error."""
    if status >= 400:
        raise proto.api_error(status, content)
    body = proto._json(content)
    if not isinstance(body, dict):
        raise proto.api_error(status, content)
    return PlanInfo(str(body["order_id"]), str(body["plan_id"]), str(body.get("process") or "order"))


def step_result(status: int, content: bytes) -> StepResult:
    """A numbered step's result: a decision even when its status is 4xx (REJECTED 422, HELD 202...); an
    answer about the request (401, 403, 404, 429, 503) is raised as the typed error."""
    body = proto._json(content)
    if status < 500 and isinstance(body, dict) and "decision" in body:
        return StepResult.model_validate(body)
    raise proto.api_error(status, content)


def _end_body(reason: str) -> dict[str, Any]:
    return {"reason": reason, "idempotency_key": uuid.uuid4().hex}


class _Plan:
    """What a run keeps of its plan and how an answer updates it: the part of `PlanRun` and `AsyncPlanRun`
    that does no I/O (each adds its client's calls)."""

    def __init__(self, info: PlanInfo) -> None:
        self.order_id = info.order_id
        self.plan_id = info.plan_id
        self.process = info.process
        self.last: StepResult | None = None

    def _path(self, action: str) -> str:
        return f"/v1/orders/{self.order_id}/{action}"

    def _answered(self, status: int, content: bytes, *, replan: bool = False) -> StepResult:
        self.last = step_result(status, content)
        if replan and self.last.model_extra and self.last.model_extra.get("plan_id"):
            self.plan_id = str(self.last.model_extra["plan_id"])
        return self.last

    def _change(self, after_seq: int | None, after_status: str | None) -> dict[str, Any]:
        last = self.last
        if after_seq is None and after_status is None and last is not None and last.order is not None:
            after_seq = last.order.last_seq
        return {"after_seq": after_seq, "after_status": after_status}


class PlanRun(_Plan):
    """One order's plan, stepped through a `NexusClient`."""

    def __init__(self, client: NexusClient, info: PlanInfo) -> None:
        super().__init__(info)
        self.client = client

    def step(self, step: str, data: dict[str, Any] | None = None, idempotency_key: str | None = None) -> StepResult:
        """Propose the order's next step; the gateway numbers it and answers its decision."""
        return self._answered(*self.client._post(self._path("steps"), step_body(step, data, idempotency_key)))

    def abort(self, reason: str) -> StepResult:
        """End the plan (ABORT_PLAN, abort code `manual`)."""
        return self._answered(*self.client._post(self._path("abort"), _end_body(reason)))

    def replan(self, reason: str) -> StepResult:
        """Replace the plan by a new one (REPLAN); later steps continue the order under it."""
        return self._answered(*self.client._post(self._path("replan"), _end_body(reason)), replan=True)

    def wait(self, *, after_seq: int | None = None, after_status: str | None = None, timeout: float = 30.0) -> Order:
        """The order once it changed: by default, once its last_seq passed the last answer's."""
        return self.client.wait(self.order_id, **self._change(after_seq, after_status), timeout=timeout)


class AsyncPlanRun(_Plan):
    """One order's plan, stepped through an `AsyncNexusClient`."""

    def __init__(self, client: AsyncNexusClient, info: PlanInfo) -> None:
        super().__init__(info)
        self.client = client

    async def step(
        self, step: str, data: dict[str, Any] | None = None, idempotency_key: str | None = None
    ) -> StepResult:
        """Propose the order's next step; the gateway numbers it and answers its decision."""
        return self._answered(*await self.client._post(self._path("steps"), step_body(step, data, idempotency_key)))

    async def abort(self, reason: str) -> StepResult:
        """End the plan (ABORT_PLAN, abort code `manual`)."""
        return self._answered(*await self.client._post(self._path("abort"), _end_body(reason)))

    async def replan(self, reason: str) -> StepResult:
        """Replace the plan by a new one (REPLAN); later steps continue the order under it."""
        return self._answered(*await self.client._post(self._path("replan"), _end_body(reason)), replan=True)

    async def wait(
        self,
        *,
        after_seq: int | None = None,
        after_status: str | None = None,
        timeout: float = 30.0,  # noqa: ASYNC109 - the sync client's signature
    ) -> Order:
        """The order once it changed: by default, once its last_seq passed the last answer's."""
        return await self.client.wait(self.order_id, **self._change(after_seq, after_status), timeout=timeout)
