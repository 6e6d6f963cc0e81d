"""The fake model's `mcp_agent` behaviour (nexus_lab.llm.behaviours.mcp_reply), and the MCP tools' texts."""

from __future__ import annotations

import json
from typing import Any

from nexus.mcp.server import step_text
from nexus_lab.llm.behaviours import mcp_reply

ORDER = {"order_id": "o-1", "user_id": "u", "items": [], "total_amount": 10, "currency": "USD"}


def _conversation(answers: list[str]) -> list[dict[str, Any]]:
    """The conversation after the model's calls so far were answered with `answers` (tool result texts)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"<order>{json.dumps(ORDER)}</order>"}]
    for n, text in enumerate(answers):
        reply = mcp_reply(messages)
        assert reply.calls, f"the model stopped after {n} answers"
        name, arguments = reply.calls[0]
        call = {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": arguments}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": text})
    return messages


def _next(answers: list[str]) -> tuple[str, dict[str, Any]]:
    reply = mcp_reply(_conversation(answers))
    name, arguments = reply.calls[0]
    return name, json.loads(arguments)


def test_the_mcp_agent_starts_hallucinates_corrects_and_retries_once() -> None:
    """start_plan; OrderCreated; PaymentProcessed out of turn; once REJECTED, InventoryValidated; then the same
    call again (same key); then the next step; never a sequence number."""
    assert _next([]) == ("start_plan", {"process": "order", "order_id": "o-1"})
    assert _next(["Plan started"])[1]["step"] == "OrderCreated"
    assert _next(["Plan started", "APPLY: seq 1"])[1]["step"] == "PaymentProcessed"
    fixed = _next(["Plan started", "APPLY: seq 1", "REJECTED (INVALID_TRANSITION): ..."])[1]
    assert fixed["step"] == "InventoryValidated" and "seq_id" not in fixed
    answers = ["Plan started", "APPLY: seq 1", "REJECTED (INVALID_TRANSITION): ...", "APPLY: seq 2"]
    assert _next(answers)[1] == fixed  # the retried call: same arguments, same idempotency key
    assert _next([*answers, "DUPLICATE: repeats"])[1]["step"] == "PaymentProcessed"


def test_the_mcp_agent_reads_json_results_and_ends_in_words() -> None:
    """Tool results given as JSON (structured content) are read too; after get_order the model answers text."""
    answers = ["{}", '{"decision": "APPLY"}', '{"decision": "REJECTED"}', '{"decision": "APPLY"}']
    answers += ['{"decision": "DUPLICATE"}'] + ['{"decision": "APPLY"}'] * 3
    assert _next(answers) == ("get_order", {"order_id": "o-1"})
    final = mcp_reply(_conversation([*answers, '{"status": "completed", "last_seq": 5}']))
    assert final.text is not None and "completed" in final.text and not final.calls


def test_step_texts_say_what_to_do_next_without_echoing_input() -> None:
    """REJECTED asks for a corrected step with a new key; HELD says to wait; DUPLICATE names the first verdict."""
    order = {"status": "created", "last_seq": 1}
    rejected = step_text(
        {"decision": "REJECTED", "code": "CHECK_FAILED", "check": "c1", "message": "amount must match", "order": order}
    )
    assert rejected.startswith("REJECTED (CHECK_FAILED, check c1): amount must match.")
    assert "new idempotency_key" in rejected
    held = step_text({"decision": "HELD", "seq_id": 2, "approval_id": "a-1", "order": order})
    assert "wait_for_order" in held and "Do not resend" in held
    duplicate = step_text({"decision": "DUPLICATE", "first": {"decision": "APPLY"}, "order": order})
    assert "first decided APPLY" in duplicate
    assert "secret-input" not in step_text({"decision": "APPLY", "seq_id": 2, "order": order, "data": "secret-input"})
