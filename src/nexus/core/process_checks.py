"""Judging one step against its process's definition: transitions, the data's JSON Schema, the CEL checks,
and whether it needs a person's approval. The decision table's use of them is `core/decide/validation.py`.
Pure: no I/O."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from nexus.core import step_data
from nexus.core.checks import (
    build_context,
    element_fields_used,
    exponent_of,
    fields_used,
    money_problem,
    pick,
    pick_money,
    to_minor,
)
from nexus.core.list_handles import ListHandles
from nexus.core.list_limits import CHECK_ID as LIST_CHECK_ID
from nexus.core.list_limits import list_limit_message
from nexus.core.process_model import CompiledProcess, CompiledStep, Verdict
from nexus.errors import ErrorCode
from nexus_wire.codes import ABORT_STEP


def validate_step(
    process: CompiledProcess,
    status: str | None,
    facts: Mapping[str, Any],
    event_type: str,
    seq_id: int | None,
    data: Mapping[str, Any],
    limits: Mapping[str, Any],
    *,
    data_checked: bool = False,
) -> Verdict | None:
    """Why a step that would apply to an order in `status` must be REJECTED, or None to apply it.

    `status` is None before the order exists. Checks run in their declared order; the first that fails
    decides. The tenant's `limits` arrive in major units and reach CEL in the step's minor unit.
    `data_checked`: this data already passed this process's schema of the step (on arrival,
    `validation.data_verdict`), so it is not checked again.
    """
    compiled = process.steps.get(event_type)
    if compiled is None:
        known = ", ".join(sorted(process.steps))
        return Verdict(
            ErrorCode.UNKNOWN_STEP,
            f"{event_type} is not a step of process {process.name} v{process.version} (its steps: {known})",
        )
    if status not in compiled.step.from_:
        nexts = [*process.allowed.get(status, ()), *([] if status is None else [ABORT_STEP])]
        return Verdict(
            ErrorCode.INVALID_TRANSITION,
            f"{event_type} is not allowed from state {status or 'none (the order does not exist yet)'}; "
            f"allowed next steps: {', '.join(nexts) or 'none'}",
        )
    if (too_long := list_limit_message(data, process.definition.max_list_items, limits)) is not None:
        return Verdict(ErrorCode.LIMIT_EXCEEDED, too_long, LIST_CHECK_ID)
    schema, money = (None, ()) if data_checked else (compiled.data_schema, compiled.step.money)
    if schema is None and not money and not compiled.rules:
        return None
    data = compiled.with_defaults(data)
    if schema is not None and (problem := step_data.problem(schema, data)) is not None:
        return Verdict(ErrorCode.CHECK_FAILED, problem, "data")
    if money and (problem := money_problem(data, money, _exponent(process, data, facts))) is not None:
        return Verdict(ErrorCode.CHECK_FAILED, problem, "data")
    if not compiled.rules:
        return None
    variables = _variables(
        process, compiled, compiled.fields, compiled.elements, facts, event_type, seq_id, data, limits
    )
    handles = _hold_lists(compiled, variables)
    context = build_context(variables, with_sum=compiled.uses_sum, handles=handles)
    for check, rule in compiled.rules:
        if not rule.passes(context):
            code = ErrorCode(check.code)
            return Verdict(code, check.message or f"check {check.id} failed: {check.rule}", check.id)
    return None


def _hold_lists(compiled: CompiledStep, variables: dict[str, Any]) -> ListHandles | None:
    """Hold by handle (core/list_handles.py) the lists the step's rules read only through `sum`,
    `same_items` or `has`, in the variables read by field (a variable read whole keeps its lists)."""
    held = [name for name in compiled.elements if name in variables and compiled.fields.get(name) is not None]
    if not held:
        return None
    handles = ListHandles()
    for name in held:
        variables[name] = handles.hold_fields(variables[name], compiled.elements[name])
    return handles


def needs_approval(
    process: CompiledProcess,
    facts: Mapping[str, Any],
    event_type: str,
    seq_id: int | None,
    data: Mapping[str, Any],
    limits: Mapping[str, Any],
) -> bool:
    """Whether a step that passed `validate_step` must wait for a person (decided HELD).

    A step with `approval` and no `when` always waits; with `when`, it waits when the CEL condition is
    true, and also when it cannot be evaluated (fail safe: a person looks rather than nobody)."""
    compiled = process.steps.get(event_type)
    if compiled is None or compiled.step.approval is None:
        return False
    rule = compiled.approval_rule
    if rule is None:
        return True
    used, elements = _fields_of(rule.source)  # as validate_step: only what the condition reads is converted
    data = compiled.with_defaults(data)
    variables = _variables(process, compiled, used, elements, facts, event_type, seq_id, data, limits)
    try:
        return bool(rule.evaluate(variables))
    except Exception:  # noqa: BLE001 -- a condition that cannot be evaluated holds the step
        return True


def _variables(
    process: CompiledProcess, compiled: CompiledStep, used: Mapping[str, frozenset[str] | None],
    elements: Mapping[str, Mapping[str, frozenset[str]]], facts: Mapping[str, Any], event_type: str,
    seq_id: int | None, data: Mapping[str, Any], limits: Mapping[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """The CEL variables `used` names, each with only the fields read (None: whole; of the lists in
    `elements`, their maps' fields read), money in minor units: converting into CEL is what costs (tens
    of us for a list of items), evaluating a compiled rule a few."""
    exponent = _exponent(process, data, facts)
    variables: dict[str, Any] = {}
    if "data" in used:
        variables["data"] = pick_money(data, used["data"], elements.get("data"), compiled.step.money, exponent)
    if "order" in used:
        variables["order"] = pick(facts, used["order"], elements.get("order"))
    if "step" in used:
        variables["step"] = {"seq": seq_id or 0, "type": event_type}
    if "limits" in used:
        variables["limits"] = {k: _limit(v, exponent) for k, v in pick(limits, used["limits"]).items()}
    return variables


@functools.lru_cache(maxsize=256)
def _fields_of(
    source: str,
) -> tuple[dict[str, frozenset[str] | None], dict[str, dict[str, frozenset[str]]]]:
    """The variables a condition mentions and their fields read (`checks.fields_used`,
    `checks.element_fields_used`), once per source."""
    return fields_used([source]), element_fields_used([source])


def _exponent(process: CompiledProcess, data: Mapping[str, Any], facts: Mapping[str, Any]) -> int:
    """The decimals of the step's currency: its data's, else the order's."""
    field = process.definition.currency_field
    return exponent_of(data.get(field, facts.get(field)))


def approval_expires_s(process: CompiledProcess, event_type: str) -> float | None:
    compiled = process.steps.get(event_type)
    if compiled is None or compiled.step.approval is None:
        return None
    return compiled.step.approval.expires_s


def _limit(value: Any, exponent: int) -> Any:
    return to_minor(value, exponent) if not isinstance(value, str) else value
