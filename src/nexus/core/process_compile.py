"""Compiling a process definition: YAML text validated against the definition schema, then checked for
what a schema cannot see (unknown states, terminal states with outgoing steps, CEL syntax), every rule
compiled once. Pure: YAML arrives as text."""

from __future__ import annotations

from typing import Any

import jsonschema
import yaml
from pydantic import ValidationError

from nexus.core import step_data
from nexus.core.checks import CheckSyntaxError, CompiledRule, element_fields_used, fields_used
from nexus.core.process_model import (
    ABORTED,
    BUILTIN_STEPS,
    CompiledProcess,
    CompiledStep,
    DefinitionError,
    ProcessDefinition,
    Step,
    content_hash,
)
from nexus.core.rule_cost import costly_rules
from nexus.core.saga import effect_layout_problem


def definition_schema() -> dict[str, Any]:
    """The JSON Schema of a definition file (exported to src/nexus/processes/schema.json and schemas/)."""
    schema = ProcessDefinition.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://nexus.dev/schemas/process.json"
    return schema


_SCHEMA_VALIDATOR = jsonschema.Draft202012Validator(definition_schema())


def compile_definition(text: str, *, judge_cost: bool = True) -> CompiledProcess:
    """Parse, validate and compile a definition from its YAML text; raise `DefinitionError` with a line.

    `judge_cost` False: a definition registered before its rules' cost was judged, loaded as accepted then
    (its orders are pinned to it)."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise DefinitionError(f"YAML syntax error: {problem}", mark.line + 1 if mark else None) from exc
    if not isinstance(raw, dict):
        raise DefinitionError("a process definition is a YAML mapping", 1)
    errors = sorted(_SCHEMA_VALIDATOR.iter_errors(raw), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = ".".join(str(p) for p in first.absolute_path) or "definition"
        raise DefinitionError(f"{where}: {first.message}", _line_of(text, list(first.absolute_path)))
    try:
        definition = ProcessDefinition.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        path = [p for p in err["loc"]]
        raise DefinitionError(f"{'.'.join(map(str, path))}: {err['msg']}", _line_of(text, path)) from exc
    return _compile(definition, text, judge_cost)


def _compile(definition: ProcessDefinition, text: str, judge_cost: bool = True) -> CompiledProcess:
    states = set(definition.states) | {ABORTED}
    terminal = set(definition.terminal) | {ABORTED}
    for state in definition.terminal:
        if state not in set(definition.states):
            raise DefinitionError(f"terminal state {state!r} is not one of the states", _line_of(text, ["terminal"]))
    steps: dict[str, CompiledStep] = {}
    allowed: dict[str | None, list[str]] = {}
    for name, step in definition.steps.items():
        where = ["steps", name]
        if name in BUILTIN_STEPS:
            raise DefinitionError(f"{name} is built in and cannot be redefined", _line_of(text, where))
        if step.to not in states:
            raise DefinitionError(f"step {name} leads to unknown state {step.to!r}", _line_of(text, [*where, "to"]))
        for origin in step.from_:
            if origin is not None and origin not in states:
                raise DefinitionError(
                    f"step {name} starts from unknown state {origin!r}", _line_of(text, [*where, "from"])
                )
            if origin in terminal:
                raise DefinitionError(
                    f"terminal state {origin!r} has an outgoing step {name} (a terminal state ends the process)",
                    _line_of(text, [*where, "from"]),
                )
            allowed.setdefault(origin, []).append(name)
        steps[name] = _compile_step(name, step, text)
    for where, reason in costly_rules(definition) if judge_cost else ():
        raise DefinitionError(reason, _line_of(text, where))
    layout = effect_layout_problem(definition.steps)
    if layout is not None:
        step_name, reason = layout
        raise DefinitionError(reason, _line_of(text, ["steps", step_name] if step_name else ["steps"]))
    if None not in allowed:
        raise DefinitionError("no initial step: at least one step needs `from: [null]`", _line_of(text, ["steps"]))
    return CompiledProcess(
        definition=definition,
        content_hash=content_hash(text),
        steps=steps,
        allowed={k: tuple(v) for k, v in allowed.items()},
        terminal_states=frozenset(terminal),
    )


def _compile_step(name: str, step: Step, text: str) -> CompiledStep:
    """One step's rules, data schema and approval condition, compiled once."""
    where = ["steps", name]
    rules = []
    seen: set[str] = set()
    for i, check in enumerate(step.checks):
        if check.id in seen:
            raise DefinitionError(
                f"step {name}: duplicate check id {check.id!r}", _line_of(text, [*where, "checks", i])
            )
        seen.add(check.id)
        try:
            rules.append((check, CompiledRule.compile(check.rule)))
        except CheckSyntaxError as exc:
            raise DefinitionError(
                f"step {name}, check {check.id}: CEL syntax error: {exc}", _line_of(text, [*where, "checks", i])
            ) from exc
    try:
        if step.data:
            jsonschema.Draft202012Validator.check_schema(step.data)
        # The Rust validator checks a step's data in < 1 us; `jsonschema` took ~80 us per step.
        validator = step_data.data_validator(step.data) if step.data else None
    except jsonschema.SchemaError as exc:
        raise DefinitionError(
            f"step {name}: data is not a JSON Schema: {exc.message}", _line_of(text, [*where, "data"])
        ) from exc
    properties = step.data.get("properties", {}) if isinstance(step.data, dict) else {}
    defaults = {k: v["default"] for k, v in properties.items() if isinstance(v, dict) and "default" in v}
    approval_rule = None
    if step.approval is not None and step.approval.when:
        try:
            approval_rule = CompiledRule.compile(step.approval.when)
        except CheckSyntaxError as exc:
            raise DefinitionError(
                f"step {name}, approval.when: CEL syntax error: {exc}", _line_of(text, [*where, "approval"])
            ) from exc
    fields = fields_used(r.source for _, r in rules)
    uses_sum = any(r.uses_sum for _, r in rules)
    elements = element_fields_used(r.source for _, r in rules)
    return CompiledStep(
        name, step, tuple(rules), validator, defaults, fields, uses_sum, approval_rule=approval_rule, elements=elements
    )


def _line_of(text: str, path: list[Any]) -> int | None:
    """The line of the YAML node at `path` (or of its deepest existing ancestor)."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = node.start_mark.line + 1 if node is not None else None
    for part in path:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == str(part)), None)
            key = next((k for k, _ in node.value if k.value == str(part)), None)
            if match is None or key is None:
                break
            line, node = key.start_mark.line + 1, match
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line
