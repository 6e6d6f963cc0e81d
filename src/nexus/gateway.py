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

from nexus import metrics, plan_steps, tracing
from nexus.audit.log import record_columns, record_entries
from nexus.batch_rows import Writes, columns, pairs, plan_writes, postgres_text, read_batch
from nexus.core import strict_json
from nexus.core.audit import INGRESS_ORDER, Entry, resolution_entries
from nexus.core.envelope import EventEnvelope, parse_envelope
from nexus.core.numbering import Proposal
from nexus.core.process import ProcessCatalog
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


@dataclasses.dataclass(frozen=True, slots=True)
class Incoming:
    """One item handed to the gateway: a parsed envelope, or the raw input and why it failed to parse."""

    raw: str
    envelope: EventEnvelope | None = None
    error: InvalidEventError | None = None
    traceparent: str | None = None
    tenant_id: str = "default"
    """The tenant the caller's key (or the Kafka topic) speaks for; see nexus.auth.tenants."""
    proposal: Proposal | None = None
    """A step proposed without a number (the steps API): numbered under its order's lock (nexus.plan_steps)."""

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
    seq_id: int | None = None
    """The step's sequence number (a numbered step's, or a repeat's first)."""
    first: Mapping[str, Any] | None = None
    """A repeated numbered step (DUPLICATE): the first verdict (decision, code, check, message)."""

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
        writes = Writes()
        dead_index: list[int] = []
        heads: dict[tuple[str, str], tuple[int, bytes]] = {}
        drained = 0
        blocked: list[ErrorCode] = []
        audit: list[Entry] = []  # issue 12: the decision log's rows, in decision order
        resolutions: list[Resolution] = []  # issue 14: the sagas' steps are recorded from them
        all_traces: dict[uuid.UUID, str | None] = {}
        now = dt.datetime.now(dt.UTC)  # issue 13: the clock of deadlines
        numbered: plan_steps.Numbered | None = None

        with wrap_db_errors():
            async with self.db.pool.acquire() as conn, conn.transaction():
                if order_ids:
                    await conn.execute(query("gateway.sql", "lock_orders"), *pairs(order_ids))
                    states, pending, rejected, limits, heads = await read_batch(
                        conn, order_ids, validated=self.catalog is not None
                    )
                    await self._read_sagas(conn, states, items, by_order)  # issue 14
                    # --- server-numbered steps: numbered here, under the lock, before the decision ---
                    if any(item.proposal is not None for item in items):
                        window = self.db.settings.repeat_window_s
                        numbered = await plan_steps.number(conn, items, by_order, states, pending, now, window)
                        items, audit = numbered.items, numbered.entries
                        decide = set(numbered.new)  # the deferred proposals wait for the next transaction
                        by_order = {
                            k: [i for i in v if i in decide or not items[i].proposal] for k, v in by_order.items()
                        }
                    # --- end of server-numbered steps ---
                    if decided:  # issue 13: an approval is answered once, under its order's lock
                        await lifecycle_records.decide_approvals(conn, decided)
                    for key in order_ids:
                        order_id = key[1]
                        indexes = by_order[key]
                        if not indexes:  # every step of this order was a numbered repeat
                            continue
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
                        drained += plan_writes(resolution, traces, writes)
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
                                seq_id=event.seq_id,
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
                if numbered is not None:  # server-numbered steps: repeats answered, first verdicts stored
                    plan_steps.finish(numbered, outcomes, Outcome)
                    await plan_steps.record(conn, numbered, outcomes, now)
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
        now_decided = [item for item, o in zip(items, outcomes, strict=True) if o is not None]
        final = [o for o in outcomes if o is not None]
        metrics.record_outcomes(now_decided, final, drained)
        if log.isEnabledFor(logging.INFO):
            _log_decisions(now_decided, final, source)
        metrics.record_blocked(blocked)
        if numbered is not None and numbered.deferred:  # server-numbered steps: an order's next, now
            later = await self._submit_once([items[i] for i in numbered.deferred], source)
            for i, outcome in zip(numbered.deferred, later, strict=True):
                outcomes[i] = outcome
            final = [o for o in outcomes if o is not None]
        return final

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

    @staticmethod
    def _dead_row(source: str, code: ErrorCode, error: str, item: Incoming) -> tuple[Any, ...]:
        env = item.envelope
        return (
            source,
            code.value,
            postgres_text(error),
            item.event_id and postgres_text(item.event_id),
            env.order_id if env else None,
            env.plan_id if env else None,
            postgres_text(item.raw),
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
                await conn.execute(query("gateway.sql", "lock_orders"), *pairs(candidates))
                rows = await conn.fetch(query("gateway.sql", "expire_pending"), *pairs(candidates), timeout_s)
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
                ids = await conn.fetch(query("gateway.sql", "insert_dead_letters"), *columns(dead, 8))
                if self.decision_log:
                    await record_entries(conn, [_expiry_entry(r, d[2]) for r, d in zip(rows, dead, strict=True)])
                await lifecycle_records.notify_orders(conn, ((r["tenant_id"], r["order_id"]) for r in rows))
        metrics.record_buffer_timeouts(len(rows))
        log.info("buffered steps expired", extra={"action": "buffer_timeout", "count": len(rows)})
        return [r["id"] for r in ids]


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
        event_id=postgres_text(event_id)[:200] if event_id is not None else None,
        code=item.error.code.value,
        message=postgres_text(str(item.error))[:1000],
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
