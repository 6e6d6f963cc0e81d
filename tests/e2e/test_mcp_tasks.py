"""Approvals as durable MCP tasks, with the official client over streamable HTTP and our tasks requester
(nexus_lab.mcp_tasks): a HELD payment proposed by a client of the tasks extension answers a task that ends
with the step's final verdict on approve, deny and expiry; the task lives in PostgreSQL (a second `nexus serve`
answers it after the first stopped); a client without the extension gets today's HELD answer; another tenant's
task is NOT_FOUND; the approver's tools refuse an `expect` naming another step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from nexus.auth.roles import Role
from nexus.settings import Settings
from nexus_lab.mcp_client import answer_of, mcp_client
from nexus_lab.mcp_tasks import TaskCreated, TasksExtension, get_task, tool_result, wait_task
from tests.e2e.test_mcp import agent_key
from tests.e2e.test_mcp_roles import BIG
from tests.unit.test_approvals import approval_yaml

PAYMENT = {"payment_id": "p1", "amount": 1500, "currency": "USD"}


async def _call(session: Client, tool: str, **arguments: Any) -> tuple[dict[str, Any], str, bool]:
    return answer_of(await session.call_tool(tool, arguments))


async def _to_payment(session: Client, order_id: str, process: str = "order_reviewed") -> None:
    """An order of `process` at its payment (seq 3 next): created and validated."""
    await _call(session, "start_plan", process=process, order_id=order_id)
    for step, data in (("OrderCreated", BIG), ("InventoryValidated", {"warehouse_id": "w"})):
        answer, text, _ = await _call(session, "propose_step", order_id=order_id, step=step, data=data)
        assert answer["decision"] == "APPLY", text


async def _held_task(base: str, key: str, order_id: str, process: str = "order_reviewed") -> TaskCreated:
    """The payment of a fresh order proposed by a client of the tasks extension: answered as a task."""
    async with mcp_client(base, key, extensions=[TasksExtension()]) as session:
        await _to_payment(session, order_id, process)
        created = await session.session.call_tool(
            "propose_step",
            {"order_id": order_id, "step": "PaymentProcessed", "data": PAYMENT},
            allow_claimed=True,
        )
    assert isinstance(created, TaskCreated), created
    return created


async def test_a_held_step_is_a_task_that_completes_when_approved(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """The task is `working` while the payment waits; an approver's approve (after an `expect` of another seq
    is refused APPROVAL_MISMATCH, deciding nothing) applies it and the task completes with APPLY."""
    _, base = start_gateway("--no-dispatcher")
    agent = await agent_key(settings, "acme")
    approver = await agent_key(settings, "acme", frozenset({Role.APPROVER}))
    created = await _held_task(base, agent, "t-ok")
    assert created.task.status == "working" and created.task.poll_interval
    async with mcp_client(base, agent, extensions=[TasksExtension()]) as session:
        assert (await get_task(session.session, created.task.task_id)).status == "working"
    async with mcp_client(base, approver) as session:
        [held] = (await _call(session, "list_approvals"))[0]["approvals"]
        expect = {k: held[k] for k in ("event_id", "data_sha256", "process_version", "seq_id")}
        wrong, text, error = await _call(
            session, "approve", approval_id=held["approval_id"], expect={**expect, "seq_id": 4}
        )
        assert error and wrong["code"] == "APPROVAL_MISMATCH" and "seq_id is 3" in text, text
        approved, text, error = await _call(session, "approve", approval_id=held["approval_id"], expect=expect)
        assert not error and approved["decision"] == "APPLY", text
        assert approved["seq_id"] == 3 and "applied as seq 3" in text, text
    async with mcp_client(base, agent, extensions=[TasksExtension()]) as session:
        state = await wait_task(session.session, created.task.task_id, timeout_s=30)
    final, text, error = answer_of(tool_result(state))
    assert state.status == "completed" and not error
    assert (final["decision"], final["seq_id"], final["last_seq"]) == ("APPLY", 3, 3), text


async def test_a_denied_step_ends_its_task_rejected_approval_denied(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """`Client.call_tool` with the tasks extension waits through the task: the approver denies meanwhile and
    the call returns REJECTED APPROVAL_DENIED."""
    _, base = start_gateway("--no-dispatcher")
    agent = await agent_key(settings, "acme")
    approver = await agent_key(settings, "acme", frozenset({Role.APPROVER}))
    answers: list[Any] = []

    async def propose() -> None:
        async with mcp_client(base, agent, extensions=[TasksExtension(timeout_s=60)]) as session:
            await _to_payment(session, "t-no")
            answers.append(
                await session.call_tool(
                    "propose_step", {"order_id": "t-no", "step": "PaymentProcessed", "data": PAYMENT}
                )
            )

    async def deny() -> None:
        async with mcp_client(base, approver) as session:
            with anyio.fail_after(30):
                while not (listed := (await _call(session, "list_approvals"))[0]["approvals"]):
                    await anyio.sleep(0.2)
            denied, text, _ = await _call(session, "deny", approval_id=listed[0]["approval_id"])
            assert denied["code"] == "APPROVAL_DENIED", text

    async with anyio.create_task_group() as group:
        group.start_soon(propose)
        group.start_soon(deny)
    final, text, error = answer_of(answers[0])
    assert error and (final["decision"], final["code"]) == ("REJECTED", "APPROVAL_DENIED"), text


async def test_an_expired_approval_ends_its_task_rejected(start_gateway, settings: Settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Unanswered past its expires_s, the approval expires and the task ends REJECTED APPROVAL_DENIED."""
    folder = tmp_path / "processes"
    folder.mkdir()
    (folder / "soon.yaml").write_text(approval_yaml(expires_s=1.0, name="soon"), encoding="utf-8")
    _, base = start_gateway("--no-dispatcher", settings_=settings.replace(process_dir=folder, approval_sweep_s=0.1))
    agent = await agent_key(settings, "acme")
    created = await _held_task(base, agent, "t-late", process="soon")
    async with mcp_client(base, agent, extensions=[TasksExtension()]) as session:
        state = await wait_task(session.session, created.task.task_id, timeout_s=30)
    final, text, error = answer_of(tool_result(state))
    assert state.status == "failed" and error
    assert (final["decision"], final["code"]) == ("REJECTED", "APPROVAL_DENIED") and "expired" in text, text


@pytest.mark.processes
async def test_a_task_outlives_its_gateway(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """A task made by one `nexus serve` is answered by a second one on the same database after the first
    stopped: working, then completed once approved through the second."""
    first, base = start_gateway("--no-dispatcher")
    agent = await agent_key(settings, "acme")
    approver = await agent_key(settings, "acme", frozenset({Role.APPROVER}))
    created = await _held_task(base, agent, "t-restart")
    first.terminate()
    _, other = start_gateway("--no-dispatcher")
    async with mcp_client(other, agent, extensions=[TasksExtension()]) as session:
        assert (await get_task(session.session, created.task.task_id)).status == "working"
    async with mcp_client(other, approver) as session:
        [held] = (await _call(session, "list_approvals"))[0]["approvals"]
        await _call(session, "approve", approval_id=held["approval_id"])
    async with mcp_client(other, agent, extensions=[TasksExtension()]) as session:
        state = await wait_task(session.session, created.task.task_id, timeout_s=30)
    assert state.status == "completed" and answer_of(tool_result(state))[0]["decision"] == "APPLY"


async def test_without_tasks_a_held_step_answers_as_before(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """A client that did not declare the tasks extension gets the HELD tool result telling it to wait."""
    _, base = start_gateway("--no-dispatcher")
    agent = await agent_key(settings, "acme")
    async with mcp_client(base, agent) as session:
        await _to_payment(session, "t-plain")
        held, text, error = await _call(
            session, "propose_step", order_id="t-plain", step="PaymentProcessed", data=PAYMENT
        )
    assert not error and held["decision"] == "HELD" and held["approval_id"] and "wait_for_order" in text


async def test_another_tenants_task_is_not_found(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """tasks/get of acme's task with globex's key: -32602 with the API's error shape, code NOT_FOUND, as for
    a task that does not exist."""
    _, base = start_gateway("--no-dispatcher")
    created = await _held_task(base, await agent_key(settings, "acme"), "t-mine")
    globex = await agent_key(settings, "globex")
    async with mcp_client(base, globex, extensions=[TasksExtension()]) as session:
        errors = []
        for task_id in (created.task.task_id, "00000000-0000-4000-8000-000000000000"):
            with pytest.raises(MCPError) as refused:
                await get_task(session.session, task_id)
            errors.append(refused.value.error)
    assert [e.code for e in errors] == [-32602, -32602]
    assert [e.data["code"] for e in errors] == ["NOT_FOUND", "NOT_FOUND"]  # type: ignore[index]
    assert errors[0].message.replace(created.task.task_id, "X") == errors[1].message.replace(
        "00000000-0000-4000-8000-000000000000", "X"
    )


async def test_an_abort_ends_the_task_and_a_repeat_gets_a_task(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """The same proposal repeated with its idempotency key answers a task of the same approval; the agent's
    abort_plan drops the held step and both tasks end failed with DISCARD."""
    _, base = start_gateway("--no-dispatcher")
    agent = await agent_key(settings, "acme")
    arguments = {"order_id": "t-abort", "step": "PaymentProcessed", "data": PAYMENT, "idempotency_key": "pay-1"}
    async with mcp_client(base, agent, extensions=[TasksExtension()]) as session:
        await _to_payment(session, "t-abort")
        tasks = [await session.session.call_tool("propose_step", arguments, allow_claimed=True) for _ in range(2)]
        assert all(isinstance(t, TaskCreated) for t in tasks), tasks
        aborted, text, _ = await _call(session, "abort_plan", order_id="t-abort", reason="customer cancelled")
        assert aborted["decision"] == "APPLY", text
        states = [await wait_task(session.session, t.task.task_id, timeout_s=30) for t in tasks]  # type: ignore[union-attr]
    for state in states:
        final, text, error = answer_of(tool_result(state))
        assert state.status == "failed" and error and final["decision"] == "DISCARD", text
