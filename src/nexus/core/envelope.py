"""The wire format: `EventEnvelope`, one data model per event type, and JSON Schema export.

Validation is strict: a missing field, a seq_id on ABORT_PLAN (or none on a step), or a negative amount is
an `InvalidEventError`. Which step types exist, and which may follow which, is the business of the order's
process (`core/process.py`): a well-formed step of an unknown type or out of turn is REJECTED there, with a
precise code, not dead-lettered here. The built-in order types keep their typed data models.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from nexus.core.process import AbortCode, EventType, seq_of
from nexus.errors import ErrorCode, InvalidEventError

SCHEMA_VERSION = "1.0"

# Any precision: agents compute totals in binary floats (0.1 * 3 == 0.30000000000000004); only sign matters here.
Amount = Annotated[Decimal, Field(ge=0)]
Currency = Annotated[str, Field(pattern=r"^[A-Z]{3}$")]
Identifier = Annotated[str, Field(min_length=1, max_length=200)]


class _Data(BaseModel):
    # Extra fields are kept: agents may attach context we do not model. Declared fields are strict.
    model_config = ConfigDict(extra="allow", frozen=True)


class Item(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    product_id: Identifier
    quantity: Annotated[int, Field(gt=0)]
    unit_price: Amount


class OrderCreatedData(_Data):
    user_id: Identifier | None = None
    items: list[Item] = Field(default_factory=list)
    total_amount: Amount = Decimal(0)
    currency: Currency = "USD"


class InventoryValidatedData(_Data):
    warehouse_id: Identifier | None = None
    reserved_items: list[Item] = Field(default_factory=list)


class PaymentProcessedData(_Data):
    payment_id: Identifier | None = None
    amount: Amount = Decimal(0)
    currency: Currency = "USD"
    method: Identifier | None = None


class OrderShippedData(_Data):
    carrier: Identifier | None = None
    tracking_number: Identifier | None = None


class OrderCompletedData(_Data):
    completed_at: dt.datetime | None = None


class AbortPlanData(_Data):
    reason: Annotated[str, Field(min_length=1, max_length=2000)]
    abort_code: AbortCode
    aborted_at_seq: Annotated[int, Field(ge=0)]


DATA_MODELS: dict[EventType, type[_Data]] = {
    EventType.ORDER_CREATED: OrderCreatedData,
    EventType.INVENTORY_VALIDATED: InventoryValidatedData,
    EventType.PAYMENT_PROCESSED: PaymentProcessedData,
    EventType.ORDER_SHIPPED: OrderShippedData,
    EventType.ORDER_COMPLETED: OrderCompletedData,
    EventType.ABORT_PLAN: AbortPlanData,
}


class EventEnvelope(BaseModel):
    """One step an agent proposes for one order (the aggregate)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event_id: uuid.UUID
    event_type: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z][A-Za-z0-9_.:-]*$")]
    """A step type of the order's process (the built-in ones arrive as `EventType` members)."""
    plan_id: Identifier
    order_id: Identifier
    seq_id: Annotated[int, Field(ge=1)] | None = None
    timestamp: dt.datetime
    schema_version: Literal["1.0"] = "1.0"
    data: dict[str, Any] = Field(default_factory=dict)
    tenant_id: Identifier = "default"
    correlation_id: Identifier | None = None
    process: Identifier | None = None
    """The process an order follows, read from its first step (None: `order`)."""

    @field_validator("event_type", mode="after")
    @classmethod
    def _known_type(cls, value: str) -> str:
        try:
            return EventType(value)
        except ValueError:
            return value

    @field_validator("timestamp", mode="after")
    @classmethod
    def _utc_if_naive(cls, value: dt.datetime) -> dt.datetime:
        # Many agents write datetime.utcnow().isoformat(), which carries no offset: read it as UTC.
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value

    @model_validator(mode="after")
    def _check_shape(self) -> EventEnvelope:
        if self.event_type == EventType.ABORT_PLAN:
            if self.seq_id is not None:
                raise ValueError("ABORT_PLAN carries no seq_id")
        elif self.seq_id is None:
            raise ValueError(f"{self.event_type} needs a seq_id")
        model = DATA_MODELS.get(self.event_type)  # type: ignore[call-overload]
        if model is not None:
            model.model_validate(self.data)
        return self

    @property
    def is_abort(self) -> bool:
        return self.event_type == EventType.ABORT_PLAN

    @property
    def process_name(self) -> str:
        return self.process or "order"

    def typed_data(self) -> _Data:
        return DATA_MODELS[EventType(self.event_type)].model_validate(self.data)

    def to_json(self) -> str:
        return self.model_dump_json()


_ENVELOPE = TypeAdapter(EventEnvelope)


def parse_envelope(raw: bytes | str | dict[str, Any]) -> EventEnvelope:
    """Parse one envelope from bytes, text or an already decoded object; raise `InvalidEventError`."""
    if isinstance(raw, bytes | str):
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidEventError(f"not JSON: {exc}", code=ErrorCode.PARSE_ERROR) from exc
    else:
        obj = raw
    if not isinstance(obj, dict):
        raise InvalidEventError("an envelope is a JSON object")
    try:
        return _ENVELOPE.validate_python(obj)
    except ValidationError as exc:
        raise InvalidEventError(_summarize(exc)) from exc


def _summarize(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "envelope"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def json_schemas() -> dict[str, dict[str, Any]]:
    """One JSON Schema per event type: the envelope with that type's `data` model."""
    schemas: dict[str, dict[str, Any]] = {}
    base = EventEnvelope.model_json_schema()
    for event_type, model in DATA_MODELS.items():
        data_schema = model.model_json_schema()
        defs = {**base.get("$defs", {}), **data_schema.pop("$defs", {})}
        props = dict(base["properties"])
        props["event_type"] = {"const": event_type.value, "title": "Event Type"}
        props["data"] = data_schema
        required = list(base["required"])
        seq = seq_of(event_type)
        if seq is None:
            props["seq_id"] = {"type": "null", "title": "Seq Id"}
        else:
            props["seq_id"] = {"type": "integer", "minimum": 1, "title": "Seq Id"}
            required.append("seq_id")
        schema: dict[str, Any] = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://nexus.dev/schemas/events/{event_type.value}.json",
            "title": event_type.value,
            "type": "object",
            "additionalProperties": False,
            "properties": props,
            "required": required,
        }
        if defs:
            schema["$defs"] = defs
        schemas[event_type.value] = schema
    return schemas
