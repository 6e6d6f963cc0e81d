"""The MCP tools and resources of the gateway (names fixed: DESIGN.md "Server-numbered steps and MCP").

Every tool is one call of the `Backend` (the REST API) and answers a `CallToolResult` whose
`structuredContent` always has `decision`, `code`, `check`, `message`, `approval_id`, `first`, `status` and
`last_seq` (None where they do not apply) next to the tool's own fields, and whose `isError` is true for
REJECTED, DEAD_LETTER, PLAN_MISMATCH and every refusal of the API (4xx, 5xx). The text is written for a
model to act on: what happened and what to do next, in the process definition's words, never an echo of
the call's input.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import yaml
from mcp.server.extension import Extension
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, InputRequiredResult, ListToolsResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nexus.mcp.backend import Backend, BackendError, invalid_arguments

BackendOf = Callable[[Context[Any, Any]], Backend]
RolesOf = Callable[[Any], frozenset[str] | None]
"""The roles of the caller of a request (its `ServerRequestContext`); None: unknown (every tool is listed, and
the API refuses what the key may not do, as over stdio)."""

# Which roles see (and may call) each tool; a key of several roles sees the union, a hidden tool answers as an
# unknown one.
TOOL_ROLES: dict[str, frozenset[str]] = {
    "list_processes": frozenset({"agent", "operator"}),
    "describe_process": frozenset({"agent"}),
    "start_plan": frozenset({"agent"}),
    "propose_step": frozenset({"agent"}),
    "get_order": frozenset({"agent", "operator"}),
    "abort_plan": frozenset({"agent"}),
    "replan": frozenset({"agent"}),
    "wait_for_order": frozenset({"agent"}),
    "list_approvals": frozenset({"approver"}),
    "approve": frozenset({"approver"}),
    "deny": frozenset({"approver"}),
    "list_dead_letters": frozenset({"operator"}),
    "redrive_dead_letter": frozenset({"operator"}),
}

STANDARD_FIELDS = ("decision", "code", "check", "message", "approval_id", "first", "status", "last_seq")
ERROR_DECISIONS = frozenset({"REJECTED", "DEAD_LETTER", "PLAN_MISMATCH"})

INSTRUCTIONS = """\
Nexus validates every step of a business process before it happens. Start with list_processes and
describe_process to learn a process's steps and the data each needs; start_plan to open an order; then
propose_step for each step in turn (the gateway numbers the steps: never send a sequence number). Each
answer says whether the step was applied and what may come next. A REJECTED step changed nothing: fix it
and propose it again with a new idempotency_key. Reusing an idempotency_key repeats the call safely
(answered DUPLICATE with the first verdict). HELD means a person must approve: call wait_for_order (a
client of the tasks extension gets a task instead, which ends with the step's final verdict)."""


class NexusServer(MCPServer[Any]):
    """The SDK's server, whose tool calls with arguments that fail the tool's schema answer as every refusal
    does (structuredContent with code INVALID_REQUEST, a message naming each argument, `isError`) instead
    of the SDK's text, which quotes the input; and whose tools are listed and callable by role (`TOOL_ROLES`)."""

    def __init__(
        self, name: str, *, instructions: str, roles_of: RolesOf, extensions: Sequence[Extension] = ()
    ) -> None:
        super().__init__(name, instructions=instructions, extensions=list(extensions))
        self.roles_of = roles_of

    def _allowed(self, request_context: Any, name: str) -> bool:
        roles = self.roles_of(request_context)
        return roles is None or not roles.isdisjoint(TOOL_ROLES.get(name, frozenset()))

    async def _handle_list_tools(self, ctx: Any, params: Any) -> ListToolsResult:
        listed = await self.list_tools()
        return ListToolsResult(tools=[tool for tool in listed if self._allowed(ctx, tool.name)])

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        if context is not None and not self._allowed(context.request_context, name):
            raise ToolError(f"Unknown tool: {name}")  # the SDK's words for a tool it does not have
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                return refusal(invalid_arguments(exc.__cause__))
            raise


def build_server(
    backend_of: BackendOf,
    *,
    name: str = "nexus",
    roles_of: RolesOf = lambda _: None,
    extensions: Sequence[Extension] = (),
) -> MCPServer[Any]:
    """The MCP server; `backend_of(ctx)` is the API as the calling key sees it, `roles_of` its roles;
    `extensions`: the SDK's extensions it serves (the gateway's `/mcp`: approvals as tasks, nexus.mcp.tasks)."""
    server = NexusServer(name, instructions=INSTRUCTIONS, roles_of=roles_of, extensions=extensions)
    read = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
    write = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False)

    _plan_tools(server, backend_of, read, write)
    _order_tools(server, backend_of, read, write)
    _person_tools(server, backend_of, read, write)
    _resources(server, backend_of)
    return server


def _plan_tools(server: MCPServer[Any], backend_of: BackendOf, read: ToolAnnotations, write: ToolAnnotations) -> None:
    """The agent's tools to learn the processes, open an order and propose its steps."""

    @server.tool(annotations=read)
    async def list_processes(ctx: Context[Any, Any]) -> CallToolResult:
        """The processes this gateway knows: their names, steps and states."""
        return await _call(_list_processes(backend_of(ctx)))

    @server.tool(annotations=read)
    async def describe_process(
        name: Annotated[str, Field(description="a process name from list_processes, e.g. order")],
        ctx: Context[Any, Any],
    ) -> CallToolResult:
        """A process: its states, its steps (from which states, to which state), each step's data as a JSON
        Schema, its checks, and a Mermaid diagram."""
        return await _call(_describe(backend_of(ctx), name))

    @server.tool(annotations=write)
    async def start_plan(
        ctx: Context[Any, Any],
        process: Annotated[str, Field(description="the process to follow")] = "order",
        order_id: Annotated[str | None, Field(description="an id of your choice; omitted: one is made")] = None,
        deadline_s: Annotated[float | None, Field(description="seconds the plan may take", gt=0)] = None,
    ) -> CallToolResult:
        """Open a new order following a process; answers its order_id for the following calls."""
        return await _call(_start(backend_of(ctx), process, order_id, deadline_s))

    @server.tool(annotations=write)
    async def propose_step(
        order_id: str,
        step: Annotated[str, Field(description="the step's name, as in describe_process")],
        ctx: Context[Any, Any],
        data: Annotated[dict[str, Any] | None, Field(description="the step's data")] = None,
        idempotency_key: Annotated[
            str | None, Field(description="the same key repeats this call safely; a new key is a new step")
        ] = None,
    ) -> CallToolResult:
        """Propose the order's next step. The gateway numbers it, validates it against the process and
        applies it once, or says why not."""
        return await _call(_step(backend_of(ctx).propose_step(order_id, step, data or {}, idempotency_key)))


def _order_tools(server: MCPServer[Any], backend_of: BackendOf, read: ToolAnnotations, write: ToolAnnotations) -> None:
    """The agent's tools on an order under way: read it, abort or replace its plan, wait for it to change."""

    @server.tool(annotations=read)
    async def get_order(order_id: str, ctx: Context[Any, Any]) -> CallToolResult:
        """The order's state: status, last applied sequence number, buffered steps."""
        return await _call(_order(backend_of(ctx).get_order(order_id)))

    @server.tool(annotations=write)
    async def abort_plan(order_id: str, reason: str, ctx: Context[Any, Any]) -> CallToolResult:
        """Abort the order's plan (abort code manual); nothing more will apply to it."""
        return await _call(_step(backend_of(ctx).end_plan(order_id, reason, replan=False)))

    @server.tool(annotations=write)
    async def replan(order_id: str, reason: str, ctx: Context[Any, Any]) -> CallToolResult:
        """Replace the order's plan by a new one; the order keeps its state and continues from its next step."""
        return await _call(_step(backend_of(ctx).end_plan(order_id, reason, replan=True)))

    @server.tool(annotations=read)
    async def wait_for_order(
        order_id: str,
        ctx: Context[Any, Any],
        after_seq: Annotated[int | None, Field(description="answer once last_seq passes this", ge=0)] = None,
        timeout_s: Annotated[float, Field(description="longest wait in seconds", ge=0, le=300)] = 30.0,
    ) -> CallToolResult:
        """Wait until the order changes (e.g. a HELD step approved or denied), then answer its state."""
        return await _call(_order(backend_of(ctx).wait_for_order(order_id, after_seq, timeout_s)))


def _resources(server: MCPServer[Any], backend_of: BackendOf) -> None:
    """The resources: a process definition as YAML, an order with its history as JSON."""

    @server.resource("nexus://processes/{name}", mime_type="application/yaml")
    async def process_resource(name: str, ctx: Context[Any, Any]) -> str:
        """A process definition (states, steps, checks, each step's data schema), as YAML."""
        body = await backend_of(ctx).describe_process(name)
        return yaml.safe_dump({k: v for k, v in body.items() if k != "mermaid"}, sort_keys=False)

    @server.resource("nexus://orders/{order_id}", mime_type="application/json")
    async def order_resource(order_id: str, ctx: Context[Any, Any]) -> str:
        """An order's state and its history of decisions, as JSON."""
        backend = backend_of(ctx)
        order = await backend.get_order(order_id)
        history = await backend.order_history(order_id)
        return json.dumps({"order": order, "history": history.get("items", [])}, default=str)


OldestFirst = Annotated[int, Field(description="at most this many, oldest first", ge=1, le=1000)]
NewestFirst = Annotated[int, Field(description="at most this many, newest first", ge=1, le=1000)]
ApprovalId = Annotated[str, Field(description="an approval_id from list_approvals")]


class ApprovalExpect(BaseModel):
    """What the approver saw in list_approvals: any field given that differs refuses the answer."""

    model_config = ConfigDict(extra="forbid")

    event_id: Annotated[str | None, Field(description="the held step's event_id")] = None
    data_sha256: Annotated[
        str | None, Field(description="SHA-256 of the step's data as canonical JSON", pattern="^[0-9a-fA-F]{64}$")
    ] = None
    process_version: Annotated[int | None, Field(description="the process version that held the step", ge=1)] = None
    seq_id: Annotated[int | None, Field(description="the held step's seq", ge=1)] = None


Expect = Annotated[
    ApprovalExpect | None,
    Field(description="the step you mean, as list_approvals shows it (if it differs: APPROVAL_MISMATCH)"),
]


def _person_tools(server: MCPServer[Any], backend_of: BackendOf, read: ToolAnnotations, write: ToolAnnotations) -> None:
    """The tools of the people beside the agents: approvers answer held steps, operators redrive dead letters."""

    @server.tool(annotations=read)
    async def list_approvals(ctx: Context[Any, Any], limit: OldestFirst = 100) -> CallToolResult:
        """Steps held for a person's approval in this key's tenant: what each would do (its data), oldest first."""
        return await _call(_approvals(backend_of(ctx).list_approvals(limit)))

    async def answer(
        ctx: Context[Any, Any], approval_id: str, expect: ApprovalExpect | None, *, approve: bool
    ) -> CallToolResult:
        expected = (expect.model_dump(exclude_none=True) if expect is not None else None) or None
        return await _call(_step(backend_of(ctx).answer_approval(approval_id, approve=approve, expect=expected)))

    @server.tool(annotations=write)
    async def approve(approval_id: ApprovalId, ctx: Context[Any, Any], expect: Expect = None) -> CallToolResult:
        """Approve a held step: it is applied now (or rejected if it no longer fits its order)."""
        return await answer(ctx, approval_id, expect, approve=True)

    @server.tool(annotations=write)
    async def deny(approval_id: ApprovalId, ctx: Context[Any, Any], expect: Expect = None) -> CallToolResult:
        """Deny a held step: it is REJECTED APPROVAL_DENIED and changes nothing."""
        return await answer(ctx, approval_id, expect, approve=False)

    @server.tool(annotations=read)
    async def list_dead_letters(ctx: Context[Any, Any], limit: NewestFirst = 100) -> CallToolResult:
        """Inputs the gateway could not take (their code and error), newest first."""
        return await _call(_dead_letters(backend_of(ctx).list_dead_letters(limit)))

    @server.tool(annotations=write)
    async def redrive_dead_letter(
        dead_letter_id: Annotated[int, Field(description="an id from list_dead_letters", ge=1)],
        ctx: Context[Any, Any],
    ) -> CallToolResult:
        """Submit a dead letter's original input again, once (after its cause is fixed)."""
        return await _call(_redriven(backend_of(ctx).redrive_dead_letter(dead_letter_id)))


async def _approvals(answer: Any) -> CallToolResult:
    body: dict[str, Any] = await answer
    items = body.get("approvals", [])
    lines = [f"{len(items)} step(s) wait for approval."]
    lines += [
        f"- {a['approval_id']}: order {a['order_id']} seq {a['seq']} {a['event_type']} data {json.dumps(a['data'])} "
        f"(binds event_id {a['event_id']}, data_sha256 {a['data_sha256']}, process_version {a['process_version']}, "
        f"seq_id {a['seq_id']})"
        for a in items[:50]
    ]
    return result({"approvals": items}, "\n".join(lines))


async def _dead_letters(answer: Any) -> CallToolResult:
    body: dict[str, Any] = await answer
    items = body.get("dead_letters", [])
    lines = [f"{len(items)} dead letter(s)."]
    lines += [f"- {d['id']}: {d['code']} (order {d.get('order_id')})" for d in items[:50]]
    return result({"dead_letters": items}, "\n".join(lines))


async def _redriven(answer: Any) -> CallToolResult:
    body: dict[str, Any] = await answer
    outcome = body.get("result") or {}
    decision = outcome.get("decision")
    fields = {"dead_letter_id": body.get("dead_letter_id"), "decision": decision, "code": outcome.get("code")}
    text = f"Redriven: {decision}" + (f" ({outcome['code']})" if outcome.get("code") else "") + "."
    return result(fields, text, is_error=decision in ERROR_DECISIONS)


# --- results -----------------------------------------------------------------------------------------


def result(fields: dict[str, Any], text: str, *, is_error: bool = False) -> CallToolResult:
    """A tool's answer: the standard fields (None where they do not apply) and the tool's own."""
    structured = {key: None for key in STANDARD_FIELDS} | fields
    content = [TextContent(type="text", text=text)]
    return CallToolResult(content=content, structured_content=structured, is_error=is_error)


async def _call(answer: Any) -> CallToolResult:
    try:
        done: CallToolResult = await answer
    except BackendError as exc:
        return refusal(exc)
    return done


_CODE_HINTS = {
    "APPROVAL_MISMATCH": "Nothing was decided: call list_approvals and answer the approval of the step you mean.",
    "APPROVAL_NOT_PENDING": "The approval was answered already; list_approvals shows those still waiting.",
}


def refusal(exc: BackendError) -> CallToolResult:
    """A call the API refused: its code and message, and what to do about it."""
    hint = {
        401: "The API key is missing or unknown.",
        403: "This key may not do this: proposing steps needs an agent key of one tenant.",
        404: "Nothing of that name is visible to this key's tenant; start_plan opens a new order.",
        409: "Choose another order_id, or continue the existing order with propose_step.",
        429: "Too many calls for this key: wait a few seconds, then call again.",
    }.get(
        exc.status, "Check the call's arguments against describe_process." if exc.status < 500 else "Try again shortly."
    )
    hint = _CODE_HINTS.get(exc.code, hint)
    fields: dict[str, Any] = {"code": exc.code, "message": exc.message}
    if exc.quota:
        fields["quota"] = exc.quota
        hint = "The tenant stores as much as this quota allows: finish, abort or remove some first."
    return result(fields, f"{exc.code}: {_sentence(exc.message)} {hint}", is_error=True)


async def _list_processes(backend: Backend) -> CallToolResult:
    body = await backend.list_processes()
    processes = [
        {"name": p["name"], "version": p["version"], "description": p.get("description"), "steps": list(p["steps"])}
        for p in body["processes"]
    ]
    names = ", ".join(p["name"] for p in processes) or "none"
    return result({"processes": processes}, f"Processes: {names}. describe_process tells a process's steps and data.")


async def _describe(backend: Backend, name: str) -> CallToolResult:
    body = await backend.describe_process(name)
    initial = ", ".join(body.get("initial") or []) or "none"
    lines = [f"Process {body['name']} (version {body['version']}). A plan starts with: {initial}."]
    for step, spec in body["steps"].items():
        origins = ", ".join("start" if o is None else o for o in spec["from"])
        lines.append(f"- {step}: from {origins} to {spec['to']}")
    lines.append("ABORT_PLAN (abort_plan) ends a plan from any state that is not terminal.")
    return result(body, "\n".join(lines))


async def _start(backend: Backend, process: str, order_id: str | None, deadline_s: float | None) -> CallToolResult:
    body = await backend.start_plan(process, order_id, deadline_s)
    text = (
        f"Plan started: order_id {body['order_id']} follows process {body['process']}. "
        f"Propose its first step with propose_step (order_id {body['order_id']})."
    )
    return result({**body, "status": None, "last_seq": 0}, text)


async def _order(answer: Any) -> CallToolResult:
    body: dict[str, Any] = await answer
    status, last_seq = body.get("status"), body.get("last_seq")
    text = f"Order {body.get('order_id')}: status {status or 'not started'}, last applied step seq {last_seq}."
    if body.get("buffered"):
        text += f" Waiting steps: {body['buffered']}."
    return result({**body, "status": status, "last_seq": last_seq}, text)


async def _step(answer: Any) -> CallToolResult:
    _, body = await answer
    order = body.get("order") or {}
    fields = {
        **{k: v for k, v in body.items() if k != "order"},
        "status": order.get("status"),
        "last_seq": order.get("last_seq"),
    }
    decision = body["decision"]
    return result(fields, step_text(body), is_error=decision in ERROR_DECISIONS)


def step_text(body: dict[str, Any]) -> str:
    """What a step's decision means, and what to do next."""
    decision, seq = body["decision"], body.get("seq_id")
    order = body.get("order") or {}
    status, last_seq = order.get("status"), order.get("last_seq")
    where = f"the order is {status or 'not started'} at seq {last_seq}"
    nexts = body.get("next_steps")
    then = f" Next allowed steps: {', '.join(nexts)}." if nexts else ""
    if decision == "APPLY":
        return f"APPLY: the step was applied as seq {seq}; {where}.{then}"
    if decision == "REJECTED":
        check = f", check {body['check']}" if body.get("check") else ""
        return (
            f"REJECTED ({body.get('code')}{check}): {_sentence(body.get('message'))} Nothing changed: {where}. "
            "Correct the step and propose it again with a new idempotency_key."
        )
    if decision == "DUPLICATE":
        first = body.get("first") or {}
        was = first.get("decision")
        text = f"DUPLICATE: this call repeats an earlier one (first decided {was}); nothing was done again; {where}."
        if was == "REJECTED":
            text += (
                f" The first was rejected: {_sentence(first.get('message'))} Propose a corrected step with a new key."
            )
        return text + then
    if decision == "HELD":
        return (
            f"HELD: the step (seq {seq}) waits for a person's approval (approval_id {body.get('approval_id')}). "
            f"Do not resend it: call wait_for_order with after_seq {last_seq} to learn the outcome."
        )
    if decision == "BUFFER":
        return f"BUFFER: the step (seq {seq}) waits for an earlier step to finish; {where}. Call wait_for_order."
    if decision in ("DISCARD", "TOMBSTONE"):
        return f"{decision}: the plan was aborted or replaced; the step was not applied; {where}."
    return f"{decision} ({body.get('code')}): {_sentence(body.get('message'))} Nothing changed; {where}."


def _sentence(text: Any) -> str:
    """A message as a sentence of the answer (ending with a full stop)."""
    words = str(text or "").strip()
    return words if words.endswith((".", "!", "?")) or not words else words + "."
