"""`Gateway.submit`: the one entry point. Lock, read, plan, write: one transaction per batch.

Every ingress (HTTP, Kafka, redrive, approvals, the deadline sweeper) hands its items here, with its
`IngressKind`. A batch is written with a fixed number of set-based statements whatever its size: advisory
locks for its orders (in key order, so batches never deadlock), one read of their state and buffer
(`batch_rows.read_batch`), the pure `plan_batch` of the core (every decision is there), then one statement
per table (`batch_rows.write_plan`). The buffer sweeper (`expire_buffered`) does the same, its expiry
decided by the same fold. If the shared transaction fails for a permanent reason, the one isolation policy
(`core/decide/isolation.py`) splits it so one culprit cannot fail its neighbours, whatever the door; transient
failures propagate for the caller to retry as a whole.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import uuid
from collections.abc import Mapping, Sequence
from decimal import Decimal

import asyncpg

from nexus import metrics, plan_steps, tracing
from nexus.batch_rows import pairs, read_batch, read_buffered, write_plan
from nexus.core.actors import SYSTEM_DEADLINE, SYSTEM_SAGA
from nexus.core.decide import isolation
from nexus.core.decide.answers import Outcome
from nexus.core.decide.deadlines import deadline_abort
from nexus.core.decide.effects import effect_failed_abort
from nexus.core.decide.expiry import Expiry
from nexus.core.decide.items import EffectOutcome, EffectResult, Incoming, IngressKind, order_key
from nexus.core.decide.log import DecisionLog
from nexus.core.decide.outcomes import settled, settled_retrying
from nexus.core.decide.plan import BatchPlan, BatchReads, Parts, plan_batch
from nexus.core.decide.plan_start import OrderKnown, PlanStart
from nexus.core.decide.validation import StepChecks
from nexus.core.order_state import OrderState
from nexus.core.process_model import ProcessCatalog
from nexus.core.saga import SagaStatus
from nexus.errors import ErrorCode, TransientDatabaseError
from nexus.fold_thread import FoldThread
from nexus.store import lifecycle as lifecycle_records
from nexus.store import sagas as saga_records
from nexus.store.database import Database
from nexus.store.errors import wrap_db_errors
from nexus.store.lifecycle import ApprovalDecision
from nexus.store.locked import locked_transaction
from nexus.store.queries import query
from nexus.store.saga_keys import SagaSecret
from nexus_wire.codes import Decision

__all__ = ["Gateway", "trace_id_of"]

log = logging.getLogger(__name__)

OrderKey = tuple[str, str]


class Gateway:
    """Decides and applies agents' steps. Safe to call concurrently, from any number of processes.

    Injected parts: `catalog` (the processes; default: the shipped ones), `checks` (`NoChecks()`: steps
    apply by position, judged by nothing: the validation benchmark's baseline), `log` (`NoDecisionLog()`:
    the decision log records nothing: its cost benchmark's baseline), `folds` (heavy folds' thread; default none).
    """

    def __init__(
        self,
        db: Database,
        *,
        record_plan_mismatch: bool = True,
        catalog: ProcessCatalog | None = None,
        checks: StepChecks | None = None,
        log: DecisionLog | None = None,
        default_max_order_amount: Decimal | str = Decimal(100000),
        folds: FoldThread | None = None,
    ) -> None:
        self.db, self.folds = db, folds or FoldThread()
        from nexus.processes import builtin_catalog, shipped_kinds

        metrics.born_event_kinds(shipped_kinds())
        if catalog is None:
            catalog = builtin_catalog()
        self.catalog = catalog
        self.default_max_order_amount = Decimal(default_max_order_amount)
        self.parts = Parts(
            catalog=catalog,
            checks=checks or StepChecks(),
            log=log or DecisionLog(),
            # Kafka ingress sends plan mismatches to its DLQ topic instead of the dead_letters table.
            record_plan_mismatch=record_plan_mismatch,
            default_limits={"max_order_amount": self.default_max_order_amount},
            repeat_window_s=db.settings.repeat_window_s,
        )
        # only orders of processes with effects pay for reading their sagas
        self.effect_processes = saga_records.effect_processes(catalog) if self.parts.checks.checks else frozenset()
        self.saga_secret = SagaSecret(db.settings.saga_secret)

    async def submit(self, items: Sequence[Incoming], *, source: IngressKind | str = IngressKind.HTTP) -> list[Outcome]:
        """Decide and apply a batch; one outcome per item, in the items' order.

        Raises TransientDatabaseError when the database cannot be reached: nothing was written, and the
        same batch may be submitted again.
        """
        if not items:
            return []
        kind = IngressKind(source)
        if tracing.active():  # off, this check is the whole cost
            with tracing.submit_span(items, kind.value) as span:
                outcomes = await self._submit(items, kind)
                tracing.record_decisions(items, outcomes, span)
                return outcomes
        return await self._submit(items, kind)

    async def _submit(self, items: Sequence[Incoming], kind: IngressKind) -> list[Outcome]:
        try:
            return await self._submit_once(items, kind)
        except TransientDatabaseError:
            # The server went away: its pooled connections may be half-dead; replace them all.
            await self.db.expire_connections()
            raise
        except Exception as exc:  # a poisonous item (refused by the database, or unserializable): isolated below
            log.warning("batch refused, isolating its orders", extra=isolation.batch_line(len(items), exc))
            log.debug("the refused batch's failure", exc_info=exc, extra={"action": "isolate"})
            return await self._isolate(items, kind)

    async def _isolate(self, items: Sequence[Incoming], kind: IngressKind) -> list[Outcome]:
        """The one isolation policy (`core/decide/isolation.py`): each order alone; an order that still fails,
        each of its items alone, in order; an item that fails alone, dead-lettered. So a poisonous item never
        fails another request's events."""
        outcomes: list[Outcome | None] = [None] * len(items)
        for indexes in isolation.order_groups(items):
            group = [items[i] for i in indexes]
            try:
                results = await self._submit_once(group, kind)
            except TransientDatabaseError:
                raise
            except Exception:  # noqa: BLE001 - narrowed down below, one item at a time
                results = [await self._submit_alone(item, kind) for item in group]
            for i, result in zip(indexes, results, strict=True):
                outcomes[i] = result
        return [o for o in outcomes if o is not None]

    async def _submit_alone(self, item: Incoming, kind: IngressKind) -> Outcome:
        """One item alone; refused again, its dead letter (payload and order kept); that refused too, the
        policy's unstored answer. One bounded log line per isolated item, no traceback."""
        try:
            [outcome] = await self._submit_once([item], kind)
        except TransientDatabaseError:
            raise
        except Exception as exc:  # noqa: BLE001 - the policy decides what the refused item becomes
            dead = isolation.isolated(item, exc)
            log.warning("item refused alone, dead-lettered", extra=isolation.isolation_line(item, dead.error, exc))
        else:
            return outcome
        try:
            [outcome] = await self._submit_once([dead], kind)
        except TransientDatabaseError:
            raise
        except Exception as exc:  # noqa: BLE001 - even the dead letter is refused: answered, not stored
            log.warning("dead letter refused, not stored", extra=isolation.isolation_line(item, None, exc))
            return isolation.unstored(item)
        return outcome

    async def _submit_once(
        self, items: Sequence[Incoming], kind: IngressKind, decided: Mapping[uuid.UUID, ApprovalDecision] | None = None
    ) -> list[Outcome]:
        """Lock, read, plan, write: one transaction."""
        order_ids = sorted({order_key(item.envelope) for item in items if item.envelope is not None})
        now = dt.datetime.now(dt.UTC)  # the clock of deadlines and of the repeat window
        with wrap_db_errors():
            # a heavy lane's connection from its own pool; BEGIN and the locks in one round trip
            async with self.db.lane_pool.acquire() as conn, locked_transaction(conn, order_ids):
                reads = BatchReads()
                if order_ids:
                    reads = await self._read(conn, order_ids, items, kind)
                    if decided:  # an approval is answered once, under its order's lock
                        await lifecycle_records.decide_approvals(conn, decided)
                answers = {k: v.verdict for k, v in decided.items()} if decided else None
                plan = await self.folds.plan(items, reads, self.parts, kind=kind, now=now, approvals=answers)
                dead_ids = await self._write(conn, plan, reads, order_ids)
        return self._answered(items, plan, dead_ids, kind)

    async def _read(
        self, conn: asyncpg.Connection, order_ids: list[OrderKey], items: Sequence[Incoming], kind: IngressKind
    ) -> BatchReads:
        numbering = plan_steps.asked(items)  # the steps API's: the numbering's reads, in the same statement
        reads = await read_batch(conn, order_ids, validated=self.parts.checks.checks, numbering=numbering)
        if kind is IngressKind.DEADLINE:  # the sweeper's aborts: plans started with no step, and their deadlines
            timeout_s = self.db.settings.plan_start_timeout_s
            reads = await lifecycle_records.with_unstarted_plans(conn, reads, order_ids, timeout_s)
        if self.effect_processes:  # the sagas holding the batch's orders
            first = {order_key(i.envelope): i.envelope.process_name for i in reversed(items) if i.envelope}
            states = dict(reads.states)
            keys = [k for k, s in states.items() if (s.process or first.get(k)) in self.effect_processes]
            gates = await saga_records.annotate(conn, states, keys)
            reads = dataclasses.replace(reads, states=states, gates=gates)
        return reads

    async def _write(
        self, conn: asyncpg.Connection, plan: BatchPlan, reads: BatchReads, order_ids: list[OrderKey]
    ) -> list[int]:
        dead_ids = await write_plan(conn, plan, reads, order_ids)  # the numbered steps' first verdicts too
        if self.effect_processes:
            await saga_records.record(conn, plan.resolutions, self.catalog, plan.traces, self.saga_secret, plan.turns)
        return dead_ids

    @staticmethod
    def _answered(items: Sequence[Incoming], plan: BatchPlan, dead_ids: list[int], kind: IngressKind) -> list[Outcome]:
        outcomes = list(plan.answers)
        for i, dead_id in zip(plan.dead_letter_items, dead_ids, strict=False):
            outcomes[i] = dataclasses.replace(outcomes[i], dead_letter_id=dead_id)
        metrics.record_outcomes(items, outcomes, plan.drained)
        if log.isEnabledFor(logging.INFO):
            _log_decisions(items, outcomes, kind)
        metrics.record_blocked(list(plan.blocked))
        return outcomes

    async def submit_approval(self, item: Incoming, decision: ApprovalDecision) -> list[Outcome]:
        """Decide a held step with a person's answer (nexus.lifecycle.approvals), in one transaction with
        the approvals row's change (`item.actor`: who answered); ApprovalNotPendingError if it was answered
        already."""
        assert item.envelope is not None
        answered = {item.envelope.event_id: decision}
        try:
            return await self._submit_once([item], IngressKind.APPROVAL, answered)
        except TransientDatabaseError:
            await self.db.expire_connections()
            raise

    async def fold_effects(
        self, conn: asyncpg.Connection, outcomes: Sequence[EffectOutcome], lease_s: float, owner: str
    ) -> dict[OrderKey, tuple[SagaStatus, list[asyncpg.Record]]]:
        """Fold a batch of saga calls' outcomes (one per saga, of different orders) in the caller's transaction:
        lock, read (the sagas, and the orders of the successes), plan (`plan_batch`, `core/decide/outcomes.py`),
        write. Returns the status and steps of the sagas the writer (`owner`) keeps leased for `lease_s`, by saga."""
        keys = sorted({o.key for o in outcomes})
        now = dt.datetime.now(dt.UTC)  # the clock of the steps' and sagas' times the fold decides
        await conn.execute(query("gateway.sql", "lock_orders"), *pairs(keys))
        sagas, retrying = await saga_records.finish_calls(conn, keys, outcomes, now)
        # the orders of the successes (applied) and of the compensations (notified)
        done = sorted({o.key for o in outcomes if o.envelope is not None or o.result is EffectResult.COMPENSATED})
        reads = await read_batch(conn, done, validated=self.parts.checks.checks) if done else BatchReads()
        reads = dataclasses.replace(reads, sagas=sagas, retrying=retrying)
        plan = plan_batch([], reads, self.parts, kind=IngressKind.SAGA, now=now, effects=outcomes)
        await write_plan(conn, plan, reads, done)
        if plan.resolutions:
            await saga_records.record(conn, plan.resolutions, self.catalog, {}, self.saga_secret, plan.turns)
        await saga_records.finish_compensations(conn, plan.compensated, plan.outbox_counts)
        return await saga_records.set_sagas(conn, plan.sagas, lease_s, owner)

    async def settle_saga(self, key: OrderKey, claimed: SagaStatus) -> None:
        """A claimed saga with nothing to call (`claimed`: its status at the claim): lock, read it again (a
        step recorded since the claim is not slept through), decide (`core/decide/outcomes.settled`), write,
        in one transaction; a compensation over aborts the plan (`effect_failed`)."""
        with wrap_db_errors():
            async with self.db.pool.acquire() as conn, conn.transaction():
                await conn.execute(query("gateway.sql", "lock_orders"), *pairs([key]))
                await lifecycle_records.notify_orders(conn, [key])
                read = await saga_records.read_settling(conn, key)
                after = settled(claimed, read.status, read.steps)
                retrying = settled_retrying(after.delay_s, read.retrying_since, read.retrying_service)
                await saga_records.set_saga(conn, key, after.status, after.delay_s, retrying)
                if after.abort_reason is not None:
                    await self.abort_for_effects(conn, key, after.abort_reason)

    async def abort_for_effects(self, conn: asyncpg.Connection, key: OrderKey, reason: str) -> bool:
        """Compensation is over: abort the order's plan (`effect_failed`, `core/decide/effects.py`) unless it
        already is, folded by `plan_batch` in the caller's transaction under the order's lock; True if written."""
        await conn.execute(query("gateway.sql", "lock_orders"), *pairs([key]))
        reads = await read_batch(conn, [key], validated=self.parts.checks.checks)
        gates = await saga_records.annotate(conn, {}, [key])  # the saga as it is: the fold decides its turn
        state = reads.states.get(key) or OrderState(key[1])
        abort = effect_failed_abort(state, key[0], reason, dt.datetime.now(dt.UTC))
        if abort is None:
            return False
        # the saga's compensation is over: nothing holds the order any more
        states = {key: dataclasses.replace(state, effect=None, past_pivot=False)}
        reads = dataclasses.replace(reads, states=states, gates=gates)
        item = Incoming.of(abort, actor=SYSTEM_SAGA)
        plan = plan_batch([item], reads, self.parts, kind=IngressKind.SAGA, now=None)
        await write_plan(conn, plan, reads, [key])
        await saga_records.record(conn, plan.resolutions, self.catalog, {}, self.saga_secret, plan.turns)
        return True

    async def start_plan(self, start: PlanStart) -> ErrorCode | None:
        """One plan started (`start_plans`): its refusal (ORDER_EXISTS), or None once started."""
        return (await self.start_plans([start]))[0]

    async def start_plans(self, starts: Sequence[PlanStart]) -> list[ErrorCode | None]:
        """Start plans before their first step in one transaction (the group commit's plan-start lanes): lock, read,
        plan (`plan_batch`'s `starts`: `core/decide/plan_start.py`, in their order), write. Each start's refusal
        (ORDER_EXISTS: nothing written for it), or None once started."""
        keys = sorted({(s.tenant_id, s.order_id) for s in starts})
        with wrap_db_errors():
            async with self.db.pool.acquire() as conn, locked_transaction(conn, keys):
                rows = await conn.fetch(query("steps.sql", "orders_known"), *pairs(keys))
                reads = BatchReads(known={(r[0], r[1]): OrderKnown(*tuple(r)[2:]) for r in rows})
                plan = plan_batch([], reads, self.parts, kind=IngressKind.HTTP, now=None, starts=starts)
                if plan.started:  # a PlanStart's fields are the plans row's columns, in order
                    await conn.executemany(query("steps.sql", "create_plan"), map(dataclasses.astuple, plan.started))
        return list(plan.start_refusals)

    async def abort_overdue(self, *, limit: int = 500) -> int:
        """Abort live plans past their deadline (abort_code timeout), and end plans started with no step yet
        past their implicit one (NEXUS_PLAN_START_TIMEOUT_S: TOMBSTONE, no notification); return how many.

        Each abort goes through `submit` (the order's advisory lock, a fresh read, the pure decision) with
        the plan's one timeout-abort id: a plan no longer due, or already aborted by another gateway's
        sweeper, answers DUPLICATE, so any number of sweepers write one abort and one notification."""
        now = dt.datetime.now(dt.UTC)
        rows = await self.db.fetch(query("lifecycle.sql", "overdue_orders"), now, limit)
        unstarted = await self.db.fetch(
            query("lifecycle.sql", "unstarted_overdue_plans"), now, self.db.settings.plan_start_timeout_s, limit
        )
        if not rows and not unstarted:
            return 0
        aborts = [
            Incoming.of(
                deadline_abort(
                    OrderState(r["order_id"], plan_id=r["plan_id"], last_seq=r.get("last_seq", 0)), r["tenant_id"], now
                ),
                actor=SYSTEM_DEADLINE,
            )
            for r in [*rows, *unstarted]
        ]
        outcomes = await self.submit(aborts, source=IngressKind.DEADLINE)
        ended = sum(1 for o in outcomes if o.decision in (Decision.APPLY, Decision.TOMBSTONE))
        if ended:
            log.info("overdue plans aborted", extra={"action": "deadline_abort", "count": ended})
        return ended

    async def expire_buffered(self, timeout_s: float, *, limit: int = 500) -> list[int]:
        """Dead-letter buffered steps whose gap has not filled for `timeout_s`; return the dead-letter ids.

        Lock, read, plan (the batch fold, with `core/decide/expiry.py`), write: each expired step leaves the
        buffer and enters dead_letters in the same transaction, under its order's advisory lock, so it is
        dead-lettered once and never applied afterwards.
        """
        with wrap_db_errors():
            async with self.db.pool.acquire() as conn, conn.transaction():
                rows = await conn.fetch(query("gateway.sql", "expiry_candidates"), timeout_s, limit)
                candidates = sorted((r["tenant_id"], r["order_id"]) for r in rows)
                if not candidates:
                    return []
                await conn.execute(query("gateway.sql", "lock_orders"), *pairs(candidates))
                steps, now = await read_buffered(conn, candidates)
                expiry = Expiry(tuple(steps), timeout_s)
                plan = plan_batch([], BatchReads(), self.parts, kind=IngressKind.BUFFER, now=now, expiry=expiry)
                if not plan.dead_letters:
                    return []
                ids = await write_plan(conn, plan, BatchReads(), ())
        metrics.record_buffer_timeouts(len(ids))
        log.info("buffered steps expired", extra={"action": "buffer_timeout", "count": len(ids)})
        return ids


def _log_decisions(items: Sequence[Incoming], outcomes: Sequence[Outcome], kind: IngressKind) -> None:
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
                "seq_id": outcome.seq_id if outcome.seq_id is not None else (env.seq_id if env else None),
                "code": outcome.code.value if outcome.code else None,
                "source": kind.value,
            },
        )


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id (32 hex digits) of a W3C traceparent ``00-<trace id>-<span id>-<flags>``."""
    if not traceparent:
        return None
    parts = traceparent.split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None
