"""The wire format: `EventEnvelope`, the validation of each step's data, and JSON Schema export.

Validation is strict: a missing field, a seq_id on ABORT_PLAN (or none on a step), or a negative amount is
an `InvalidEventError`. Which step types exist, and which may follow which, is the business of the order's
process (`core/process.py`): a well-formed step of an unknown type or out of turn is REJECTED there, with a
precise code, not dead-lettered here. A step of the default process (`order`, `processes/order.yaml`) has its
data validated here by the JSON Schema of its definition (the `data:` key), so bad data is INVALID_EVENT with
the field's path; the built-in steps (ABORT_PLAN, REPLAN) keep their models below.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

from pydantic import TypeAdapter, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from nexus.core import definitions, strict_json
from nexus.core.process import ABORT_STEP, REPLAN_STEP
from nexus.core.strict_json import InputLimits
from nexus.errors import ErrorCode, InvalidEventError
from nexus_wire import envelope as wire
from nexus_wire.envelope import SAFE_IDENTIFIER_PATTERN as SAFE_IDENTIFIER_PATTERN
from nexus_wire.envelope import SCHEMA_VERSION as SCHEMA_VERSION
from nexus_wire.envelope import AbortPlanData as AbortPlanData
from nexus_wire.envelope import Int64 as Int64
from nexus_wire.envelope import ReplanData as ReplanData
from nexus_wire.envelope import SafeIdentifier as SafeIdentifier
from nexus_wire.envelope import Timestamp as Timestamp
from nexus_wire.envelope import is_safe_identifier as is_safe_identifier

_IDENTIFIER_FIELDS = frozenset({"plan_id", "order_id", "tenant_id", "correlation_id"})


def _is_date_time(value: str) -> bool:
    try:
        _TIMESTAMP.validate_python(value)
    except ValidationError:
        return False
    return True


_TIMESTAMP: TypeAdapter[dt.datetime] = TypeAdapter(Timestamp)
_DEFAULT = definitions.shipped()
StepType = definitions.step_enum(_DEFAULT, "StepType")
"""The default process's step types and ABORT_PLAN: an envelope's `event_type` is one of them when it can be."""
_DATA_VALIDATORS = {
    name: definitions.data_validator(compiled.step.data, _is_date_time)
    for name, compiled in _DEFAULT.steps.items()
    if compiled.step.data
}
# What JSON Schema's words are in the envelope's other answers (pydantic's), for the keywords the shipped
# schemas use: one wording for a field whatever validates it.
_TYPE_WORDS = {"string": "a valid string", "integer": "a valid integer", "array": "a valid list",
               "object": "a valid dictionary", "number": "a valid number", "boolean": "a valid boolean"}  # fmt: skip


def _data_errors(event_type: str, data: dict[str, Any]) -> list[InitErrorDetails]:
    """The data's errors against its step's schema in the default process (none for other step types)."""
    validator = _DATA_VALIDATORS.get(event_type)
    if validator is None or validator.is_valid(data):
        return []
    details: list[InitErrorDetails] = []
    for error in validator.iter_errors(data):
        loc = tuple(error.instance_path)
        kind = error.kind
        name = type(kind).__name__
        if name == "Required":
            loc, message = (*loc, str(kind.property)), "Field required"
        else:
            message = _words(name, kind, error.message, error.instance)
        details.append({"type": PydanticCustomError("data", message), "loc": loc, "input": None})
    return details


def data_problem(event_type: str, data: dict[str, Any]) -> str | None:
    """Why `data` is not valid for a step of the default process (as an envelope would say it), or None."""
    errors = _data_errors(event_type, data)
    if not errors:
        return None
    return _summarize(ValidationError.from_exception_data(event_type, errors))


def _words(name: str, kind: Any, fallback: str, value: Any) -> str:
    if name == "Minimum":
        return f"Input should be greater than or equal to {kind.limit}"
    if name == "ExclusiveMinimum":
        return f"Input should be greater than {kind.limit}"
    if name == "Maximum":
        return f"Input should be less than or equal to {kind.limit}"
    if name == "MinLength":
        return f"String should have at least {kind.limit} character{'s' if kind.limit != 1 else ''}"
    if name == "MaxLength":
        return f"String should have at most {kind.limit} character{'s' if kind.limit != 1 else ''}"
    if name == "Pattern":
        # A pattern with an exponent is a decimal number written as a string (an amount).
        return _decimal_words(value) if "[eE]" in kind.pattern else f"String should match pattern '{kind.pattern}'"
    if name == "Type":
        types = sorted(str(t) for t in kind.types)
        if types == ["number", "string"]:
            return "Decimal input should be an integer, float, string or Decimal object"
        return "Input should be " + " or ".join(_TYPE_WORDS.get(t, t) for t in types if t != "null")
    if name == "Format":
        return "Value error, expected an ISO 8601 date and time, e.g. 2026-01-01T10:00:00Z"
    return fallback


def _decimal_words(value: Any) -> str:
    try:
        number = decimal.Decimal(str(value).strip())
    except decimal.InvalidOperation:
        return "Input should be a valid decimal"
    if not number.is_finite():
        return "Input should be a finite number"
    return "Input should be greater than or equal to 0" if number < 0 else "Input should be a valid decimal"


class EventEnvelope(wire.EventEnvelope):
    """One step an agent proposes for one order (the aggregate)."""

    # The wire's envelope (`nexus_wire.envelope`: fields, identifiers, the built-in steps' data), and what the
    # gateway knows besides: the default process's step types arrive as `StepType` members, and their data is
    # validated by the JSON Schema of its definition. The docstring above is the exported schemas' description.

    @field_validator("event_type", mode="after")
    @classmethod
    def _known_type(cls, value: str) -> str:
        try:
            return StepType(value)
        except ValueError:
            return value

    @model_validator(mode="after")
    def _check_data(self) -> EventEnvelope:
        if self.seq_id is None:  # ABORT_PLAN and REPLAN: their data was checked by the wire's model
            return self
        errors = _data_errors(self.event_type, self.data)
        if errors:
            raise ValidationError.from_exception_data(self.event_type, errors)
        return self


_ENVELOPE = TypeAdapter(EventEnvelope)


def parse_envelope(raw: bytes | str | dict[str, Any], limits: InputLimits | None = None) -> EventEnvelope:
    """Parse one envelope from bytes, text or an already decoded object; raise `InvalidEventError`.

    Bytes and text go through the strict decoder (`strict_json`); an object is expected to come from it.
    """
    obj = strict_json.loads(raw, limits) if isinstance(raw, bytes | str) else raw
    if not isinstance(obj, dict):
        raise InvalidEventError("an envelope is a JSON object")
    oversized = strict_json.find_oversized_int(obj)
    if oversized is not None:
        raise InvalidEventError(f"{oversized}: integer outside the 64-bit range")
    try:
        return _ENVELOPE.validate_python(obj)
    except ValidationError as exc:
        raise InvalidEventError(_summarize(exc), code=_code_of(exc)) from exc


def _code_of(exc: ValidationError) -> ErrorCode:
    for err in exc.errors():
        if err["loc"] and err["loc"][0] in _IDENTIFIER_FIELDS and err["type"] != "missing":
            return ErrorCode.INVALID_IDENTIFIER
    return ErrorCode.INVALID_EVENT


def _summarize(exc: ValidationError) -> str:
    # The message names where and what, never the input itself: it is echoed in API answers and logs.
    parts = []
    for err in exc.errors(include_input=False, include_url=False)[:5]:
        where = ".".join(str(p)[:64] for p in err["loc"][:8]) or "envelope"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def json_schemas() -> dict[str, dict[str, Any]]:
    """One JSON Schema per event type: the envelope with that type's `data`, for the step types of the shipped
    definitions (their `data:` schemas; a step type two definitions share has the same schema in both) and
    the built-in ABORT_PLAN and REPLAN (their models)."""
    base = EventEnvelope.model_json_schema()
    datas: dict[str, dict[str, Any]] = {}
    for process in sorted(definitions.shipped_names(), key=lambda n: (n != definitions.DEFAULT_PROCESS, n)):
        for name, compiled in definitions.shipped(process).steps.items():
            if datas.setdefault(name, dict(compiled.step.data)) != compiled.step.data:
                raise ValueError(f"step type {name} of {process} has another data schema than elsewhere")
    datas[ABORT_STEP] = AbortPlanData.model_json_schema()
    datas[REPLAN_STEP] = ReplanData.model_json_schema()
    schemas: dict[str, dict[str, Any]] = {}
    for name, data_schema in datas.items():
        defs = {**base.get("$defs", {}), **data_schema.pop("$defs", {})}
        props = dict(base["properties"])
        props["event_type"] = {"const": name, "title": "Event Type"}
        props["data"] = data_schema or {"type": "object"}
        required = list(base["required"])
        if name in (ABORT_STEP, REPLAN_STEP):
            props["seq_id"] = {"type": "null", "title": "Seq Id"}
        else:
            props["seq_id"] = {"type": "integer", "minimum": 1, "title": "Seq Id"}
            required.append("seq_id")
        schema: dict[str, Any] = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://nexus.dev/schemas/events/{name}.json",
            "title": name,
            "type": "object",
            "additionalProperties": False,
            "properties": props,
            "required": required,
        }
        if defs:
            schema["$defs"] = defs
        schemas[name] = schema
    return schemas
