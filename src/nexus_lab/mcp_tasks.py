"""A thin requester of the MCP tasks extension (`io.modelcontextprotocol/tasks`) over the official client.

The official Python SDK (2.3) ships the client's extension machinery (`ClientExtension`, `ResultClaim`: a
result shape keyed by its `resultType`, finished by a resolver) and generic requests
(`ClientSession.send_request` of any `Request` model) but no tasks extension. Ours, written from the
specification: the models of a task and of `tasks/get` (its `Mcp-Name` header carries the `taskId`), and
`TasksExtension`, which declares the extension and claims `resultType: "task"` so that `Client.call_tool`
returns the task's final `CallToolResult` (polling `tasks/get` at the task's `pollInterval`). To hold a task
yourself (to ask another gateway process, later), call `client.session.call_tool(..., allow_claimed=True)`
and `get_task`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import anyio
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp.types import CallToolResult
from mcp_types import Request, RequestParams, Result
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
ENDED = frozenset({"completed", "failed", "cancelled"})


class TaskInfo(BaseModel):
    """A task as the server describes it (camelCase on the wire, as every MCP type)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    task_id: str
    status: str
    status_message: str | None = None
    created_at: dt.datetime | None = None
    last_updated_at: dt.datetime | None = None
    ttl: int | None = None
    poll_interval: int | None = None


class TaskCreated(Result):
    """A `tools/call` answered as a task."""

    result_type: Literal["task"] = "task"
    task: TaskInfo


class TaskState(Result, TaskInfo):
    """tasks/get's answer: the task and, once it ended, the original request's result."""

    result: dict[str, Any] | None = None


class GetTaskParams(RequestParams):
    task_id: str = Field(alias="taskId")


class GetTask(Request[GetTaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param: ClassVar[str | None] = "taskId"


async def get_task(session: ClientSession, task_id: str) -> TaskState:
    """tasks/get, once."""
    return await session.send_request(GetTask(params=GetTaskParams(taskId=task_id)), TaskState)


async def wait_task(session: ClientSession, task_id: str, *, timeout_s: float = 60.0) -> TaskState:
    """tasks/get until the task ends (at the interval it suggests); TimeoutError past `timeout_s`."""
    with anyio.fail_after(timeout_s):
        while True:
            state = await get_task(session, task_id)
            if state.status in ENDED:
                return state
            await anyio.sleep((state.poll_interval or 1000) / 1000)


def tool_result(state: TaskState) -> CallToolResult:
    """An ended task's result as the `CallToolResult` its `tools/call` stands for."""
    if state.result is None:
        raise ValueError(f"task {state.task_id} is {state.status}: no result")
    return CallToolResult.model_validate(state.result)


class TasksExtension(ClientExtension):
    """Declares the tasks extension; a `tools/call` answered as a task returns its final result."""

    identifier = TASKS_EXTENSION

    def __init__(self, *, timeout_s: float = 600.0) -> None:
        self.timeout_s = timeout_s

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=TaskCreated, resolve=self._resolve),)

    async def _resolve(self, created: TaskCreated, ctx: ClaimContext) -> CallToolResult:
        return tool_result(await wait_task(ctx.session, created.task.task_id, timeout_s=self.timeout_s))
