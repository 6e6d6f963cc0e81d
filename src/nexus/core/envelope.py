"""The wire format: `EventEnvelope`, its validation, and JSON Schema export.

Validation is strict: a missing field, or a seq_id on ABORT_PLAN (or none on a step), is an
`InvalidEventError`. What a step's data must hold, which step types exist, and which may follow which, is
the business of the order's process, known only once the order is read: a step's data is checked by the
JSON Schema of its step in the order's process (`core/decide/validation.py`: bad data is DEAD_LETTER
INVALID_EVENT with the field's path), and a well-formed step of an unknown type or out of turn is REJECTED,
with a precise code. The built-in steps (ABORT_PLAN, REPLAN) have their data checked here, by their models.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError

from nexus.core import definitions, strict_json
from nexus.core.process_model import ProcessCatalog
from nexus.core.strict_json import InputLimits
from nexus.errors import ErrorCode, InvalidEventError
from nexus_wire import envelope as wire
from nexus_wire.codes import ABORT_STEP, REPLAN_STEP
from nexus_wire.envelope import (
    AbortPlanData,
    ReplanData,
)

_IDENTIFIER_FIELDS = frozenset({"plan_id", "order_id", "tenant_id", "correlation_id"})


class EventEnvelope(wire.EventEnvelope):
    """One step an agent proposes for one order (the aggregate)."""

    # The wire's envelope (`nexus_wire.envelope`: fields, identifiers, the built-in steps' data); its
    # `event_type` is any step name: which step types exist is the order's process's business
    # (core/decide/validation.py), not the envelope's. The docstring above is the exported schemas' description.


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


def json_schemas(catalog: ProcessCatalog) -> dict[str, dict[str, Any]]:
    """One JSON Schema per event type: the envelope with that type's `data`, for the step types of the
    catalog's latest definitions (their `data:` schemas; a step type two definitions share has the same
    schema in both), the default process's first, and the built-in ABORT_PLAN and REPLAN (their models)."""
    base = EventEnvelope.model_json_schema()
    datas: dict[str, dict[str, Any]] = {}
    for process in sorted(catalog.latest, key=lambda n: (n != definitions.DEFAULT_PROCESS, n)):
        for name, compiled in catalog.latest[process].steps.items():
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
