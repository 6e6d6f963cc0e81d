"""`Gateway.submit`: the one entry point. Validate, lock, decide, apply: one transaction per batch.

Every ingress (HTTP, Kafka, redrive) hands its events here. A batch is written with a fixed number of
set-based statements whatever its size: advisory locks for its orders (in key order, so batches never
deadlock), one read of their state and buffer, the pure `resolve` per order, then one statement per table.
If the shared transaction fails for a permanent reason, each order is retried alone so one culprit cannot
fail its neighbours; transient failures propagate for the caller to retry as a whole.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import asyncpg

from nexus import metrics, tracing
from nexus.audit.log import record_columns, record_entries
from nexus.core import strict_json
from nexus.core.audit import INGRESS_ORDER, Entry, resolution_entries
from nexus.core.envelope import EventEnvelope, parse_envelope
from nexus.core.process import ProcessCatalog, Verdict, as_status
from nexus.core.sequencing import Decision, OrderState, Resolution, code_of, deadline_abort, resolve
from nexus.core.strict_json import InputLimits
from nexus.errors import ErrorCode, InvalidEventError, PermanentDatabaseError, TransientDatabaseError
from nexus.store import lifecycle as lifecycle_records
from nexus.store import sagas as saga_records
from nexus.store.database import Database
from nexus.store.errors import wrap_db_errors
from nexus.store.lifecycle import ApprovalDecision
from nexus.store.queries import query

log = logging.getLogger(__name__)

_OUTBOX_NAMESPACE = uuid.UUID("6d1f3c1e-8f43-4a43-9d5c-6e6578757300")


def outbox_id_for(event_id: uuid.UUID, tenant_id: str = "default") -> uuid.UUID:
    """The notification id (and Idempotency-Key) of an applied event: derived, so it never changes.
    Two tenants' events with the same event_id get different ids (the default tenant keeps the old ones)."""
    name = str(event_id) if tenant_id == "default" else f"{tenant_id}\x1f{event_id}"
    return uuid.uuid5(_OUTBOX_NAMESPACE, name)


@dataclasses.dataclass(frozen=True, slots=True)
class Incoming:
    """One item handed to the gateway: a parsed envelope, or the raw input and why it failed to parse."""

    raw: str
    envelope: EventEnvelope | None = None
    error: InvalidEventError | None = None
    traceparent: str | None = None
    tenant_id: str = "default"
    """The tenant the caller's key (or the Kafka topic) speaks for; see nexus.auth.tenants."""

    @classmethod
    def parse(
        cls, raw: bytes | str | dict[str, Any], traceparent: str | None = None, limits: InputLimits | None = None
    ) -> Incoming:
        text = (
            raw
            if isinstance(raw, str)
            else (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else json.dumps(raw, default=str))
        )
        try:
            return cls(text, parse_envelope(raw, limits), None, traceparent)
        except InvalidEventError as exc:
            return cls(text, None, exc, traceparent)

    @classmethod
    def of(cls, envelope: EventEnvelope, traceparent: str | None = None) -> Incoming:
        return cls(envelope.model_dump_json(), envelope, None, traceparent, tenant_id=envelope.tenant_id)

    @property
    def event_id(self) -> str | None:
        if self.envelope is not None:
            return str(self.envelope.event_id)
        try:
            obj = strict_json.loads(self.raw)
        except InvalidEventError:
            return None
        value = obj.get("event_id") if isinstance(obj, dict) else None
        return str(value) if value is not None else None


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """The gateway's answer for one item."""

    event_id: str | None
    decision: Decision
    code: ErrorCode | None = None
    error: str | None = None
    status: str | None = None
    last_seq: int | None = None
    dead_letter_id: int | None = None
    check: str | None = None
    """REJECTED: the id of the failed check (CHECK_FAILED, LIMIT_EXCEEDED)."""
    message: str | None = None
    """REJECTED: why, in words (INVALID_TRANSITION lists the allowed next steps)."""
    effect: Any = None
    """issue 14: the saga effect holding the order ({"step", "seq", "status", "attempts"}), if any."""
    deadline: tuple[dt.datetime, bool] | None = None
    """issue 13: the deadline this step set for its plan, and whether it was clipped to the process's max."""
    approval_id: uuid.UUID | None = None
    """issue 13: HELD: the approval that will decide the step."""

    @property
    def is_dead_letter(self) -> bool:
        return self.decision in (Decision.DEAD_LETTER, Decision.PLAN_MISMATCH)

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "event_id": self.event_id,
            "decision": self.decision.value,
            "code": self.code.value if self.code else None,
            "order": None
            if self.status is None and self.last_seq is None
            else {
                "status": str(self.status) if self.status else None,
                "last_seq": self.last_seq,
            },
        }
        if self.decision is Decision.REJECTED:
            body["check"] = self.check
            body["message"] = self.message
        if self.decision is Decision.HELD:
            body["approval_id"] = str(self.approval_id) if self.approval_id else None
        if self.deadline is not None:
            body["deadline"] = self.deadline[0].isoformat()
            body["deadline_clipped"] = self.deadline[1]
        if self.error:
            body["error"] = self.error
        if self.effect is not None:  # issue 14
            body["effect"] = dict(self.effect)
        return body


@dataclasses.dataclass(slots=True)
class _Writes:
    """The set-based writes of one transaction, accumulated column by column."""

    orders: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    outbox: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    pending_add: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    pending_del: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    dead: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    rejected: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    approvals: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    cancelled: list[uuid.UUID] = dataclasses.field(default_factory=list)

    async def run(self, conn: asyncpg.Connection, records: list[list[Any]] | None = None) -> list[int]:
        """Write the rows; `records`: the decision log's columns (audit.log.record_columns). The usual rows
        (orders, notifications and their deliveries, decision log) go in one statement (issue 17)."""
        await lifecycle_records.write_approvals(conn, self.approvals, self.cancelled)  # issue 13: held steps
        if self.rejected:
            await conn.execute(query("gateway.sql", "insert_rejected"), *_columns(self.rejected, 11))
        if self.pending_del:
            await conn.execute(query("gateway.sql", "delete_pending"), *_columns(self.pending_del, 3))
        if self.pending_add:
            await conn.execute(query("gateway.sql", "insert_pending"), *_columns(self.pending_add, 7))
        records = records or [[] for _ in range(15)]
        if self.orders or self.outbox or records[0]:
            # Notifications wake the dispatchers at commit, and only then, without waiting for their poll.
            await conn.execute(
                query("gateway.sql", "write_batch"), *_columns(self.orders, 12), *_columns(self.outbox, 10), *records
            )
        if self.dead:
            rows = await conn.fetch(query("gateway.sql", "insert_dead_letters"), *_columns(self.dead, 8))
            return [r["id"] for r in rows]
        return []


def _columns(rows: list[tuple[Any, ...]], width: int) -> list[list[Any]]:
    return [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]


class Gateway:
    """Decides and applies agents' steps. Safe to call concurrently, from any number of processes."""

    def __init__(
        self,
        db: Database,
        *,
        record_plan_mismatch: bool = True,
        catalog: ProcessCatalog | None = None,
        validate: bool = True,
        default_max_order_amount: Decimal | str = Decimal(100000),
        decision_log: bool = True,
    ) -> None:
        self.db = db
        # Kafka ingress sends plan mismatches to its DLQ topic instead of the dead_letters table.
        self.record_plan_mismatch = record_plan_mismatch
        if catalog is None and validate:
            from nexus.processes import builtin_catalog

            catalog = builtin_catalog()
        # None: no process validation (steps apply by position only): the bench's "checks off" baseline.
        self.catalog = catalog if validate else None
        self.default_max_order_amount = Decimal(default_max_order_amount)
        # issue 12: every decision is a row of the decision log; off only to measure its cost (bench).
        self.decision_log = decision_log
        # issue 14: only orders of processes with effects pay for reading their sagas
        self.effect_processes = saga_records.effect_processes(self.catalog)

    async def submit(self, items: Sequence[Incoming], *, source: str = "http") -> list[Outcome]:
        """Decide and apply a batch; one outcome per item, in the items' order.

        Raises TransientDatabaseError when the database cannot be reached: nothing was written, and the
        same batch may be submitted again.
        """
        if not items:
            return []
        if tracing.active():  # issue 16: off, this check is the whole cost
            with tracing.submit_span(items, source) as span:
                outcomes = await self._submit(items, source)
                tracing.record_decisions(items, outcomes, span)
                return outcomes
        return await self._submit(items, source)

    async def _submit(self, items: Sequence[Incoming], source: str) -> list[Outcome]:
        try:
            return await self._submit_once(items, source)
        except TransientDatabaseError:
            # The server went away: its pooled connections may be half-dead; replace them all.
            await self.db.expire_connections()
            raise
        except Exception as exc:  # a poisonous item (refused by the database, or unserializable)
            log.warning(
                "batch rejected, isolating orders",
                exc_info=not isinstance(exc, PermanentDatabaseError),
                extra={"action": "isolate", "error": str(exc), "cause": repr(exc.__cause__)},
            )
            return await self._isolate(items, source)

    async def _isolate(self, items: Sequence[Incoming], source: str) -> list[Outcome]:
        """Each order alone; an order that still fails, each of its items alone, in order; an item that
        fails alone is dead-lettered. So a poisonous item never fails another request's events."""
        groups: dict[tuple[str, str] | None, list[int]] = defaultdict(list)
        for i, item in enumerate(items):
            groups[_key(item.envelope) if item.envelope else None].append(i)
        outcomes: list[Outcome | None] = [None] * len(items)
        for indexes in groups.values():
            group = [items[i] for i in indexes]
            try:
                results = await self._submit_once(group, source)
            except TransientDatabaseError:
                raise
            except Exception:  # noqa: BLE001 - narrowed down below, one item at a time
                results = []
                for item in group:
                    try:
                        results.extend(await self._submit_once([item], source))
                    except TransientDatabaseError:
                        raise
                    except Exception as exc:  # this item is the poison
                        log.warning(
                            "item refused, dead-lettered",
                            exc_info=not isinstance(exc, PermanentDatabaseError),
                            extra={"action": "isolate_item", "event_id": item.event_id, "cause": repr(exc.__cause__)},
                        )
                        results.extend(await self._reject([item], source, exc))
            for i, result in zip(indexes, results, strict=True):
                outcomes[i] = result
        return [o for o in outcomes if o is not None]

    async def _reject(self, group: list[Incoming], source: str, exc: Exception) -> list[Outcome]:
        """Dead-letter items the database refuses (or that cannot be serialized), in a transaction of their own."""
        failed = [dataclasses.replace(item, envelope=None, error=_refusal(exc)) for item in group]
        return await self._submit_once(failed, source)

    async def _submit_once(
        self,
        items: Sequence[Incoming],
        source: str,
        decided: Mapping[uuid.UUID, ApprovalDecision] | None = None,
    ) -> list[Outcome]:
        by_order: dict[tuple[str, str], list[int]] = defaultdict(list)
        for i, item in enumerate(items):
            if item.envelope is not None:
                by_order[_key(item.envelope)].append(i)
        order_ids = sorted(by_order)
        outcomes: list[Outcome | None] = [None] * len(items)
        writes = _Writes()
        dead_index: list[int] = []
        heads: dict[tuple[str, str], tuple[int, bytes]] = {}
        drained = 0
        blocked: list[ErrorCode] = []
        audit: list[Entry] = []  # issue 12: the decision log's rows, in decision order
        resolutions: list[Resolution] = []  # issue 14: the sagas' steps are recorded from them
        all_traces: dict[uuid.UUID, str | None] = {}
        now = dt.datetime.now(dt.UTC)  # issue 13: the clock of deadlines

        with wrap_db_errors():
            async with self.db.pool.acquire() as conn, conn.transaction():
                if order_ids:
                    await conn.execute(query("gateway.sql", "lock_orders"), *_pairs(order_ids))
                    states, pending, rejected, limits, heads = await self._read_batch(conn, order_ids)
                    await self._read_sagas(conn, states, items, by_order)  # issue 14
                    if decided:  # issue 13: an approval is answered once, under its order's lock
                        await lifecycle_records.decide_approvals(conn, decided)
                    for key in order_ids:
                        order_id = key[1]
                        indexes = by_order[key]
                        state = states.get(key) or OrderState(order_id)
                        resolution = resolve(
                            dataclasses.replace(state, rejections=len(rejected[key])) if key in rejected else state,
                            [items[i].envelope for i in indexes],  # type: ignore[misc]
                            pending.get(key, {}),
                            catalog=self.catalog,
                            limits=limits.get(key[0]) or {"max_order_amount": self.default_max_order_amount},
                            rejected=rejected.get(key),
                            now=now,
                            approvals={k: v.verdict for k, v in decided.items()} if decided else None,
                        )
                        traces = {items[i].envelope.event_id: items[i].traceparent for i in indexes}  # type: ignore[union-attr]
                        drained += self._plan(resolution, traces, writes)
                        resolutions.append(resolution)
                        all_traces.update(traces)
                        blocked.extend(r.verdict.code for r in resolution.rejections if r.drained)
                        held, cancelled = lifecycle_records.approval_rows(
                            resolution, self.catalog, traces, decided or {}
                        )
                        writes.approvals += held
                        writes.cancelled += cancelled
                        if self.decision_log:
                            actor = next(iter(decided.values())).by if decided else None
                            audit += resolution_entries(resolution, pending.get(key, {}), actor=actor)
                        for i, (event, decision, after) in zip(indexes, resolution.decisions, strict=True):
                            verdict = resolution.verdict_of(event.event_id) if decision is Decision.REJECTED else None
                            outcomes[i] = Outcome(
                                str(event.event_id),
                                decision,
                                verdict.code if verdict else code_of(decision, event, after),
                                status=after.status,
                                last_seq=after.last_seq,
                                check=verdict.check if verdict else None,
                                message=verdict.message if verdict else None,
                                effect=after.effect,
                                deadline=resolution.deadlines.get(event.event_id),
                                approval_id=lifecycle_records.approval_id_for(event.event_id, event.tenant_id)
                                if decision is Decision.HELD
                                else None,
                            )
                            if decision is Decision.PLAN_MISMATCH and self.record_plan_mismatch:
                                dead_index.append(i)
                                writes.dead.append(
                                    self._dead_row(
                                        source,
                                        ErrorCode.PLAN_MISMATCH,
                                        f"order {order_id} follows plan {resolution.before.plan_id}, "
                                        f"not {event.plan_id}",
                                        items[i],
                                    )
                                )
                for i, item in enumerate(items):
                    if item.envelope is None:
                        assert item.error is not None
                        dead_index.append(i)
                        writes.dead.append(self._dead_row(source, item.error.code, str(item.error), item))
                        outcomes[i] = Outcome(item.event_id, Decision.DEAD_LETTER, item.error.code, str(item.error))
                        audit.append(_ingress_entry(item))
                if source == "kafka":  # issue 13: the decisions, for nexus.decisions, in this transaction
                    await lifecycle_records.record_decisions(
                        conn,
                        (
                            (item.envelope, item.traceparent, outcome.as_json())
                            for item, outcome in zip(items, outcomes, strict=True)
                            if item.envelope is not None and outcome is not None
                        ),
                    )
                entries = audit if self.decision_log else []
                records = await record_columns(conn, entries, heads, set(order_ids))
                dead_ids = await writes.run(conn, records)
                if self.effect_processes:  # issue 14
                    await saga_records.record(conn, resolutions, self.catalog, all_traces)
                await lifecycle_records.notify_orders(conn, order_ids)  # issue 13: wake their waiters at commit

        for i, dead_id in zip(dead_index, dead_ids, strict=False):
            outcomes[i] = dataclasses.replace(outcomes[i], dead_letter_id=dead_id)  # type: ignore[type-var]
        final = [o for o in outcomes if o is not None]
        metrics.record_outcomes(items, final, drained)
        if log.isEnabledFor(logging.INFO):
            _log_decisions(items, final, source)
        metrics.record_blocked(blocked)
        return final

    async def _read_batch(
        self, conn: asyncpg.Connection, order_ids: list[tuple[str, str]]
    ) -> tuple[
        dict[tuple[str, str], OrderState],
        dict[tuple[str, str], dict[int, EventEnvelope]],
        dict[tuple[str, str], dict[uuid.UUID, Verdict]],
        dict[str, dict[str, Any]],
        dict[tuple[str, str], tuple[int, bytes]],
    ]:
        """The orders' rows and buffered steps, their rejected steps by event_id and the tenants' limits
        (when steps are validated), and their decision-log chain heads: one statement (issue 17)."""
        tenants = sorted({tenant for tenant, _ in order_ids})
        rows = await conn.fetch(
            query("gateway.sql", "read_batch"), *_pairs(order_ids), tenants, self.catalog is not None
        )
        pending: dict[tuple[str, str], dict[int, EventEnvelope]] = defaultdict(dict)
        rejected: dict[tuple[str, str], dict[uuid.UUID, Verdict]] = defaultdict(dict)
        limits: dict[str, dict[str, Any]] = {}
        heads: dict[tuple[str, str], tuple[int, bytes]] = {}
        order_rows = []
        for row in rows:
            kind = row["kind"]
            if kind == "order":
                order_rows.append(row)
            elif kind == "head":
                heads[(row["tenant_id"], row["order_id"])] = (row["position"], bytes(row["hash"]))
            elif kind == "pending":
                pending[(row["tenant_id"], row["order_id"])][row["seq_id"]] = parse_envelope(row["envelope"])
            elif kind == "rejected":
                verdict = Verdict(ErrorCode(row["code"]), row["message"], row["check_id"])
                rejected[(row["tenant_id"], row["order_id"])][row["event_id"]] = verdict
            else:
                limits[row["tenant_id"]] = {"max_order_amount": Decimal(row["max_order_amount"])}
        states = {(r["tenant_id"], r["order_id"]): _state_of(r, pending) for r in order_rows}
        for oid, steps in pending.items():
            if oid not in states:
                # the plan of a buffered step (any: they share it, or PLAN_MISMATCH kept them out)
                plan_id = next(iter(steps.values())).plan_id
                states[oid] = OrderState(oid[1], plan_id=plan_id, buffered=frozenset(steps))
        if self.catalog is not None:  # issue 13: a step held for approval takes its order's next seq
            await lifecycle_records.read_held(conn, states, order_ids)
        return states, pending, rejected, limits, heads

    async def _read(
        self, conn: asyncpg.Connection, order_ids: list[tuple[str, str]]
    ) -> tuple[dict[tuple[str, str], OrderState], dict[tuple[str, str], dict[int, EventEnvelope]]]:
        """The orders' states and buffered steps (for the saga outcomes; submit reads with `_read_batch`)."""
        pending: dict[tuple[str, str], dict[int, EventEnvelope]] = defaultdict(dict)
        plans: dict[tuple[str, str], str] = {}
        for row in await conn.fetch(query("gateway.sql", "read_pending"), *_pairs(order_ids)):
            envelope = parse_envelope(row["envelope"])
            key = (row["tenant_id"], row["order_id"])
            pending[key][row["seq_id"]] = envelope
            plans[key] = envelope.plan_id
        states: dict[tuple[str, str], OrderState] = {}
        for row in await conn.fetch(query("gateway.sql", "read_orders"), *_pairs(order_ids)):
            states[(row["tenant_id"], row["order_id"])] = _state_of(row, pending)
        for oid, seqs in pending.items():
            if oid not in states:
                states[oid] = OrderState(oid[1], plan_id=plans[oid], buffered=frozenset(seqs))
        if self.catalog is not None:  # issue 13: a step held for approval takes its order's next seq
            await lifecycle_records.read_held(conn, states, order_ids)
        return states, pending

    async def _read_sagas(
        self,
        conn: asyncpg.Connection,
        states: dict[tuple[str, str], OrderState],
        items: Sequence[Incoming],
        by_order: dict[tuple[str, str], list[int]],
    ) -> None:
        """issue 14: the sagas holding the batch's orders (only orders of processes with effects)."""
        if not self.effect_processes:
            return
        keys = [
            key
            for key, state in states.items()
            if (state.process or items[by_order[key][0]].envelope.process_name)  # type: ignore[union-attr]
            in self.effect_processes
        ]
        await saga_records.annotate(conn, states, keys)

    async def _read_rejections(
        self, conn: asyncpg.Connection, order_ids: list[tuple[str, str]]
    ) -> tuple[dict[tuple[str, str], dict[uuid.UUID, Verdict]], dict[str, dict[str, Any]]]:
        """The orders' rejected steps by event_id, and the batch's tenants' limits."""
        if self.catalog is None:
            return {}, {}
        tenants = sorted({tenant for tenant, _ in order_ids})
        rejected: dict[tuple[str, str], dict[uuid.UUID, Verdict]] = defaultdict(dict)
        limits: dict[str, dict[str, Any]] = {}
        rows = await conn.fetch(query("gateway.sql", "read_rejections_and_limits"), *_pairs(order_ids), tenants)
        for row in rows:
            if row["event_id"] is None:
                limits[row["tenant_id"]] = {"max_order_amount": Decimal(row["max_order_amount"])}
            else:
                verdict = Verdict(ErrorCode(row["code"]), row["message"], row["check_id"])
                rejected[(row["tenant_id"], row["key"])][row["event_id"]] = verdict
        return rejected, limits

    @staticmethod
    def _plan(
        resolution: Resolution,
        traces: dict[uuid.UUID, str | None],
        writes: _Writes,
    ) -> int:
        """Turn one order's resolution into rows; return how many buffered events it drained."""
        after = resolution.after
        if after.status is not None and after != resolution.before:
            writes.orders.append(
                (
                    after.order_id,
                    _tenant(resolution),
                    after.plan_id,
                    str(after.status),
                    after.last_seq,
                    after.tombstone,
                    after.outbox_count,
                    after.process or "order",
                    after.process_version or 1,
                    json.dumps(dict(after.facts), default=str),
                    "\x1f".join(sorted(after.superseded)),  # identifiers never contain U+001F
                    after.deadline_at,
                )
            )
        for rejection in resolution.rejections:
            if rejection.replay:
                continue
            event, verdict = rejection.event, rejection.verdict
            writes.rejected.append(
                (
                    event.event_id,
                    event.order_id,
                    event.plan_id,
                    event.tenant_id,
                    event.seq_id,
                    str(event.event_type),
                    verdict.code.value,
                    verdict.check,
                    _text(verdict.message),
                    rejection.drained,
                    event.model_dump_json(),
                )
            )
        tenant = _tenant(resolution)
        for seq in resolution.unbuffered:
            writes.pending_del.append((after.order_id, seq, tenant))
        for event in resolution.buffered:
            writes.pending_add.append(
                (
                    event.order_id,
                    event.seq_id,
                    event.event_id,
                    event.plan_id,
                    event.model_dump_json(),
                    traces.get(event.event_id),
                    event.tenant_id,
                )
            )
        for applied in resolution.applied:
            if applied.effect:  # issue 14: notified once its effect succeeds (nexus.saga.outcomes)
                continue
            event = applied.event
            status_after = applied.status
            notification_id = outbox_id_for(event.event_id, event.tenant_id)
            payload = {
                "notification_id": str(notification_id),
                "order_id": event.order_id,
                "plan_id": event.plan_id,
                "tenant_id": event.tenant_id,
                "position": applied.position,
                "event_type": str(event.event_type),
                "seq_id": event.seq_id,
                "status": str(status_after),
            }
            # The envelope's JSON spliced in as it is (the column is jsonb): not decoded to be encoded again.
            body = f'{json.dumps(payload)[:-1]}, "event": {event.model_dump_json()}}}'
            writes.outbox.append(
                (
                    notification_id,
                    event.order_id,
                    applied.position,
                    event.event_id,
                    str(event.event_type),
                    event.seq_id,
                    event.plan_id,
                    body,
                    traces.get(event.event_id),
                    event.tenant_id,
                )
            )
        return sum(1 for a in resolution.applied if a.drained)

    @staticmethod
    def _dead_row(source: str, code: ErrorCode, error: str, item: Incoming) -> tuple[Any, ...]:
        env = item.envelope
        return (
            source,
            code.value,
            _text(error),
            item.event_id and _text(item.event_id),
            env.order_id if env else None,
            env.plan_id if env else None,
            _text(item.raw),
            env.tenant_id if env else item.tenant_id,
        )

    async def submit_approval(self, item: Incoming, decision: ApprovalDecision) -> list[Outcome]:
        """issue 13: decide a held step with a person's answer (nexus.lifecycle.approvals), in one
        transaction with the approvals row's change; ApprovalNotPendingError if it was answered already."""
        assert item.envelope is not None
        with_cause = {item.envelope.event_id: decision}
        try:
            return await self._submit_once([item], "approval", with_cause)
        except TransientDatabaseError:
            await self.db.expire_connections()
            raise

    async def abort_overdue(self, *, limit: int = 500) -> int:
        """issue 13: abort live plans past their deadline (abort_code timeout); return how many applied.

        Each abort goes through `submit` (the order's advisory lock, a fresh read, the pure decision) with
        the plan's one timeout-abort id: a plan no longer due, or already aborted by another gateway's
        sweeper, answers DUPLICATE, so any number of sweepers write one abort and one notification."""
        now = dt.datetime.now(dt.UTC)
        rows = await self.db.fetch(query("lifecycle.sql", "overdue_orders"), now, limit)
        if not rows:
            return 0
        aborts = [
            Incoming.of(
                deadline_abort(
                    OrderState(r["order_id"], plan_id=r["plan_id"], last_seq=r["last_seq"]), r["tenant_id"], now
                )
            )
            for r in rows
        ]
        outcomes = await self.submit(aborts, source="deadline")
        applied = sum(1 for o in outcomes if o.decision is Decision.APPLY)
        if applied:
            log.info("overdue plans aborted", extra={"action": "deadline_abort", "count": applied})
        return applied

    async def expire_buffered(self, timeout_s: float, *, limit: int = 500) -> list[int]:
        """Dead-letter buffered steps whose gap has not filled for `timeout_s`; return the dead-letter ids.

        Each expired step leaves the buffer and enters dead_letters in the same transaction, under its
        order's advisory lock, so it is dead-lettered once and never applied afterwards.
        """
        with wrap_db_errors():
            async with self.db.pool.acquire() as conn, conn.transaction():
                candidates = [
                    (r["tenant_id"], r["order_id"])
                    for r in await conn.fetch(query("gateway.sql", "expiry_candidates"), timeout_s, limit)
                ]
                if not candidates:
                    return []
                candidates.sort()
                await conn.execute(query("gateway.sql", "lock_orders"), *_pairs(candidates))
                rows = await conn.fetch(query("gateway.sql", "expire_pending"), *_pairs(candidates), timeout_s)
                if not rows:
                    return []
                dead = [
                    (
                        "buffer",
                        ErrorCode.BUFFER_TIMEOUT.value,
                        f"seq {r['seq_id']} waited more than {timeout_s:g}s for its predecessor",
                        r["event_id"],
                        r["order_id"],
                        r["plan_id"],
                        r["envelope"],
                        r["tenant_id"],
                    )
                    for r in rows
                ]
                ids = await conn.fetch(query("gateway.sql", "insert_dead_letters"), *_columns(dead, 8))
                if self.decision_log:
                    await record_entries(conn, [_expiry_entry(r, d[2]) for r, d in zip(rows, dead, strict=True)])
                await lifecycle_records.notify_orders(conn, ((r["tenant_id"], r["order_id"]) for r in rows))
        metrics.record_buffer_timeouts(len(rows))
        log.info("buffered steps expired", extra={"action": "buffer_timeout", "count": len(rows)})
        return [r["id"] for r in ids]


def _state_of(row: Any, pending: dict[tuple[str, str], dict[int, EventEnvelope]]) -> OrderState:
    """An order's state from its row (read_orders, read_batch) and its buffered steps."""
    return OrderState(
        order_id=row["order_id"],
        plan_id=row["plan_id"],
        status=as_status(row["status"]),
        last_seq=row["last_seq"],
        buffered=frozenset(pending.get((row["tenant_id"], row["order_id"]), {})),
        tombstone=row["tombstone"],
        outbox_count=row["outbox_count"],
        process=row["process"],
        process_version=row["process_version"],
        facts=json.loads(row["facts"]) if row["facts"] != "{}" else {},
        superseded=frozenset(row["superseded_plans"] or ()),
        deadline_at=row["deadline_at"],
    )


def _text(value: str) -> str:
    """PostgreSQL text holds neither NUL nor lone surrogates: keep the dead letter, escaped, rather than lose it."""
    return value.replace("\x00", "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")


# Unique keys on a step's event_id: a second step reusing an event_id hits one of them.
_EVENT_ID_CONSTRAINTS = frozenset({"outbox_pkey", "outbox_event_id_key", "pending_events_event_id_key"})


def _refusal(exc: Exception) -> InvalidEventError:
    """Why an item was refused, in words safe to show its sender (no driver text)."""
    if isinstance(exc, PermanentDatabaseError):
        if exc.constraint in _EVENT_ID_CONSTRAINTS:
            return InvalidEventError("event_id is already used by another step", code=ErrorCode.INVALID_EVENT)
        return InvalidEventError(f"{exc.message}: the item cannot be stored", code=exc.code)
    return InvalidEventError("the item cannot be serialized or stored", code=ErrorCode.DATABASE_REJECTED)


def _key(envelope: EventEnvelope) -> tuple[str, str]:
    """An order's identity: (tenant, order_id)."""
    return (envelope.tenant_id, envelope.order_id)


def _pairs(keys: Sequence[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """(tenant, order_id) pairs as the two arrays the queries take."""
    return [t for t, _ in keys], [o for _, o in keys]


def _tenant(resolution: Resolution) -> str:
    for event, _, _ in resolution.decisions:
        return event.tenant_id
    return "default"


def _log_decisions(items: Sequence[Incoming], outcomes: Sequence[Outcome], source: str) -> None:
    """One line per decided step, with the stable keys that let a person follow an order through the logs."""
    # strict=False: a log line must never be what fails a submission
    for item, outcome in zip(items, outcomes, strict=False):
        env = item.envelope
        log.info(
            "step %s",
            outcome.decision.value,
            extra={
                "action": "decide",
                "decision": outcome.decision.value,
                "event_id": outcome.event_id,
                "order_id": env.order_id if env else None,
                "plan_id": env.plan_id if env else None,
                "tenant_id": env.tenant_id if env else None,
                "trace_id": trace_id_of(item.traceparent),
                "seq_id": env.seq_id if env else None,
                "code": outcome.code.value if outcome.code else None,
                "source": source,
            },
        )


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id (32 hex digits) of a W3C traceparent ``00-<trace id>-<span id>-<flags>``."""
    if not traceparent:
        return None
    parts = traceparent.split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None


# --- issue 12: decision-log rows of decisions taken outside an order's resolution ------------------


def _ingress_entry(item: Incoming) -> Entry:
    """An item with no valid envelope has no trustworthy order: it is logged in the ingress chain."""
    assert item.error is not None
    event_id = item.event_id
    return Entry(
        tenant_id=item.tenant_id,
        order_id=INGRESS_ORDER,
        decision=Decision.DEAD_LETTER.value,
        event_id=_text(event_id)[:200] if event_id is not None else None,
        code=item.error.code.value,
        message=_text(str(item.error))[:1000],
    )


def _expiry_entry(row: Any, message: str) -> Entry:
    envelope = parse_envelope(row["envelope"])
    return Entry(
        tenant_id=envelope.tenant_id,
        order_id=row["order_id"],
        decision=Decision.DEAD_LETTER.value,
        event_id=row["event_id"],
        plan_id=row["plan_id"],
        seq=row["seq_id"],
        event_type=str(envelope.event_type),
        code=ErrorCode.BUFFER_TIMEOUT.value,
        message=message,
    )
