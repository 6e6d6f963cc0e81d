"""`make demo-mcp`: an agent that knows nothing of Nexus but MCP completes an order through the gateway.

Starts `nexus serve` (embedded PostgreSQL in a temporary --data-dir) and `nexus fake-llm --behaviours
mcp_agent` (a model that hallucinates a step once and retries a call once), makes agent keys for two
tenants, and runs a minimal MCP host: the official `mcp` client (protocol 2026-07-28) lists the gateway's
tools at `/mcp`, offers them to the model through the `openai` client, and calls whatever the model asks
for, until the model answers in words. Prints every call with the gateway's answer, the order's decision
log, and what another tenant's key sees. Then an approval answered as a task: the host declares the tasks
extension (nexus_lab.mcp_tasks), the model proposes a payment of 1,500.00 in the `order_reviewed` process,
the gateway holds it and answers a task; a person's approver key (its own MCP client) lists the approval
with what it binds and approves it, expecting exactly that step; the task completes with APPLY and the
model goes on. Stops everything it started.

    python -m nexus_lab.mcp_demo [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import httpx
from mcp import Client
from openai import AsyncOpenAI

from nexus.auth.roles import Role
from nexus_lab.mcp_client import answer_of, mcp_client
from nexus_lab.mcp_tasks import TaskCreated, TasksExtension, tool_result, wait_task
from nexus_lab.procs import Workspace, free_port, new_keys, nexus, wait_ready
from nexus_lab.tables import text_table

ORDER = {
    "order_id": "mcp-demo-1",
    "user_id": "u-1",
    "items": [{"product_id": "book", "quantity": 2, "unit_price": 12.5}],
    "total_amount": 25,
    "currency": "USD",
}
LARGE = {
    "order_id": "mcp-demo-2",
    "process": "order_reviewed",
    "user_id": "u-2",
    "items": [{"product_id": "piano", "quantity": 1, "unit_price": 1500}],
    "total_amount": 1500,
    "currency": "USD",
}


async def run_host(session: Client, model: AsyncOpenAI, prompt: str, max_turns: int = 20) -> str:
    """A minimal MCP host: the model sees the server's tools and the results of the calls it asks for."""
    listed = (await session.list_tools()).tools
    tools: Any = [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}
        for t in listed
    ]
    messages: list[Any] = [{"role": "user", "content": prompt}]
    for _ in range(max_turns):
        answer = (await model.chat.completions.create(model="nexus-fake-1", messages=messages, tools=tools)).choices[0]
        message = answer.message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content or ""
        for call in message.tool_calls:
            arguments = json.loads(call.function.arguments or "{}")  # type: ignore[union-attr]  # the fake model answers tool calls only
            shown = {k: v for k, v in arguments.items() if k != "data"}
            print(f"  -> {call.function.name}({json.dumps(shown)})")  # type: ignore[union-attr]  # the fake model answers tool calls only
            _, text, is_error = answer_of(await call_tool(session, call.function.name, arguments))  # type: ignore[union-attr]  # the fake model answers tool calls only
            print(f"     {'ERROR ' if is_error else ''}{text}", flush=True)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    return "(the model did not finish)"


async def call_tool(session: Client, name: str, arguments: dict[str, Any]) -> Any:
    """A tool call as the host makes it; answered as a task (a held step), the task is followed to its end."""
    answer = await session.session.call_tool(name, arguments, allow_claimed=True)
    if not isinstance(answer, TaskCreated):
        return answer
    print(f"     TASK {answer.task.task_id}: {answer.task.status} ({answer.task.status_message})", flush=True)
    state = await wait_task(session.session, answer.task.task_id, timeout_s=60)
    print(f"     TASK {state.task_id}: {state.status}", flush=True)
    return tool_result(state)


async def approve_one(gateway: str, key: str) -> bool:
    """A person at an MCP client with an approver key: waits for a held step, reads what the approval binds,
    and approves it expecting exactly that step."""
    async with mcp_client(gateway, key) as session:
        for _ in range(300):
            listed, _, _ = answer_of(await session.call_tool("list_approvals", {}))
            if listed.get("approvals"):
                break
            await asyncio.sleep(0.2)
        else:
            return False
        held = listed["approvals"][0]
        expect = {k: held[k] for k in ("event_id", "data_sha256", "process_version", "seq_id")}
        print(
            f"  [approver] list_approvals: {held['event_type']} of {held['order_id']}, data {json.dumps(held['data'])}"
        )
        print(f"  [approver] approve({held['approval_id']}, expect={json.dumps(expect)})")
        done, text, is_error = answer_of(
            await session.call_tool("approve", {"approval_id": held["approval_id"], "expect": expect})
        )
        print(f"  [approver] {'ERROR ' if is_error else ''}{text}", flush=True)
        return done.get("decision") == "APPLY"


async def large_payment(gateway: str, agent: str, approver: str, model: AsyncOpenAI) -> bool:
    """The model proposes a large payment through a host of the tasks extension; the approver approves."""
    prompt = f"Run this order through the gateway's order process, step by step: <order>{json.dumps(LARGE)}</order>"
    async with mcp_client(gateway, agent, extensions=[TasksExtension()]) as session:
        host = asyncio.create_task(run_host(session, model, prompt))
        approved = await approve_one(gateway, approver)
        final = await host
        print(f"  model: {final}\n")
        order, _, _ = answer_of(await session.call_tool("get_order", {"order_id": LARGE["order_id"]}))
    return approved and order.get("status") == "completed"


async def _main(args: argparse.Namespace) -> int:
    started = time.monotonic()
    work = Workspace("nexus-demo-mcp-", keep=args.keep)
    tmp, env, children = work.dir, work.env, work.children
    llm_port, http_port = free_port(), free_port()
    print(f"nexus demo-mcp: working in {tmp}", flush=True)
    with work:
        fake = ["fake-llm", "--port", str(llm_port), "--behaviours", "mcp_agent", "--log", str(tmp / "fake.jsonl")]
        children.append(nexus("fake-llm", fake, env, tmp / "fake-llm.out").start())
        serve = ["serve", "--data-dir", str(tmp / "data"), "--http-port", str(http_port), "--no-dispatcher"]
        children.append(nexus("gateway", serve, {**env, "NEXUS_LOG_LEVEL": "WARNING"}, tmp / "serve.out").start())
        await wait_ready(children[0], f"http://127.0.0.1:{llm_port}/healthz", 20)
        gateway = f"http://127.0.0.1:{http_port}"
        await wait_ready(children[1], gateway + "/readyz", 45)
        acme, globex, approver = await new_keys(
            tmp / "data", ("acme", Role.AGENT, None), ("globex", Role.AGENT, None), ("acme", Role.APPROVER, "alice")
        )
        print(
            f"  gateway on {gateway} (MCP at {gateway}/mcp), ready at {time.monotonic() - started:.1f}s; "
            f"fake model on :{llm_port}; agent keys for tenants acme and globex\n",
            flush=True,
        )
        agent_started = time.monotonic()
        prompt = f"Run this order through the gateway's order process, step by step: <order>{json.dumps(ORDER)}</order>"
        model = AsyncOpenAI(base_url=f"http://127.0.0.1:{llm_port}/v1", api_key="sk-demo", max_retries=0)
        print("An MCP agent of tenant acme (its model hallucinates once and retries once):")
        async with mcp_client(gateway, acme) as session:
            print(f"  (MCP protocol {session.protocol_version})")
            final = await run_host(session, model, prompt)
            print(f"  model: {final}\n")
            order, _, _ = answer_of(await session.call_tool("get_order", {"order_id": ORDER["order_id"]}))
        print("An approval answered as a task (the host declares the tasks extension; alice holds an approver key):")
        large_ok = await large_payment(gateway, acme, approver, model)
        await model.close()
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {acme}"}) as http:
            history = (await http.get(f"{gateway}/v1/orders/{ORDER['order_id']}/history")).json()["items"]
        rows = [(h.get("seq") or "-", h.get("event_type"), h["decision"], h.get("code") or "-") for h in history]
        print(text_table("The order's decision log (hash-chained)", ["seq", "step", "decision", "code"], rows, "rlll"))
        print()
        async with mcp_client(gateway, globex) as other:
            _, seen, refused = answer_of(await other.call_tool("get_order", {"order_id": ORDER["order_id"]}))
        print(f"Tenant globex asks for the same order: {seen}")
        ok = order.get("status") == "completed" and refused and large_ok
        agent_s = time.monotonic() - agent_started
        print(f"\norder {order.get('status')} at seq {order.get('last_seq')}: the agent took {agent_s:.1f}s, "
              f"the whole demo {time.monotonic() - started:.1f}s")  # fmt: skip
        if args.keep:
            print(f"logs kept in {tmp}")
        return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nexus_lab.mcp_demo", description=__doc__)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    return asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
