"""The envelope: one step an agent proposes for one order, as it travels (HTTP body, Kafka record).

This is the shape every party agrees on: the fields, identifiers safe in URLs and headers, strict integers
and times, a seq_id on every step but the built-in ABORT_PLAN and REPLAN (whose data is checked here). What
a step's data must hold, and which step types exist, belong to the order's process: the gateway
(`nexus.core.envelope`) extends this model with those checks, so an envelope valid here may still be
INVALID_EVENT or REJECTED there.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, Strict, model_validator

from nexus_wire.codes import ABORT_STEP, REPLAN_STEP, AbortCode

SCHEMA_VERSION = "1.0"
INT64_MAX = 2**63 - 1

# What names an order, a plan, a tenant: it travels in URLs, webhook headers and metric labels, so only
# characters safe in all three (DESIGN.md section 4, INVALID_IDENTIFIER).
SAFE_IDENTIFIER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$"
SafeIdentifier = Annotated[str, Strict(), Field(min_length=1, max_length=200, pattern=SAFE_IDENTIFIER_PATTERN)]
_SAFE_IDENTIFIER = re.compile(SAFE_IDENTIFIER_PATTERN)
# Integers are JSON integers (not "1", not true) and fit the int64 columns and clients downstream.
Int64 = Annotated[int, Strict(), Field(le=INT64_MAX)]
_DATE_AND_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


def is_safe_identifier(value: str) -> bool:
    return _SAFE_IDENTIFIER.fullmatch(value) is not None


def _date_and_time(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value
    if not isinstance(value, str) or not _DATE_AND_TIME.match(value):
        raise ValueError("expected an ISO 8601 date and time, e.g. 2026-01-01T10:00:00Z")
    return value


def _representable_in_utc(value: dt.datetime) -> dt.datetime:
    # Many agents write datetime.utcnow().isoformat(), which carries no offset: read it as UTC.
    value = value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value
    try:
        value.astimezone(dt.UTC)
    except OverflowError as exc:
        raise ValueError("the time is outside the representable UTC range") from exc
    return value


Timestamp = Annotated[dt.datetime, BeforeValidator(_date_and_time), AfterValidator(_representable_in_utc)]


class _Data(BaseModel):
    # Extra fields are kept: agents may attach context we do not model. Declared fields are strict.
    model_config = ConfigDict(extra="allow", frozen=True)


class AbortPlanData(_Data):
    reason: Annotated[str, Field(min_length=1, max_length=2000)]
    abort_code: AbortCode
    aborted_at_seq: Annotated[Int64, Field(ge=0)]


class ReplanData(_Data):
    """The plan that replaces the envelope's `plan_id` from the order's next seq on."""

    new_plan_id: SafeIdentifier
    reason: Annotated[str, Field(min_length=1, max_length=2000)]


class EventEnvelope(BaseModel):
    """One step an agent proposes for one order (the aggregate)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event_id: uuid.UUID
    event_type: Annotated[str, Strict(), Field(min_length=1, max_length=200, pattern=r"^[A-Za-z][A-Za-z0-9_.:-]*$")]
    """A step type of the order's process."""
    plan_id: SafeIdentifier
    order_id: SafeIdentifier
    seq_id: Annotated[Int64, Field(ge=1)] | None = None
    timestamp: Timestamp
    schema_version: Literal["1.0"] = "1.0"
    data: dict[str, Any] = Field(default_factory=dict)
    tenant_id: SafeIdentifier = "default"
    correlation_id: SafeIdentifier | None = None
    process: SafeIdentifier | None = None
    """The process an order follows, read from its first step (None: `order`)."""
    deadline: Timestamp | None = None
    """When the plan must be over, on its first step (or its REPLAN); clipped to the process's
    `deadline.max_s`. Past it, the gateway aborts the plan with abort_code `timeout`."""

    @model_validator(mode="after")
    def _check_shape(self) -> EventEnvelope:
        if self.event_type in (ABORT_STEP, REPLAN_STEP):
            if self.seq_id is not None:
                raise ValueError(f"{self.event_type} carries no seq_id")
            (ReplanData if self.event_type == REPLAN_STEP else AbortPlanData).model_validate(self.data)
            return self
        if self.seq_id is None:
            raise ValueError(f"{self.event_type} needs a seq_id")
        return self

    @property
    def is_abort(self) -> bool:
        return self.event_type == ABORT_STEP

    @property
    def is_replan(self) -> bool:
        return self.event_type == REPLAN_STEP

    @property
    def new_plan_id(self) -> str | None:
        """REPLAN: the plan that takes over (validated by `ReplanData`)."""
        return str(self.data["new_plan_id"]) if self.is_replan else None

    @property
    def process_name(self) -> str:
        return self.process or "order"

    def to_json(self) -> str:
        return self.model_dump_json()
