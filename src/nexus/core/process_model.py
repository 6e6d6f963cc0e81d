"""Process definitions as data: the definition models, a compiled definition, the catalog. Pure: no I/O.

A definition (DESIGN.md section 4, "Process definitions") names its states, the terminal ones, and for
each step type the states it may follow (`from`, where `null` is "before the order exists"), the state it
leads to, a JSON Schema of its data and its CEL checks. `core/process_compile.py` turns YAML text into a
`CompiledProcess`; `core/process_checks.py` judges a step against one (its place in the decision table:
`core/decide/validation.py`).

No process is special here: the shipped definitions (src/nexus/processes/*.yaml) reach the core as a user's
do, compiled into the catalog by the registry (`nexus.processes`); the core names none of their steps or states.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nexus.core.checks import CompiledRule, convert_money, exponent_of
from nexus.errors import ErrorCode
from nexus_wire.codes import ABORT_STEP, REPLAN_STEP

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
    """The compiled `approval.when` (None with an approval: always held)."""
    elements: Mapping[str, Mapping[str, frozenset[str]]] = dataclasses.field(default_factory=dict)
    """Of the lists in `fields`, those whose maps the rules read only some fields of, and those fields
    (`checks.element_fields_used`): the rest of each map is not converted."""

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
    terminal_states: frozenset[str] = frozenset({ABORTED})
    """The definition's terminal states, and the built-in `aborted`."""

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def version(self) -> int:
        return self.definition.version

    def is_terminal(self, state: str | None) -> bool:
        return state is not None and (state == ABORTED or state in self.definition.terminal)

    def status_after(self, event_type: str) -> str:
        return ABORTED if event_type == ABORT_STEP else self.steps[event_type].step.to

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


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """Why a step is REJECTED: its code, the failed check's id (for CHECK_FAILED/LIMIT_EXCEEDED), a message."""

    code: ErrorCode
    message: str
    check: str | None = None


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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
