"""The rows a batch's decisions write, as named, typed records (one per table row), and how one order's
`Resolution` turns into them. Each record's fields are its SQL statement's parameters, in order
(store/queries/gateway.sql, lifecycle.sql). Pure: the store only binds them."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import uuid
from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

import orjson

from nexus.core.decide.approvals import approval_id_for
from nexus.core.decide.finished import finished
from nexus.core.definitions import DEFAULT_PROCESS
from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import Resolution
from nexus.core.process_checks import approval_expires_s
from nexus.core.process_model import ProcessCatalog

_OUTBOX_NAMESPACE = uuid.UUID("6d1f3c1e-8f43-4a43-9d5c-6e6578757300")
_OUTBOX_NAMESPACE_BYTES = _OUTBOX_NAMESPACE.bytes


def outbox_id_for(event_id: uuid.UUID, tenant_id: str = "default") -> uuid.UUID:
    """The notification id (and Idempotency-Key) of an applied event: derived, so it never changes.
    Two tenants' events with the same event_id get different ids (the default tenant keeps the old ones)."""
    name = str(event_id) if tenant_id == "default" else f"{tenant_id}\x1f{event_id}"
    return _uuid5(_OUTBOX_NAMESPACE_BYTES, name)


def _uuid5(namespace: bytes, name: str) -> uuid.UUID:
    """`uuid.uuid5` without its keyword parsing and checks (one per notification): the same id, bit for bit."""
    value = int.from_bytes(hashlib.sha1(namespace + name.encode(), usedforsecurity=False).digest()[:16])
    value = (value & ~(0xF000 << 64)) | (5 << 76)  # version 5
    value = (value & ~(0xC000 << 48)) | (0x8000 << 48)  # RFC 4122 variant
    made = object.__new__(uuid.UUID)
    object.__setattr__(made, "int", value)
    object.__setattr__(made, "is_safe", uuid.SafeUUID.unknown)
    return made


_AS_STR = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS  # to `default`, as json does


def dumps(value: Any) -> str:
    """JSON for a jsonb column (its spacing does not matter there): orjson's, or the standard library's
    for what orjson does not take (an integer beyond 64 bits)."""
    try:
        return orjson.dumps(value, default=str, option=_AS_STR).decode()
    except TypeError:
        return json.dumps(value, default=str)


def postgres_text(value: str) -> str:
    """PostgreSQL text holds neither NUL nor lone surrogates: keep the dead letter, escaped, rather than lose it."""
    return value.replace("\x00", "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")


class OrderRow(NamedTuple):
    order_id: str
    tenant_id: str
    plan_id: str | None
    status: str
    last_seq: int
    tombstone: bool
    outbox_count: int
    process: str
    process_version: int
    facts: str
    superseded: str
    """The superseded plans joined by U+001F (identifiers never contain it)."""
    deadline_at: dt.datetime | None
    finished: bool
    """Whether the order is finished (`decide/finished.py`): write_batch stamps its finished_at from this."""


class OutboxRow(NamedTuple):
    """A notification: one per applied step, delivered to every subscription."""

    id: uuid.UUID
    order_id: str
    position: int
    event_id: uuid.UUID
    event_type: str
    seq_id: int | None
    plan_id: str
    payload: str
    traceparent: str | None
    tenant_id: str


class PendingRow(NamedTuple):
    order_id: str
    seq_id: int | None
    event_id: uuid.UUID
    plan_id: str
    envelope: str
    traceparent: str | None
    tenant_id: str


class PendingDelete(NamedTuple):
    order_id: str
    seq_id: int
    tenant_id: str


class RejectedRow(NamedTuple):
    event_id: uuid.UUID
    order_id: str
    plan_id: str
    tenant_id: str
    seq_id: int | None
    event_type: str
    code: str
    check_id: str | None
    message: str
    drained: bool
    envelope: str


class DeadLetterRow(NamedTuple):
    source: str
    code: str
    error: str
    event_id: str | None
    order_id: str | None
    plan_id: str | None
    payload: str
    tenant_id: str


class ApprovalRow(NamedTuple):
    approval_id: uuid.UUID
    tenant_id: str
    order_id: str
    event_id: uuid.UUID
    plan_id: str
    seq_id: int | None
    event_type: str
    envelope: str
    traceparent: str | None
    expires_s: float | None
    process_version: int | None = None


class DecisionRecord(NamedTuple):
    """A Kafka-ingested step's decision, for the `nexus.decisions` topic (the decisions outbox)."""

    tenant_id: str
    order_id: str
    value: str
    traceparent: str | None


@dataclasses.dataclass(slots=True)
class RowsBuilder:
    """The rows of one batch, gathered while planning; `BatchPlan` keeps them as tuples."""

    orders: list[OrderRow] = dataclasses.field(default_factory=list)
    outbox: list[OutboxRow] = dataclasses.field(default_factory=list)
    pending_add: list[PendingRow] = dataclasses.field(default_factory=list)
    pending_del: list[PendingDelete] = dataclasses.field(default_factory=list)
    rejected: list[RejectedRow] = dataclasses.field(default_factory=list)
    dead: list[DeadLetterRow] = dataclasses.field(default_factory=list)
    approvals: list[ApprovalRow] = dataclasses.field(default_factory=list)
    cancelled: list[uuid.UUID] = dataclasses.field(default_factory=list)
    decisions: list[DecisionRecord] = dataclasses.field(default_factory=list)


def tenant_of(resolution: Resolution) -> str:
    for event, _, _ in resolution.decisions:
        return event.tenant_id
    return "default"


def order_row(resolution: Resolution, tenant: str, catalog: ProcessCatalog | None) -> OrderRow | None:
    """The order's row when the batch changed it; finished by its process in `catalog`."""
    after = resolution.after
    if after.status is None or after == resolution.before:
        return None
    return OrderRow(
        after.order_id,
        tenant,
        after.plan_id,
        str(after.status),
        after.last_seq,
        after.tombstone,
        after.outbox_count,
        after.process or DEFAULT_PROCESS,
        after.process_version or 1,
        dumps(dict(after.facts)),
        "\x1f".join(sorted(after.superseded)),
        after.deadline_at,
        finished(resolution, catalog),
    )


def add_rows(
    resolution: Resolution, traces: Mapping[uuid.UUID, str | None], rows: RowsBuilder, catalog: ProcessCatalog | None
) -> int:
    """One order's resolution as rows (finished by its process in `catalog`); return how many buffered steps it
    drained."""
    tenant = tenant_of(resolution)
    order = order_row(resolution, tenant, catalog)
    if order is not None:
        rows.orders.append(order)
    for rejection in resolution.rejections:
        if not rejection.replay:
            event, verdict = rejection.event, rejection.verdict
            rows.rejected.append(
                RejectedRow(
                    event.event_id, event.order_id, event.plan_id, event.tenant_id, event.seq_id,
                    str(event.event_type), verdict.code.value, verdict.check, postgres_text(verdict.message),
                    rejection.drained, event.model_dump_json(),
                )
            )  # fmt: skip
    if resolution.unbuffered:
        order_id = resolution.after.order_id
        rows.pending_del.extend(PendingDelete(order_id, seq, tenant) for seq in resolution.unbuffered)
    for event in resolution.buffered:
        rows.pending_add.append(
            PendingRow(
                event.order_id, event.seq_id, event.event_id, event.plan_id, event.model_dump_json(),
                traces.get(event.event_id), event.tenant_id,
            )
        )  # fmt: skip
    for applied in resolution.applied:
        if not applied.effect:  # a step waiting for its effect is notified once it succeeds
            rows.outbox.append(notification(applied.event, applied.position, applied.status, traces))
    return sum(1 for a in resolution.applied if a.drained)


def notification(event: EventEnvelope, position: int, status: str, traces: Mapping[uuid.UUID, str | None]) -> OutboxRow:
    notification_id = outbox_id_for(event.event_id, event.tenant_id)
    payload = {
        "notification_id": str(notification_id),
        "order_id": event.order_id,
        "plan_id": event.plan_id,
        "tenant_id": event.tenant_id,
        "position": position,
        "event_type": str(event.event_type),
        "seq_id": event.seq_id,
        "status": str(status),
    }
    # The envelope's JSON spliced in as it is (the column is jsonb): not decoded to be encoded again.
    body = f'{dumps(payload)[:-1]}, "event": {event.model_dump_json()}}}'
    return OutboxRow(
        notification_id, event.order_id, position, event.event_id, str(event.event_type), event.seq_id,
        event.plan_id, body, traces.get(event.event_id), event.tenant_id,
    )  # fmt: skip


def approval_rows(
    resolution: Resolution,
    catalog: ProcessCatalog | None,
    traces: Mapping[uuid.UUID, str | None],
    answered: Collection[uuid.UUID],
) -> tuple[list[ApprovalRow], list[uuid.UUID]]:
    """An approvals row per newly held step, and the approvals of held steps dropped (by an abort or a
    REPLAN) to cancel. `answered`: the event_ids of held steps a person answered in this batch."""
    rows: list[ApprovalRow] = []
    after = resolution.after
    for event, _drained in resolution.held:
        assert catalog is not None  # only a process holds a step
        process = (
            catalog.get(after.process, after.process_version)
            if after.process is not None
            else catalog.get(event.process_name)
        )
        expires = approval_expires_s(process, str(event.event_type)) if process is not None else None
        rows.append(
            ApprovalRow(
                approval_id_for(event.event_id, event.tenant_id), event.tenant_id, event.order_id, event.event_id,
                event.plan_id, event.seq_id, str(event.event_type), event.model_dump_json(),
                traces.get(event.event_id), expires, process.version if process is not None else None,
            )
        )  # fmt: skip
    if not resolution.released:
        return rows, []
    tenant = tenant_of(resolution)
    return rows, [approval_id_for(e, tenant) for e in resolution.released if e not in answered]
