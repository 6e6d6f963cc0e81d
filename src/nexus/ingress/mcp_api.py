"""`/mcp` on the gateway's port: the MCP server (nexus.mcp) with the REST API's own functions as its
backend, for the key that called.

The route sits behind the API's authentication middleware like every other: a missing or unknown key is
a 401 in the REST error shape with `WWW-Authenticate: Bearer`, and the rate limit counts each request.
Roles are checked per tool: steps need an agent key of one tenant (as `POST /v1/orders/{id}/steps`), reads
an agent or operator key; every read is filtered by the key's tenant (another tenant's order is NOT_FOUND).
A request from a browser page of an origin not in `NEXUS_MCP_ALLOWED_ORIGINS` is refused 403 (nexus.mcp.asgi).
A HELD step proposed by a client of the tasks extension is answered as a task (nexus.mcp.tasks).
The route is not in the OpenAPI document.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi import FastAPI
from pydantic import BaseModel, ValidationError
from starlette.routing import Route

from nexus.auth.roles import Principal, Role, read_tenant
from nexus.core.process_model import CompiledProcess
from nexus.errors import NexusError, QuotaExceededError
from nexus.gateway import Gateway
from nexus.ingress import steps_api
from nexus.ingress.http_errors import invalid_request, status_of
from nexus.lifecycle.waiting import WaitSlots
from nexus.mcp.asgi import McpEndpoint, allowed_origins
from nexus.mcp.backend import BackendError, invalid_arguments
from nexus.mcp.server import build_server
from nexus.mcp.tasks import ApprovalTasks, TaskCaller
from nexus.settings import Settings
from nexus.store.database import Database

_READERS = frozenset({Role.AGENT, Role.OPERATOR})
_Model = TypeVar("_Model", bound=BaseModel)
ReadOrder = Callable[[Database, str, str], Awaitable[dict[str, Any] | None]]


@dataclasses.dataclass(frozen=True, slots=True)
class GatewayBackend:
    """The REST API's operations in process, as `principal` may call them."""

    db: Database
    gateway: Gateway
    settings: Settings
    listener: Any
    principal: Principal
    read_order: ReadOrder
    """`GET /v1/orders/{order_id}`'s reading (nexus.ingress.http.read_order, which mounts this module)."""
    submitter: steps_api.Submitter
    """The app's group committer (steps share transactions with other requests')."""
    wait_slots: WaitSlots | None = None
    """The key's open streams and long polls (`NEXUS_MAX_WAITS_PER_KEY`): `wait_for_order` holds one."""

    def _caller(self) -> steps_api.StepCaller:
        return steps_api.StepCaller(self.db, self.gateway, self.principal, self.submitter)

    async def list_processes(self) -> dict[str, Any]:
        from nexus.processes import describe

        return {"processes": [describe(p) for _, p in sorted(self._catalog().versions.items())]}

    async def describe_process(self, name: str) -> dict[str, Any]:
        from nexus.processes import describe, mermaid

        process = self._process(name)
        return {**describe(process), "mermaid": mermaid(process)}

    async def start_plan(self, process: str, order_id: str | None, deadline_s: float | None) -> dict[str, Any]:
        async with self._translated():
            request = _request(steps_api.StartPlan, process=process, order_id=order_id, deadline_s=deadline_s)
            return await steps_api.start_plan(self._caller(), request)

    async def propose_step(
        self, order_id: str, step: str, data: dict[str, Any], idempotency_key: str | None
    ) -> tuple[int, dict[str, Any]]:
        async with self._translated():
            request = _request(steps_api.ProposeStep, step=step, data=data, idempotency_key=idempotency_key)
            return await steps_api.propose_step(self._caller(), order_id, request)

    async def end_plan(self, order_id: str, reason: str, *, replan: bool) -> tuple[int, dict[str, Any]]:
        async with self._translated():
            request = _request(steps_api.EndPlan, reason=reason)
            return await steps_api.end_plan(self._caller(), order_id, request, replan=replan)

    async def get_order(self, order_id: str) -> dict[str, Any]:
        tenant = self._reader_tenant()
        async with self._translated():
            order = await self.read_order(self.db, tenant, order_id)
        if order is None:
            order = await self._started_only(tenant, order_id)
        return order

    async def order_history(self, order_id: str) -> dict[str, Any]:
        from nexus.lifecycle.history import order_history

        tenant = self._reader_tenant()
        async with self._translated():
            try:
                return {"order_id": order_id, "items": await order_history(self.db, tenant, order_id)}
            except NexusError:
                return {"order_id": order_id, "items": []}

    async def wait_for_order(self, order_id: str, after_seq: int | None, timeout_s: float) -> dict[str, Any]:
        from nexus.lifecycle.waiting import wait_for_order

        tenant = self._reader_tenant()
        slots = self.wait_slots
        async with self._translated():
            if slots is not None:  # 429 TOO_MANY_WAITS past the key's cap, as the REST long poll
                slots.take(self.principal.key_id)
        try:
            async with self._translated():
                order = await wait_for_order(
                    self.listener,
                    lambda: self.read_order(self.db, tenant, order_id),
                    tenant,
                    order_id,
                    min(timeout_s, self.settings.wait_max_s),
                    after_seq=after_seq,
                )
        finally:
            if slots is not None:
                slots.give_back(self.principal.key_id)
        if order is None:
            order = await self._started_only(tenant, order_id)
        return order

    async def list_approvals(self, limit: int) -> dict[str, Any]:
        from nexus.lifecycle.approvals import ApproverRefused, approver_of, pending

        try:
            return {"approvals": await pending(self.db, approver_of(self.principal), limit=limit)}
        except ApproverRefused as exc:
            raise BackendError(403, "FORBIDDEN", str(exc)) from exc

    async def answer_approval(
        self, approval_id: str, *, approve: bool, expect: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        import uuid

        from nexus.lifecycle.approvals import ApproverRefused, answer, approver_of

        try:
            parsed = uuid.UUID(approval_id)
        except ValueError as exc:
            raise BackendError(422, "INVALID_REQUEST", "approval_id: not an approval id (a UUID)") from exc
        try:
            async with self._translated():
                outcome = await answer(
                    self.gateway, parsed, approver_of(self.principal), approve=approve, expect=expect
                )
        except ApproverRefused as exc:
            raise BackendError(403, "FORBIDDEN", str(exc)) from exc
        return 200, {**outcome.as_json(), "seq_id": outcome.seq_id, "approval_id": approval_id}

    async def list_dead_letters(self, limit: int) -> dict[str, Any]:
        from nexus.ingress.dead_letters import list_dead_letters

        self._operator()
        async with self._translated():
            return {"dead_letters": await list_dead_letters(self.db, self.principal.tenant_id, limit=limit)}

    async def redrive_dead_letter(self, dead_letter_id: int) -> dict[str, Any]:
        from nexus.ingress.dead_letters import redrive_dead_letter

        self._operator()
        async with self._translated():
            outcome = await redrive_dead_letter(
                self.db, self.gateway, dead_letter_id, self.principal.tenant_id, self.principal
            )
        return {"dead_letter_id": dead_letter_id, "result": outcome.as_json()}

    def _operator(self) -> None:
        if Role.OPERATOR not in self.principal.roles:
            raise BackendError(403, "FORBIDDEN", "dead letters need an operator key")

    async def _started_only(self, tenant: str, order_id: str) -> dict[str, Any]:
        """A plan started with no step yet (or NOT_FOUND)."""
        async with self._translated():
            plan = await steps_api.plan_of(self.db, tenant, order_id)
        return {**plan, "buffered": [], "notifications": 0}

    def _reader_tenant(self) -> str:
        if self.principal.roles.isdisjoint(_READERS):
            raise BackendError(403, "FORBIDDEN", "reading orders needs an agent or operator key")
        return read_tenant(self.principal, None)

    def _catalog(self) -> Any:
        from nexus.processes import builtin_catalog

        return self.gateway.catalog or builtin_catalog()

    def _process(self, name: str) -> CompiledProcess:
        process: CompiledProcess | None = self._catalog().get(name)
        if process is None:
            raise BackendError(404, "NOT_FOUND", "no such process: list_processes names them")
        return process

    def _translated(self) -> _Translated:
        return _Translated()


def _request(model: type[_Model], **fields: Any) -> _Model:
    """The REST API's request model of a tool call: arguments it refuses are the call's INVALID_REQUEST."""
    try:
        return model(**fields)
    except ValidationError as exc:
        raise invalid_arguments(exc) from exc


class _Translated:
    """Turns the API's errors into `BackendError`s with their HTTP status and code."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if isinstance(exc, ValidationError):  # a tool's argument the API's body would refuse: as the API says it
            code, message = invalid_request(exc.errors(include_input=False), ("body",))
            raise BackendError(422, code.value, message) from exc
        if isinstance(exc, steps_api.StepsApiError):
            raise BackendError(exc.status, exc.code.value, exc.message) from exc
        if isinstance(exc, QuotaExceededError):
            raise BackendError(429, exc.code.value, exc.message, exc.quota) from exc
        if isinstance(exc, NexusError):
            raise BackendError(status_of(exc), exc.code.value, exc.message) from exc


def install(app: FastAPI, db: Database, gateway: Gateway, settings: Settings, read_order: ReadOrder) -> McpEndpoint:
    """Serve MCP at `/mcp` (outside the OpenAPI document)."""

    def backend_of(ctx: Any) -> GatewayBackend:
        principal = ctx.request_context.request.state.principal
        state = app.state
        return GatewayBackend(
            db, gateway, settings, state.decision_listener, principal, read_order, state.submitter, state.wait_slots
        )

    def roles_of(request_context: Any) -> frozenset[str] | None:
        request = getattr(request_context, "request", None)
        principal = getattr(getattr(request, "state", None), "principal", None)
        return None if principal is None else frozenset(role.value for role in principal.roles)

    def task_caller(request_context: Any) -> TaskCaller | None:
        request = getattr(request_context, "request", None)
        principal = getattr(getattr(request, "state", None), "principal", None)
        if principal is None or principal.tenant_id is None:
            return None  # a key spanning every tenant proposes no steps, so it has no tasks
        return TaskCaller(db, principal.tenant_id, principal.actor)

    server = build_server(backend_of, roles_of=roles_of, extensions=[ApprovalTasks(task_caller)])
    endpoint = McpEndpoint(server, allowed_origins(settings.mcp_allowed_origins))
    app.router.routes.append(Route("/mcp", endpoint, methods=["GET", "POST", "DELETE"], include_in_schema=False))
    return endpoint
