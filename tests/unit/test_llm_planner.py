"""The LLM planner's pure parts: tools from the process definition, reading answers, escaping data,
settings, and the fake model's behaviours."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nexus.processes import builtin_catalog, describe
from nexus_lab.llm import behaviours as bh
from nexus_lab.llm import tools
from nexus_lab.llm.settings import LlmSettings, from_env
from nexus_wire.codes import AbortCode

PROCESS: dict[str, Any] = describe(builtin_catalog().get("order"))  # type: ignore[arg-type]


def test_tools_are_the_steps_allowed_next_with_their_data_schemas() -> None:
    """Before the order exists only OrderCreated is offered; after it, the next step and ABORT_PLAN, each with
    the JSON Schema of its data and the step's checks in its description."""
    first = tools.tools_for(PROCESS, None)
    assert [t["function"]["name"] for t in first] == ["OrderCreated"]
    params = first[0]["function"]["parameters"]
    assert params["type"] == "object" and {"items", "total_amount", "currency"} <= set(params["properties"])
    assert "$defs" not in json.dumps(params) and "$ref" not in json.dumps(params)
    assert "total_amount must equal" in first[0]["function"]["description"]
    paid = tools.tools_for(PROCESS, "inventory_validated")
    assert [t["function"]["name"] for t in paid] == ["PaymentProcessed", "ABORT_PLAN"]
    abort = paid[1]["function"]["parameters"]["properties"]["abort_code"]["enum"]
    assert AbortCode.PLANNER_GAVE_UP.value not in abort  # the planner's own code, not the model's
    assert tools.tools_for(PROCESS, "completed") == []


def test_read_answer_turns_bad_answers_into_rejected_proposals() -> None:
    """Invalid JSON arguments, a non-object, no tool call and prose in JSON mode are planner rejections,
    never exceptions; good calls and JSON-mode answers are proposals."""
    call = {"id": "c1", "type": "function", "function": {"name": "OrderShipped", "arguments": '{"carrier": "x"}'}}
    bad = {"id": "c2", "type": "function", "function": {"name": "OrderShipped", "arguments": '{"carrier": '}}
    listy = {"id": "c3", "type": "function", "function": {"name": "OrderShipped", "arguments": "[1]"}}
    [ok, broken, not_object] = tools.read_answer({"tool_calls": [call, bad, listy]}, json_mode=False)
    assert ok == tools.Proposal("OrderShipped", {"carrier": "x"}, "c1")
    assert isinstance(broken, tools.Unusable) and broken.code == tools.MALFORMED_PROPOSAL
    assert isinstance(not_object, tools.Unusable) and not_object.code == tools.MALFORMED_PROPOSAL
    [refused] = tools.read_answer({"content": "I cannot help"}, json_mode=False)
    assert isinstance(refused, tools.Unusable) and refused.code == tools.NO_STEP_PROPOSED
    [prose] = tools.read_answer({"content": "I cannot help"}, json_mode=True)
    assert isinstance(prose, tools.Unusable) and prose.code == tools.NO_STEP_PROPOSED
    [cut] = tools.read_answer({"content": '{"step": "OrderShipped", "data": {'}, json_mode=True)
    assert isinstance(cut, tools.Unusable) and cut.code == tools.MALFORMED_PROPOSAL
    two = tools.read_answer({"content": '{"steps": [{"step": "A", "data": {}}, {"step": "B"}]}'}, json_mode=True)
    assert two == [tools.Proposal("A", {}), tools.Proposal("B", {})]


def test_data_cannot_close_its_delimiters() -> None:
    """Text inside the order cannot end the <order> block or open a <state> of its own."""
    message = tools.first_user_message({"note": bh.INJECTION}, tools.state_of(None, 0, PROCESS))
    assert message.count("</order>") == 1 and message.count("<state>") == 1
    order, state, _ = bh.read_conversation([{"role": "user", "content": message}])
    assert order["note"] == bh.INJECTION
    assert state["allowed_next_steps"] == ["OrderCreated"]


def test_settings_read_the_documented_variables_and_keep_secrets_out_of_reports() -> None:
    """NEXUS_LLM_BASE_URL / _MODEL / _API_KEY / _EXTRA_HEADERS (JSON) and the budgets are read; flags win;
    the public view names no key and no header value."""
    env = {
        "NEXUS_LLM_BASE_URL": "https://openrouter.ai/api/v1",
        "NEXUS_LLM_MODEL": "m",
        "NEXUS_LLM_API_KEY": "sk-or-very-secret",
        "NEXUS_LLM_EXTRA_HEADERS": '{"X-Title": "nexus", "X-Token": "header-secret-value"}',
        "NEXUS_LLM_MAX_TOKENS": "1000",
        "NEXUS_LLM_MAX_REQUESTS": "7",
        "NEXUS_LLM_TEMPERATURE": "0.5",
    }
    s = from_env(env, model="flag-model", headers=["HTTP-Referer=https://nexus.dev"])
    assert (s.base_url, s.model, s.api_key, s.temperature) == (
        env["NEXUS_LLM_BASE_URL"],
        "flag-model",
        "sk-or-very-secret",
        0.5,
    )
    assert (s.max_tokens_per_run, s.max_requests_per_run, s.max_corrections) == (1000, 7, 3)
    assert s.extra_headers["HTTP-Referer"] == "https://nexus.dev"
    shown = json.dumps(s.public())
    assert "sk-or-very-secret" not in shown and "header-secret-value" not in shown and "sk-or" not in repr(s)
    assert set(s.secrets()) >= {"sk-or-very-secret", "header-secret-value"}
    with pytest.raises(ValueError, match="JSON object"):
        from_env({"NEXUS_LLM_EXTRA_HEADERS": "[1]"})
    with pytest.raises(ValueError, match="tool mode"):
        LlmSettings(tool_mode="xml")


def test_redact_removes_every_secret() -> None:
    """The last guard before a request leaves: a secret value anywhere in the messages is replaced."""
    assert tools.redact('{"a": "key sk-123456789 here"}', ["sk-123456789"]) == '{"a": "key [redacted] here"}'


def _conversation(state: dict[str, Any], *verdicts: dict[str, Any]) -> list[dict[str, Any]]:
    order = {"order_id": "o-1", "items": [{"product_id": "p", "quantity": 2, "unit_price": "5.00"}]}
    order |= {"total_amount": "10.00", "currency": "BRL", "user_id": "u"}
    messages: list[dict[str, Any]] = [{"role": "user", "content": tools.first_user_message(order, state)}]
    messages += [{"role": "tool", "tool_call_id": "c", "content": tools.as_data(v)} for v in verdicts]
    return messages


def _at(step_status: str | None) -> dict[str, Any]:
    return tools.state_of(step_status, 0, PROCESS)


REJECTED = {"decision": "REJECTED", "code": "CHECK_FAILED"}


@pytest.mark.parametrize(
    ("behaviour", "status", "expected_step", "changed"),
    [
        ("wrong_amount", "inventory_validated", "PaymentProcessed", {"amount": "11.0"}),
        ("wrong_currency", "inventory_validated", "PaymentProcessed", {"currency": "EUR"}),
        ("skipped_step", "created", "PaymentProcessed", {}),
        ("invented_step", "payment_processed", "OrderTeleported", {}),
        ("prompt_injection", None, "OrderCreated", {"note": bh.INJECTION}),
    ],
)
def test_each_misbehaviour_happens_once_then_the_fake_corrects(
    behaviour: str, status: str | None, expected_step: str, changed: dict[str, Any]
) -> None:
    """Each misbehaviour shows on its step's first try; after a rejection the fake proposes the right step."""
    first = bh.reply(behaviour, _conversation(_at(status)))
    [(name, raw)] = first.calls
    assert name == expected_step
    assert changed.items() <= json.loads(raw).items()
    right = tools.allowed_steps(PROCESS, status)[0]
    after = bh.reply(behaviour, _conversation(_at(status), {**REJECTED, **_at(status)}))
    assert after.calls[0][0] == right
    if behaviour != "prompt_injection":
        assert json.loads(after.calls[0][1]) == bh.correct_data(
            right, bh.read_conversation(_conversation(_at(status)))[0]
        )


def test_stubborn_behaviours_never_correct() -> None:
    """refusal answers prose at the payment and stubborn_amount the wrong amount, whatever the verdicts."""
    state = _at("inventory_validated")
    many = _conversation(state, *[{**REJECTED, **state}] * 5)
    assert bh.reply("refusal", many).text == bh.REFUSAL and not bh.reply("refusal", many).calls
    [(name, raw)] = bh.reply("stubborn_amount", many).calls
    assert name == "PaymentProcessed" and json.loads(raw)["amount"] == "11.0"


def test_step_after_completion_and_malformed_arguments() -> None:
    """step_after_completion sends OrderCompleted and OrderShipped in one answer; malformed_arguments sends
    arguments that are not JSON."""
    calls = bh.reply("step_after_completion", _conversation(_at("shipped"))).calls
    assert [c[0] for c in calls] == ["OrderCompleted", "OrderShipped"]
    [(name, raw)] = bh.reply("malformed_arguments", _conversation(_at("created"))).calls
    assert name == "InventoryValidated"
    with pytest.raises(ValueError):
        json.loads(raw)


def test_seeded_script_covers_every_behaviour() -> None:
    """`--seed` yields every behaviour at least once in 20 plans, the same for the same seed."""
    script = bh.script_for_seed("demo")
    assert set(script) == set(bh.BEHAVIOURS) and script == bh.script_for_seed("demo")
    assert script != bh.script_for_seed("other")


def test_the_planner_owns_seq_ids_event_ids_and_the_abort_position() -> None:
    """seq_id is last_seq + 1 whatever the model says; the same step and data give the same event_id, other
    data another; a model's ABORT_PLAN gets the plan's position (aborted_at_seq) from the planner."""
    from types import SimpleNamespace

    from nexus_lab.llm import planner

    ctx: Any = SimpleNamespace(settings=LlmSettings())
    state: Any = {"plan_id": "p", "order_id": "o", "last_seq": 2}
    a = planner._envelope(state, ctx, "PaymentProcessed", {"amount": 1, "seq_id": 9})
    b = planner._envelope(state, ctx, "PaymentProcessed", {"seq_id": 9, "amount": 1})
    c = planner._envelope(state, ctx, "PaymentProcessed", {"amount": 2})
    assert a["seq_id"] == 3 and a["event_id"] == b["event_id"] != c["event_id"]
    abort = planner._envelope(state, ctx, "ABORT_PLAN", {"abort_code": "manual", "aborted_at_seq": 99})
    assert "seq_id" not in abort and abort["data"]["aborted_at_seq"] == 2 and abort["data"]["reason"]
