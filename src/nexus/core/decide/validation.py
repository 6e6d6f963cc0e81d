"""Process validation: the process's part of the decision table, for a step that would apply. Pure.

| situation (the step would apply: in turn, drained, or approved)       | decision | code               |
|-----------------------------------------------------------------------|----------|--------------------|
| step type unknown to the order's process (or the process unknown)     | REJECTED | UNKNOWN_STEP       |
| step type not allowed from the order's state                          | REJECTED | INVALID_TRANSITION |
| data fails the step's JSON Schema                                     | REJECTED | CHECK_FAILED (data)|
| a CEL check fails (or cannot be evaluated)                            | REJECTED | CHECK_FAILED / LIMIT_EXCEEDED |
| a step (seq > last_seq) after a terminal state other than aborted     | REJECTED | AFTER_TERMINAL     |
| the step's `approval.when` holds (or cannot be evaluated)             | HELD     | (see approvals.py) |

The first failing check decides. The tenant's `limits` arrive in major units and reach CEL in the step's
minor unit. Terminal states come from the definition (`terminal`, and `aborted`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nexus.core.checks import build_context, convert_money, exponent_of, pick, to_minor
from nexus.core.process_model import ABORT_STEP, ABORTED, CompiledProcess, Verdict
from nexus.errors import ErrorCode


def validate_step(
    process: CompiledProcess,
    status: str | None,
    facts: Mapping[str, Any],
    event_type: str,
    seq_id: int | None,
    data: Mapping[str, Any],
    limits: Mapping[str, Any],
) -> Verdict | None:
    """Why a step that would apply to an order in `status` must be REJECTED, or None to apply it.

    `status` is None before the order exists. Checks run in their declared order; the first that fails
    decides. The tenant's `limits` arrive in major units and reach CEL in the step's minor unit.
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
    data = compiled.with_defaults(data)
    if compiled.data_schema is not None and not compiled.data_schema.is_valid(data):
        error = next(iter(compiled.data_schema.iter_errors(data)))
        where = ".".join(str(p) for p in error.instance_path) or "data"
        return Verdict(ErrorCode.CHECK_FAILED, f"{where}: {error.message}", "data")
    if not compiled.rules:
        return None
    currency = data.get(process.definition.currency_field, facts.get(process.definition.currency_field))
    exponent = exponent_of(currency)
    used = compiled.fields
    variables: dict[str, Any] = {}
    if "data" in used:
        picked = pick(data, used["data"])
        variables["data"] = convert_money(picked, compiled.step.money, exponent) if compiled.step.money else picked
    if "order" in used:
        variables["order"] = pick(facts, used["order"])
    if "step" in used:
        variables["step"] = {"seq": seq_id or 0, "type": event_type}
    if "limits" in used:
        variables["limits"] = {k: _limit(v, exponent) for k, v in pick(limits, used["limits"]).items()}
    context = build_context(variables, with_sum=compiled.uses_sum)
    for check, rule in compiled.rules:
        if not rule.passes(context):
            code = ErrorCode(check.code)
            return Verdict(code, check.message or f"check {check.id} failed: {check.rule}", check.id)
    return None


def needs_approval(
    process: CompiledProcess,
    facts: Mapping[str, Any],
    event_type: str,
    seq_id: int | None,
    data: Mapping[str, Any],
    limits: Mapping[str, Any],
) -> bool:
    """issue 13: whether a step that passed `validate_step` must wait for a person (decided HELD).

    A step with `approval` and no `when` always waits; with `when`, it waits when the CEL condition is
    true, and also when it cannot be evaluated (fail safe: a person looks rather than nobody)."""
    compiled = process.steps.get(event_type)
    if compiled is None or compiled.step.approval is None:
        return False
    rule = compiled.approval_rule
    if rule is None:
        return True
    data = compiled.with_defaults(data)
    currency = data.get(process.definition.currency_field, facts.get(process.definition.currency_field))
    exponent = exponent_of(currency)
    variables = {
        "data": convert_money(data, compiled.step.money, exponent) if compiled.step.money else dict(data),
        "order": dict(facts),
        "step": {"seq": seq_id or 0, "type": event_type},
        "limits": {k: _limit(v, exponent) for k, v in limits.items()},
    }
    try:
        return bool(rule.evaluate({k: v for k, v in variables.items() if k in rule.names}))
    except Exception:  # noqa: BLE001 -- a condition that cannot be evaluated holds the step
        return True


def approval_expires_s(process: CompiledProcess, event_type: str) -> float | None:
    compiled = process.steps.get(event_type)
    if compiled is None or compiled.step.approval is None:
        return None
    return compiled.step.approval.expires_s


def _limit(value: Any, exponent: int) -> Any:
    return to_minor(value, exponent) if not isinstance(value, str) else value


def judge(
    process: CompiledProcess | None, name: str, state_status: str | None, facts: Mapping[str, Any],
    event_type: str, seq_id: int | None, data: Mapping[str, Any], limits: Mapping[str, Any],
) -> Verdict | None:  # fmt: skip
    """`validate_step` against the order's process, or UNKNOWN_STEP when process `name` is not registered."""
    if process is None:
        return Verdict(ErrorCode.UNKNOWN_STEP, f"unknown process {name!r}: no definition is registered")
    return validate_step(process, state_status, facts, event_type, seq_id, data, limits)


def after_terminal(
    process: CompiledProcess | None, order_id: str, status: str | None, last_seq: int, seq_id: int | None
) -> Verdict | None:
    """AFTER_TERMINAL for a step past the last seq of an order in a terminal state other than aborted."""
    if process is None or status is None or status == ABORTED or not process.is_terminal(status):
        return None
    if seq_id is None or seq_id <= last_seq:
        return None
    return Verdict(
        ErrorCode.AFTER_TERMINAL,
        f"order {order_id} is {status} at seq {last_seq}: no step may follow a terminal state",
    )


class StepChecks:
    """The process validation a gateway applies (injected): every step judged by its process."""

    checks = True

    def verdict(
        self, process: CompiledProcess | None, name: str, status: str | None, facts: Mapping[str, Any],
        event_type: str, seq_id: int | None, data: Mapping[str, Any], limits: Mapping[str, Any],
    ) -> Verdict | None:  # fmt: skip
        return judge(process, name, status, facts, event_type, seq_id, data, limits)


class NoChecks(StepChecks):
    """No process validation (the validation benchmark's baseline): every step in turn applies, the order's
    states still coming from its process; nothing is REJECTED or HELD by a process."""

    checks = False

    def verdict(
        self, process: CompiledProcess | None, name: str, status: str | None, facts: Mapping[str, Any],
        event_type: str, seq_id: int | None, data: Mapping[str, Any], limits: Mapping[str, Any],
    ) -> Verdict | None:  # fmt: skip
        return None
