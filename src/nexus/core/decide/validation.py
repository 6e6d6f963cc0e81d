"""Process validation: the process's part of the decision table, for a step that would apply. Pure.

| situation (on arrival, before its position is looked at)              | decision    | code          |
|-----------------------------------------------------------------------|-------------|---------------|
| data fails its step's JSON Schema in the order's process (`data_check`)   | DEAD_LETTER | INVALID_EVENT |
| a money field's amount has more than 28 digits in minor units         | DEAD_LETTER | INVALID_EVENT |

| situation (the step would apply: in turn, drained, or approved)       | decision | code               |
|-----------------------------------------------------------------------|----------|--------------------|
| step type unknown to the order's process (or the process unknown)     | REJECTED | UNKNOWN_STEP       |
| step type not allowed from the order's state                          | REJECTED | INVALID_TRANSITION |
| data fails the step's JSON Schema                                     | REJECTED | CHECK_FAILED (data)|
| a CEL check fails (or cannot be evaluated)                            | REJECTED | CHECK_FAILED / LIMIT_EXCEEDED |
| a step (seq > last_seq) after a terminal state other than aborted     | REJECTED | AFTER_TERMINAL     |
| the step's `approval.when` holds (or cannot be evaluated)             | HELD     | (see approvals.py) |

A step's data is judged on arrival by the process the order follows: the one it is pinned to, else (an
order not begun) the one its first step names (`process`, default `order`): a step that names it, or a
step at seq 1, or a later step of the same batch after such a one. A step arriving before its order's
first step, naming no process, is judged when it would apply (its data failing: REJECTED CHECK_FAILED,
check `data`). Only the order's process judges: a step named like a shipped one is held to its own
process's schema, never to the shipped one's.

The first failing check decides. The tenant's `limits` arrive in major units and reach CEL in the step's
minor unit. Terminal states come from the definition (`terminal`, and `aborted`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nexus.core import step_data
from nexus.core.checks import MAX_EXPONENT, exponent_of, money_problem
from nexus.core.envelope import EventEnvelope
from nexus.core.process_checks import validate_step
from nexus.core.process_model import ABORTED, CompiledProcess, Verdict
from nexus.errors import ErrorCode

__all__ = ["NoChecks", "StepChecks", "after_terminal", "data_verdict", "judge"]


def data_verdict(process: CompiledProcess | None, event: EventEnvelope) -> Verdict | None:
    """INVALID_EVENT (the fields' paths, never their values) when the step's data fails the JSON Schema of its
    step in `process`, or a money field holds an amount too long for a minor unit (`checks.money_problem`);
    None when it passes, or when there is nothing to judge it by (no process, a step type the process lacks:
    UNKNOWN_STEP later, a step with neither a schema nor money fields, a built-in step)."""
    if process is None or event.seq_id is None:
        return None
    compiled = process.steps.get(event.event_type)
    if compiled is None or (compiled.data_schema is None and not compiled.step.money):
        return None
    data = compiled.with_defaults(event.data)
    problem = None if compiled.data_schema is None else step_data.problem(compiled.data_schema, data)
    if problem is None and compiled.step.money:
        problem = money_problem(data, compiled.step.money, _arrival_exponent(process, data))
    return None if problem is None else Verdict(ErrorCode.INVALID_EVENT, problem)


def _arrival_exponent(process: CompiledProcess, data: Mapping[str, Any]) -> int:
    """The decimals of the step's currency when its data names one; else (the order's currency is not read on
    arrival) the most any currency has, so an amount let in converts whichever the order's is."""
    field = process.definition.currency_field
    return exponent_of(data[field]) if field in data else MAX_EXPONENT


def judge(
    process: CompiledProcess | None, name: str, state_status: str | None, facts: Mapping[str, Any],
    event_type: str, seq_id: int | None, data: Mapping[str, Any], limits: Mapping[str, Any],
    *, data_checked: bool = False,
) -> Verdict | None:  # fmt: skip
    """`validate_step` against the order's process, or UNKNOWN_STEP when process `name` is not registered;
    `data_checked`: the data passed `process`'s schema on arrival (not checked again)."""
    if process is None:
        return Verdict(ErrorCode.UNKNOWN_STEP, f"unknown process {name!r}: no definition is registered")
    return validate_step(process, state_status, facts, event_type, seq_id, data, limits, data_checked=data_checked)


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
        *, data_checked: bool = False,
    ) -> Verdict | None:  # fmt: skip
        return judge(process, name, status, facts, event_type, seq_id, data, limits, data_checked=data_checked)


class NoChecks(StepChecks):
    """No process validation (the validation benchmark's baseline): every step in turn applies, the order's
    states still coming from its process; nothing is REJECTED or HELD by a process."""

    checks = False

    def verdict(
        self, process: CompiledProcess | None, name: str, status: str | None, facts: Mapping[str, Any],
        event_type: str, seq_id: int | None, data: Mapping[str, Any], limits: Mapping[str, Any],
        *, data_checked: bool = False,
    ) -> Verdict | None:  # fmt: skip
        return None
