"""Process definitions: states, steps, transitions and value checks, loaded from YAML into frozen models.

A definition (DESIGN.md section 4, "Process definitions") names its states, the terminal ones, and for
each step type the states it may follow (`from`, where `null` is "before the order exists"), the state it
leads to, a JSON Schema of its data and its CEL checks. `compile_definition` validates a YAML text against
the definition schema (`definition_schema()`, exported to `src/nexus/processes/schema.json`), then
checks what a schema cannot (unknown states, terminal states with outgoing steps, CEL syntax) and compiles
every rule once. `validate_step` is the process half of the decision table: it says why a step that would
apply must be REJECTED, or None. Pure: YAML arrives as text; reading files happens outside the core.

The constants below describe the built-in `order` process for the lab (the agent and the checker build
honest plans from them); the gateway itself reads the process from its definition (`processes/order.yaml`).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

import jsonschema
import jsonschema_rs
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nexus.core.checks import (
    CheckSyntaxError,
    CompiledRule,
    build_context,
    convert_money,
    exponent_of,
    fields_used,
    pick,
    to_minor,
)
from nexus.core.list_limits import CHECK_ID as LIST_CHECK_ID
from nexus.core.list_limits import list_limit_message
from nexus.core.rule_cost import costly_rules
from nexus.errors import ErrorCode


class EventType(enum.StrEnum):
    ORDER_CREATED = "OrderCreated"
    INVENTORY_VALIDATED = "InventoryValidated"
    PAYMENT_PROCESSED = "PaymentProcessed"
    ORDER_SHIPPED = "OrderShipped"
    ORDER_COMPLETED = "OrderCompleted"
    ABORT_PLAN = "ABORT_PLAN"


class OrderStatus(enum.StrEnum):
    CREATED = "created"
    INVENTORY_VALIDATED = "inventory_validated"
    PAYMENT_PROCESSED = "payment_processed"
    SHIPPED = "shipped"
    COMPLETED = "completed"
    ABORTED = "aborted"

    @property
    def terminal(self) -> bool:
        return self in (OrderStatus.COMPLETED, OrderStatus.ABORTED)


class AbortCode(enum.StrEnum):
    INVENTORY_FAILED = "inventory_failed"
    PAYMENT_REJECTED = "payment_rejected"
    TIMEOUT = "timeout"
    MANUAL = "manual"
    POLICY_VIOLATION = "policy_violation"
    PLANNER_GAVE_UP = "planner_gave_up"  # issue 15: the LLM planner gave up correcting a rejected step
    EFFECT_FAILED = "effect_failed"  # issue 14: a saga effect failed before the pivot; compensated


# The steps of the order process, by position (seq_id), and the status each one leaves the order in.
STEPS: tuple[EventType, ...] = (
    EventType.ORDER_CREATED,
    EventType.INVENTORY_VALIDATED,
    EventType.PAYMENT_PROCESSED,
    EventType.ORDER_SHIPPED,
    EventType.ORDER_COMPLETED,
)
STATUS_AFTER: dict[EventType, OrderStatus] = {
    EventType.ORDER_CREATED: OrderStatus.CREATED,
    EventType.INVENTORY_VALIDATED: OrderStatus.INVENTORY_VALIDATED,
    EventType.PAYMENT_PROCESSED: OrderStatus.PAYMENT_PROCESSED,
    EventType.ORDER_SHIPPED: OrderStatus.SHIPPED,
    EventType.ORDER_COMPLETED: OrderStatus.COMPLETED,
    EventType.ABORT_PLAN: OrderStatus.ABORTED,
}
LAST_SEQ = len(STEPS)


def seq_of(event_type: EventType) -> int | None:
    """The position of a step in the built-in order process, from 1; None for ABORT_PLAN."""
    if event_type is EventType.ABORT_PLAN:
        return None
    return STEPS.index(event_type) + 1


def as_status(name: str) -> str:
    """A state name, as the `OrderStatus` member when it is one of the order process's states."""
    try:
        return OrderStatus(name)
    except ValueError:
        return name


ABORT_STEP = "ABORT_PLAN"
REPLAN_STEP = "REPLAN"
"""issue 13: the built-in plan swap (no seq_id; `plan_id` = the plan replaced; data {new_plan_id, reason})."""
BUILTIN_STEPS = frozenset({ABORT_STEP, REPLAN_STEP})
ABORTED = "aborted"
_Name = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z][A-Za-z0-9_.-]*$")]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class _Open(BaseModel):
    # Keys owned by later issues (approval, deadline, effect): typed where known, open to extension.
    model_config = ConfigDict(extra="allow", frozen=True)


class Check(_Frozen):
    """A value check: `rule` (CEL) must evaluate to true, else the step is REJECTED with `code`."""

    id: _Name
    rule: Annotated[str, Field(min_length=1)]
    message: str | None = None
    code: Literal["CHECK_FAILED", "LIMIT_EXCEEDED"] = "CHECK_FAILED"


class Approval(_Open):
    when: str | None = None
    expires_s: Annotated[float, Field(gt=0)] | None = None


class Deadline(_Open):
    default_s: Annotated[float, Field(gt=0)] | None = None
    max_s: Annotated[float, Field(gt=0)] | None = None


class Compensation(_Open):
    path: str | None = None
    body: dict[str, str] = Field(default_factory=dict)


class Effect(_Open):
    service: _Name
    path: str = "/"
    body: dict[str, str] = Field(default_factory=dict)
    compensation: Compensation | None = None


class Step(_Frozen):
    """One step type of a process."""

    from_: Annotated[list[str | None], Field(alias="from", min_length=1)]
    to: _Name
    data: dict[str, Any] = Field(default_factory=dict)
    """JSON Schema of the step's data (empty: anything)."""
    checks: list[Check] = Field(default_factory=list)
    money: list[str] = Field(default_factory=list)
    """Dotted paths of the data's amounts (lists walked through), compared in the currency's minor unit."""
    facts: list[str] | None = None
    """Data keys the step adds to the order's facts once applied (default: all of them)."""
    description: str | None = None
    approval: Approval | None = None
    effect: Effect | None = None
    pivot: bool = False


class ProcessDefinition(_Frozen):
    """A process as its YAML file declares it."""

    name: _Name
    version: Annotated[int, Field(ge=1)]
    description: str | None = None
    states: Annotated[list[_Name], Field(min_length=1)]
    terminal: list[_Name] = Field(default_factory=list)
    max_rejections: Annotated[int, Field(ge=1)] | None = None
    deadline: Deadline | None = None
    max_list_items: Annotated[int, Field(ge=1)] | None = None
    """The most items any list of a step's data may hold (default 1,000; a tenant's limit may lower it).
    Its rules are judged for cost against it (core/rule_cost.py); more items: LIMIT_EXCEEDED."""
    currency_field: str = "currency"
    """The data key (or order fact) naming the currency that money fields are in."""
    steps: Annotated[dict[_Name, Step], Field(min_length=1)]


class DefinitionError(ValueError):
    """A process definition is refused; `line` is its 1-based line in the YAML text when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(f"line {line}: {message}" if line else message)
        self.line = line
        self.reason = message


def definition_schema() -> dict[str, Any]:
    """The JSON Schema of a definition file (exported to src/nexus/processes/schema.json and schemas/)."""
    schema = ProcessDefinition.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://nexus.dev/schemas/process.json"
    return schema


_SCHEMA_VALIDATOR = jsonschema.Draft202012Validator(definition_schema())


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """Why a step is REJECTED: its code, the failed check's id (for CHECK_FAILED/LIMIT_EXCEEDED), a message."""

    code: ErrorCode
    message: str
    check: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class CompiledStep:
    name: str
    step: Step
    rules: tuple[tuple[Check, CompiledRule], ...]
    data_schema: Any
    defaults: Mapping[str, Any]
    """Top-level `default`s of the data schema: what an absent field means, for checks and facts."""
    fields: Mapping[str, frozenset[str] | None] = dataclasses.field(default_factory=dict)
    """The CEL variables the step's rules mention, and their fields read: only those are converted."""
    uses_sum: bool = False
    approval_rule: CompiledRule | None = None
    """issue 13: the compiled `approval.when` (None with an approval: always held)."""

    def with_defaults(self, data: Mapping[str, Any]) -> dict[str, Any]:
        return {**self.defaults, **data} if self.defaults else dict(data)


@dataclasses.dataclass(frozen=True, slots=True)
class CompiledProcess:
    """A definition ready to decide: rules compiled once, next steps indexed by state."""

    definition: ProcessDefinition
    content_hash: str
    steps: Mapping[str, CompiledStep]
    allowed: Mapping[str | None, tuple[str, ...]]
    """State (None: before the order exists) -> step types allowed from it, ABORT_PLAN excluded."""

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def version(self) -> int:
        return self.definition.version

    def is_terminal(self, state: str | None) -> bool:
        return state is not None and (state == ABORTED or state in self.definition.terminal)

    def status_after(self, event_type: str) -> str:
        return as_status(ABORTED if event_type == ABORT_STEP else self.steps[event_type].step.to)

    def facts_after(self, facts: Mapping[str, Any], event_type: str, data: Mapping[str, Any]) -> dict[str, Any]:
        """The order's facts once a step applied: its data (money in minor units) merged over them."""
        compiled = self.steps.get(event_type)
        if compiled is None:
            return dict(facts)
        converted = self._money(compiled.step, compiled.with_defaults(data), facts)
        keys = compiled.step.facts if compiled.step.facts is not None else list(converted)
        return {**facts, **{k: converted[k] for k in keys if k in converted}}

    def _money(self, step: Step, data: Mapping[str, Any], facts: Mapping[str, Any]) -> dict[str, Any]:
        if not step.money:
            return dict(data)
        field = self.definition.currency_field
        return convert_money(data, step.money, exponent_of(data.get(field, facts.get(field))))


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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
            validator = jsonschema_rs.validator_for(step.data) if step.data else None
        except jsonschema.SchemaError as exc:
            raise DefinitionError(
                f"step {name}: data is not a JSON Schema: {exc.message}", _line_of(text, [*where, "data"])
            ) from exc
        properties = step.data.get("properties", {}) if isinstance(step.data, dict) else {}
        defaults = {k: v["default"] for k, v in properties.items() if isinstance(v, dict) and "default" in v}
        fields = fields_used(r.source for _, r in rules)
        uses_sum = any(r.uses_sum for _, r in rules)
        approval_rule = None
        if step.approval is not None and step.approval.when:
            try:
                approval_rule = CompiledRule.compile(step.approval.when)
            except CheckSyntaxError as exc:
                raise DefinitionError(
                    f"step {name}, approval.when: CEL syntax error: {exc}", _line_of(text, [*where, "approval"])
                ) from exc
        steps[name] = CompiledStep(
            name, step, tuple(rules), validator, defaults, fields, uses_sum, approval_rule=approval_rule
        )
    for where, reason in costly_rules(definition) if judge_cost else ():
        raise DefinitionError(reason, _line_of(text, where))
    if None not in allowed:
        raise DefinitionError("no initial step: at least one step needs `from: [null]`", _line_of(text, ["steps"]))
    return CompiledProcess(
        definition=definition,
        content_hash=content_hash(text),
        steps=steps,
        allowed={k: tuple(v) for k, v in allowed.items()},
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
    if (too_long := list_limit_message(data, process.definition.max_list_items, limits)) is not None:
        return Verdict(ErrorCode.LIMIT_EXCEEDED, too_long, LIST_CHECK_ID)
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


@dataclasses.dataclass(frozen=True, slots=True)
class ProcessCatalog:
    """The definitions a gateway knows: every (name, version), and the latest version of each name."""

    versions: Mapping[tuple[str, int], CompiledProcess]
    latest: Mapping[str, CompiledProcess]

    @classmethod
    def of(cls, processes: Iterable[CompiledProcess]) -> ProcessCatalog:
        versions = {(p.name, p.version): p for p in processes}
        latest: dict[str, CompiledProcess] = {}
        for (name, _), process in sorted(versions.items()):
            latest[name] = process
        return cls(versions, latest)

    def get(self, name: str, version: int | None = None) -> CompiledProcess | None:
        if version is not None:
            return self.versions.get((name, version))
        return self.latest.get(name)
