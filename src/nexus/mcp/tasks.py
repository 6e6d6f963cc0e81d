"""Approvals as durable MCP tasks: the server side of the tasks extension (`io.modelcontextprotocol/tasks`).

The official Python SDK (2.3) has the extension machinery (`mcp.server.extension.Extension`: new request
methods, a `tools/call` interceptor, the capability advertised under `extensions`) but no tasks extension,
so this module is ours, written from the specification on that machinery:

- `tools/call` of `propose_step`, by a client that declared the extension in its capabilities, whose step
  is HELD for a person's approval, answers `{"resultType": "task", "task": {...}}` instead of the HELD text:
  the task is a row of `mcp_tasks` (migration 0026) naming the approval. A repeat of that call (same
  idempotency key: DUPLICATE of a HELD first verdict) answers a task too, ended already if it was answered.
  Every other call, and every call of a client without the extension (or of a protocol revision before
  2026-07-28), answers as before.
- `tasks/get {"taskId"}` answers the task (`taskId`, `status`, `statusMessage`, `createdAt`,
  `lastUpdatedAt`, `ttl`, `pollInterval`) and, once it ended, `result`: the `tools/call` result the step's
  final verdict gives, as `propose_step` answers it. Its state is read, never kept: the approval pending
  is `working`; answered, the step's decision in the decision log ends it (`completed` for APPLY, `failed`
  with the REJECTED result, `APPROVAL_DENIED` on a denial or an expiry, and with DISCARD when an abort or
  a REPLAN dropped the held step). So any gateway process answers, after a restart, whoever called.
- `tasks/update` (input for an `input_required` task) and `tasks/cancel` are refused with -32602: these
  tasks never ask for input, and a held step is withdrawn by `abort_plan` or `replan`, answered by an
  approver, never by a task's cancellation.
A task of another tenant, or an unknown one, is -32602 with `data` in the API's error shape, code NOT_FOUND.

    working --(approved: APPLY)--> completed
       |----(denied, expired: REJECTED APPROVAL_DENIED; approved but no longer fitting: REJECTED)--> failed
       '----(abort or REPLAN dropped the step: DISCARD)--> failed
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolRequestParams, CallToolResult, RequestParams
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from nexus.core.decide.approvals import approval_id_for
from nexus.error_shape import error_body
from nexus.errors import ErrorCode
from nexus.mcp.server import result, step_text
from nexus.store.database import Database
from nexus.store.queries import query

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
INVALID_PARAMS = -32602
POLL_INTERVAL_MS = 1000
"""The `pollInterval` a task suggests (a hint to the client; the gateway keeps no timer for it)."""
_TASK_TOOLS = frozenset({"propose_step"})
_ENDING = {"APPLY": "completed"}


@dataclasses.dataclass(frozen=True, slots=True)
class TaskCaller:
    """Who asks: the database, the caller's tenant and the decision log's actor of its key."""

    db: Database
    tenant_id: str
    actor: str


CallerOf = Callable[[ServerRequestContext[Any, Any]], TaskCaller | None]


class TaskParams(RequestParams):
    """The params of tasks/get, tasks/update and tasks/cancel."""

    task_id: str = Field(alias="taskId")


class ApprovalTasks(Extension):
    """The tasks extension over the gateway's approvals (see the module's docstring)."""

    identifier = TASKS_EXTENSION

    def __init__(self, caller_of: CallerOf) -> None:
        self.caller_of = caller_of

    def methods(self) -> Sequence[MethodBinding]:
        versions = frozenset(MODERN_PROTOCOL_VERSIONS)
        return (
            MethodBinding("tasks/get", TaskParams, self._get, versions),
            MethodBinding("tasks/update", TaskParams, self._refuse_update, versions),
            MethodBinding("tasks/cancel", TaskParams, self._refuse_cancel, versions),
        )

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        answer = await call_next(ctx)
        if params.name not in _TASK_TOOLS or not _declared(ctx) or not isinstance(answer, CallToolResult):
            return answer
        caller = self.caller_of(ctx)
        approval_id = _held_approval(answer, caller)
        if approval_id is None or caller is None:
            return answer
        order_id = str((params.arguments or {}).get("order_id"))
        task_id = uuid.uuid4()
        row = await caller.db.fetchrow(
            query("mcp_tasks.sql", "create_task"), task_id, caller.tenant_id, order_id, approval_id, caller.actor, None
        )
        assert row is not None
        message = f"the step waits for a person's approval (approval_id {approval_id})"
        task = _task(task_id, "working", message, row["created_at"], row["created_at"], row["ttl_ms"])
        return {"resultType": "task", "task": task}

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        caller = self.caller_of(ctx)
        task_id = _task_id(params.task_id)
        row = None
        if caller is not None and task_id is not None:
            row = await caller.db.fetchrow(query("mcp_tasks.sql", "task"), caller.tenant_id, task_id)
        if row is None:
            raise _refusal(ErrorCode.NOT_FOUND, f"no task {params.task_id}")
        return task_state(row)

    async def _refuse_update(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        await self._get(ctx, params)  # an unknown task is NOT_FOUND first
        raise _refusal(ErrorCode.INVALID_REQUEST, "this task never asks for input")

    async def _refuse_cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        await self._get(ctx, params)
        raise _refusal(
            ErrorCode.INVALID_REQUEST,
            "a held step is not cancelled through its task: abort_plan or replan withdraws it, an approver answers it",
        )


def task_state(row: Any) -> dict[str, Any]:
    """tasks/get's answer from the `task` query's row: the task and, once it ended, the step's result."""
    if row["approval_status"] == "pending" or (row["decision"] is None and row["approval_status"] != "cancelled"):
        message = f"the step waits for a person's approval (approval_id {row['approval_id']})"
        return _task(row["task_id"], "working", message, row["created_at"], row["created_at"], row["ttl_ms"])
    body = {
        "decision": row["decision"] or "DISCARD",
        "code": row["code"],
        "check": row["check"],
        "message": row["message"] or ("the plan was aborted or replaced while the step waited"),
        "seq_id": row["seq_id"],
        "event_id": str(row["event_id"]),
        "approval_id": str(row["approval_id"]),
        "order": {"status": row["order_status"], "last_seq": row["last_seq"]},
    }
    fields = {
        **{k: v for k, v in body.items() if k != "order"},
        "status": row["order_status"],
        "last_seq": row["last_seq"],
    }
    status = _ENDING.get(body["decision"], "failed")
    answer = result(fields, step_text(body), is_error=status == "failed")
    ended = row["decided_at_log"] or row["decided_at"] or row["created_at"]
    task = _task(row["task_id"], status, step_text(body), row["created_at"], ended, row["ttl_ms"])
    return {**task, "result": answer.model_dump(by_alias=True, mode="json", exclude_none=True)}


def _task(
    task_id: uuid.UUID, status: str, message: str, created: dt.datetime, updated: dt.datetime, ttl_ms: int | None
) -> dict[str, Any]:
    return {
        "taskId": str(task_id), "status": status, "statusMessage": message, "createdAt": created.isoformat(),
        "lastUpdatedAt": updated.isoformat(), "ttl": ttl_ms, "pollInterval": POLL_INTERVAL_MS,
    }  # fmt: skip


def _held_approval(answer: CallToolResult, caller: TaskCaller | None) -> uuid.UUID | None:
    """The approval of a step this call found HELD, or repeated (DUPLICATE) while its first verdict was HELD:
    a client whose first call was lost gets a task by repeating it."""
    body = answer.structured_content if isinstance(answer.structured_content, dict) else {}
    if body.get("decision") == "HELD" and body.get("approval_id"):
        return uuid.UUID(str(body["approval_id"]))
    first = body.get("first")
    if body.get("decision") == "DUPLICATE" and isinstance(first, dict) and first.get("decision") == "HELD" and caller:
        return approval_id_for(uuid.UUID(str(body["event_id"])), caller.tenant_id)
    return None


def _declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the caller declared the tasks extension (in a 2026-07-28 request's capabilities)."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    return bool(capabilities and capabilities.extensions and TASKS_EXTENSION in capabilities.extensions)


def _task_id(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def _refusal(code: ErrorCode, message: str) -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=f"{code.value}: {message}", data=error_body(code, message))
