"""Saga executors: in any number of processes, like the outbox dispatcher.

Each process runs one claim loop that leases due sagas in batches (SKIP LOCKED + a lease, so a dead
process's sagas are taken over once their leases run out) and reads their steps, up to `saga_executors`
at once, and one task per claimed saga: it asks `core.saga.next_work` for the saga's one next call, takes
a call slot of the call's service (at most `saga_max_inflight_per_service` calls in flight per service and
process), marks the attempt (committed before the call: a crash after it leaves the step uncertain, never
forgotten), calls the service with the call's derived `Idempotency-Key` and a `traceparent`, and writes the
outcome back under the order's lock (`outcomes`). The marks and the outcomes of the tasks are written in
groups (`grouped`): one statement marks the attempts of every task ready to call, one transaction writes
every outcome that arrived meanwhile. A saga due again at once after its outcome stays leased to its task,
which goes on with the steps that transaction read back. A saga is worked by one task at a time and makes
one call at a time, so its own steps and its compensations keep their order; different orders' calls run
concurrently.
Forward calls and compensations take the same path (`_perform`); `call_service` is the one place a
service is called. Retries follow `core.backoff` (the saga is simply due again later); a circuit breaker
per service (`core.breaker`) holds calls to a service that keeps failing, uncounted, until its cooldown
ends. The idle claim loop wakes on `nexus_sagas` notifications (`wakeups`) and when a task finishes,
polling as the fallback.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import random
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

import asyncpg
from yarl import URL

from nexus import metrics, tracing
from nexus.core.backoff import RetryPolicy, parse_retry_after
from nexus.core.breaker import Breaker, BreakerConfig, BreakerState
from nexus.core.saga import (
    Action,
    Attempt,
    CallOutcome,
    EffectBodyError,
    Position,
    RetryRules,
    SagaStatus,
    StepStatus,
    StepView,
    after_compensation,
    after_forward,
    build_body,
    idempotency_key,
    next_work,
    outcome_of_status,
    position_of,
    settle,
)
from nexus.errors import NexusError, UnsafeUrlError
from nexus.gateway import Gateway
from nexus.outbound.http1 import ConnectFailedError, ConnectTimeoutError, Http1Client
from nexus.outbound.policy import OutboundPolicy
from nexus.retrying import sleep_until_set
from nexus.saga import outcomes
from nexus.saga.grouped import Grouped
from nexus.saga.outcomes import Continued, Outcome
from nexus.saga.wakeups import SagaWakeups
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.errors import wrap_db_errors
from nexus.store.queries import query
from nexus_wire.trace import new_traceparent

log = logging.getLogger(__name__)

KeyFunction = Callable[[bytes, str, str, str, str, Action, int], str]

# An idle executor never re-checks a due time more often than this (a due time just passed, a clock skew).
_MIN_WAIT_S = 0.005
# A service's answer is kept (and stored with the step) up to this size; a longer one is cut, and read as text.
_ANSWER_MAX_BYTES = 256 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class _Call:
    """One call of a step, in either direction: what is sent, and how its attempt is marked first."""

    tenant_id: str
    order_id: str
    seq: int
    action: Action
    key: str
    url: str | None
    body: dict[str, Any]
    compensates: str | None
    refusal: str | None
    """Why the call is refused without being made (no URL, a body that could not be built), or None."""


class CallResult(NamedTuple):
    """How one call to a service ended: its outcome, the answer's JSON, the error, the `Retry-After` (ms)."""

    outcome: CallOutcome
    result: Any
    error: str | None
    retry_after_ms: float | None = None


def derived_key(secret: bytes, tenant: str, order: str, plan: str, step: str, action: Action, attempt: int) -> str:
    """The key of every attempt of a call: the same whatever the attempt (that is the point)."""
    del attempt
    return idempotency_key(secret, tenant, order, plan, step, action)


def saga_secret(settings: Settings) -> bytes:
    return (settings.saga_secret or settings.webhook_secret or "nexus-saga-idempotency").encode()


class SagaExecutor:
    """Performs the effects of due sagas until cancelled."""

    def __init__(
        self,
        db: Database,
        gateway: Gateway,
        settings: Settings,
        owner: str,
        *,
        key_function: KeyFunction = derived_key,
    ) -> None:
        self.db = db
        self.gateway = gateway
        self.settings = settings
        self.owner = owner
        self.secret = saga_secret(settings)
        self.key_function = key_function
        self.rules = RetryRules(
            RetryPolicy(
                base_ms=settings.saga_retry_base_ms,
                max_ms=settings.saga_retry_max_ms,
                max_attempts=settings.saga_max_attempts,
            ),
            budget_s=settings.saga_retry_budget_s,
        )
        self.breaker_config = BreakerConfig(
            threshold=settings.saga_breaker_threshold,
            cooldown_s=settings.saga_breaker_cooldown_s,
            probe_ttl_s=max(settings.saga_call_timeout_s * 2, 1.0),
        )
        self.breakers: dict[str, Breaker] = {}
        self.rng = random.Random()
        # The outbound policy's client: the configured service URLs are trusted targets, anything else is
        # guarded as a webhook is; no redirects; one deadline per call (`saga_call_timeout_s`).
        self.client = Http1Client(
            OutboundPolicy.for_services(settings), f"nexus-saga ({owner})", body_limit=_ANSWER_MAX_BYTES
        )
        self._wake = asyncio.Event()
        self._inflight: set[asyncio.Task[None]] = set()
        self._held: set[tuple[str, str]] = set()
        """Sagas a task of this process works on (a claim of one of them is handed to its task)."""
        self._handover: dict[tuple[str, str], tuple[SagaStatus, list[asyncpg.Record]]] = {}
        self._marks: Grouped[_Call, tuple[int, float]] = Grouped(self._mark)
        """The attempts of the calls about to be made, marked together (the attempt numbers and the seconds
        since each call's first attempt back)."""
        self.outcomes: Grouped[Outcome, Continued | None] = Grouped(self._write)
        """The calls' outcomes, written together."""
        self._busy: dict[str, int] = {}
        """Per service, the call slots its tasks hold (at most `saga_max_inflight_per_service`)."""
        self._slot_of: dict[tuple[str, str], str] = {}
        """The service whose call slot a saga's task holds."""
        self.tasks_peak = 0
        """The most saga tasks this executor ran at once (tests count it)."""
        self._calls = 0
        self.wakeups: SagaWakeups | None = None
        if settings.saga_listen and db.url is not None:
            self.wakeups = SagaWakeups(
                db.url,
                self._wake.set,
                reconnect_max_s=settings.listen_retry_s,
                check_s=settings.listen_check_s,
                rng=self.rng,
            )

    async def aclose(self) -> None:
        await self.client.aclose()

    async def run(self, workers: int | None = None) -> None:
        """Work due sagas until cancelled, up to `workers` at once (default: the `saga_executors` setting)."""
        capacity = self.settings.saga_executors if workers is None else workers
        try:
            async with asyncio.TaskGroup() as group:
                if self.wakeups is not None:
                    group.create_task(self.wakeups.run())
                group.create_task(self._claim_loop(max(1, capacity)))
        finally:
            for task in self._inflight:
                task.cancel()
            await asyncio.gather(*self._inflight, return_exceptions=True)
            await self.aclose()

    # -- scheduling: one claim loop, one task per claimed saga ------------------------------------------------
    async def _claim_loop(self, capacity: int) -> None:
        """Lease due sagas in batches, up to the free tasks, and start a task for each; sleep when nothing
        more is due until woken (a NOTIFY, a task finished), the next known due time or the poll."""
        while True:
            self._wake.clear()  # before looking: a wake-up arriving from here on is not lost
            room = capacity - len(self._inflight)
            got = 0
            if room > 0:
                try:
                    rows, steps = await self._claim(self.owner, room)
                except NexusError as exc:  # the database is away: wait and try again, the leases protect the work
                    log.warning("saga executor: %s", exc, extra={"action": "saga_retry"})
                    rows, steps = [], {}
                waiting: list[tuple[tuple[str, str], float]] = []
                for saga in rows:
                    key = (saga["tenant_id"], saga["order_id"])
                    wait_s = self._start(key, SagaStatus(saga["status"]), steps[key])
                    if wait_s is not None:
                        waiting.append((key, wait_s))
                if waiting:
                    await self._release_all(waiting)
                got = len(rows)
            if room <= 0 or 0 < got < room:
                await self._sleep(self.settings.saga_poll_s)  # a finished task wakes us
            elif got == 0:
                await self._idle_wait()

    async def _claim(
        self, owner: str, limit: int
    ) -> tuple[list[asyncpg.Record], dict[tuple[str, str], list[asyncpg.Record]]]:
        """Lease up to `limit` due sagas and read their steps."""
        with wrap_db_errors():
            async with self.db.pool.acquire() as conn:
                rows = await conn.fetch(query("saga.sql", "claim_sagas"), self.settings.saga_lease_s, owner, limit)
                keys = [(r["tenant_id"], r["order_id"]) for r in rows]
                steps = await outcomes.read_steps_of(conn, keys) if keys else {}
        return rows, steps

    def _start(self, key: tuple[str, str], status: SagaStatus, steps: list[asyncpg.Record]) -> float | None:
        """Start a task for a claimed saga; or, when its next call's service has no free call slot or an open
        breaker, start nothing: the seconds after which it is due again (the caller releases it)."""
        if key in self._held:
            # Its task wrote an outcome (the lease cleared) and has not ended yet: the claim is the task's
            # now, or the saga would stay leased with nobody working it.
            self._handover[key] = (status, steps)
            return None
        work = next_work(status, [_view(s) for s in steps])
        if work is not None:
            service = next(s["service"] for s in steps if s["seq"] == work.seq)
            wait_s = self._closed_for(service)
            if wait_s is not None:
                return wait_s
            if not self._take_slot(service):
                return self.settings.saga_retry_base_ms / 1000
            self._slot_of[key] = service
        self._held.add(key)
        task = asyncio.create_task(self._work(key, status, steps))
        self._inflight.add(task)
        self.tasks_peak = max(self.tasks_peak, len(self._inflight))

        def done(finished: asyncio.Task[None]) -> None:
            self._inflight.discard(finished)
            self._wake.set()  # a slot is free

        task.add_done_callback(done)
        return None

    async def _work(self, key: tuple[str, str], status: SagaStatus, steps: list[asyncpg.Record]) -> None:
        """The saga's next calls: after each outcome that leaves it due at once (kept leased by the outcome's
        transaction) the task goes on with it; else it ends and frees its place."""
        order_id = key[1]
        try:
            while True:
                again = await self._work_once(key, status, steps, self.owner, keep=True)
                if again is None:
                    # No await from here to the end of the saga's turn: the claim loop cannot claim it in between.
                    handed = self._handover.pop(key, None)
                    if handed is None:
                        return
                    status, steps = handed
                else:
                    status, steps = again.status, again.steps
        except NexusError as exc:  # the database is away: the lease runs out and the saga is taken again
            log.warning("saga executor: %s", exc, extra={"action": "saga_retry", "order_id": order_id})
        except Exception:  # a bug in one saga must not stop the others; its lease runs out
            log.exception("saga work failed unexpectedly", extra={"action": "saga", "order_id": order_id})
        finally:
            self._held.discard(key)
            self._handover.pop(key, None)
            self._give_slot(key)

    async def _sleep(self, timeout_s: float) -> None:
        await sleep_until_set(self._wake, timeout_s)

    async def _idle_wait(self) -> None:
        """Nothing more was due: sleep until woken (NOTIFY, a task finished), the next known due time, or
        the fallback poll."""
        timeout = self.settings.saga_poll_s
        if self.wakeups is not None:
            with contextlib.suppress(NexusError), wrap_db_errors():
                due = await self.db.fetchval(query("saga.sql", "next_due_in"))
                if due is not None:
                    timeout = min(timeout, max(float(due), _MIN_WAIT_S))
        await self._sleep(timeout)

    async def run_once(self, owner: str | None = None) -> bool:
        """Claim one due saga and make its next call, here and now; False when nothing was due."""
        rows, steps = await self._claim(owner or self.owner, 1)
        if not rows:
            return False
        key = (rows[0]["tenant_id"], rows[0]["order_id"])
        # The saga's lease is cleared with its outcome: the next run_once (any owner) may claim it.
        await self._work_once(key, SagaStatus(rows[0]["status"]), steps[key], owner or self.owner, keep=False)
        return True

    async def _work_once(
        self, key: tuple[str, str], status: SagaStatus, steps: list[asyncpg.Record], owner: str, *, keep: bool
    ) -> Continued | None:
        """The claimed saga's next call (or, with none to make, its settling); the saga again if its task
        goes on with it (`keep`, and due at once), else None (its lease cleared)."""
        views = [_view(s) for s in steps]
        work = next_work(status, views)
        if work is None:
            await self._idle(key, status, steps)
            return None
        step = next(s for s in steps if s["seq"] == work.seq)
        position = position_of(next(v for v in views if v.seq == work.seq), views)
        self._calls += 1
        caller = f"{self.owner}#{self._calls}"
        return await self._perform(key, step, work.action, position, owner, caller, keep=keep)

    # -- nothing to call: wait for the agent, or finish compensating ---------------------------------------
    async def _idle(self, key: tuple[str, str], status: SagaStatus, steps: list[asyncpg.Record]) -> None:
        tenant_id, order_id = key
        with wrap_db_errors():
            async with self.db.pool.acquire() as conn, conn.transaction():
                current = SagaStatus(await outcomes.lock_order(conn, tenant_id, order_id))
                # Read again under the lock: a step recorded since the claim must not be slept through.
                steps = await conn.fetch(query("saga.sql", "read_steps"), tenant_id, order_id)
                if current is not status or next_work(current, [_view(s) for s in steps]) is not None:
                    await outcomes.set_saga(conn, tenant_id, order_id, current, 0)
                    return
                settled = settle(status, [_view(s) for s in steps])
                if settled is SagaStatus.COMPENSATED:
                    await outcomes.set_saga(conn, tenant_id, order_id, settled, None)
                    failed = [s for s in steps if s["status"] == StepStatus.FAILED]
                    reason = f"effect of {failed[-1]['step_name']} failed" if failed else "effects compensated"
                    await outcomes.abort_plan(self.gateway, conn, tenant_id, order_id, reason)
                else:
                    await outcomes.set_saga(conn, tenant_id, order_id, status, None)

    # -- one call, either direction -------------------------------------------------------------------------
    async def _perform(
        self,
        key: tuple[str, str],
        step: asyncpg.Record,
        action: Action,
        position: Position,
        owner: str,
        caller: str,
        *,
        keep: bool,
    ) -> Continued | None:
        """Make the step's next call (forward or compensation) and write its outcome back.

        The same path for both directions: breaker, key, the attempt marked (committed before the call),
        the call, the pure decision (`after_forward` / `after_compensation`), the outcome written under
        the order's lock. Only what is called and what is written differ (`_prepare`, `outcomes`).
        """
        order_id, seq = key[1], step["seq"]
        service = step["service"]
        if self._slot_of.get(key) != service:  # a call slot of the service before the attempt: never waited for
            self._give_slot(key)
            if not self._take_slot(service):
                await self._release(key, owner, self.settings.saga_retry_base_ms / 1000)
                return None
            self._slot_of[key] = service
        try:
            if not self._admitted(service, caller):
                await self._release(key, owner, self.breaker_config.cooldown_s)
                return None
            call = self._prepare(step, action)
            attempts, elapsed_s = await self._marks.submit(call)
            started = asyncio.get_running_loop().time()
            if call.refusal is not None:
                answer = CallResult(CallOutcome.REFUSED, None, call.refusal)
            else:
                assert call.url is not None
                answer = await self.call_service(call.url, call.body, call.key, step["traceparent"], call.compensates)
                self._record_breaker(service, caller, answer.outcome)
            elapsed_s += asyncio.get_running_loop().time() - started
        finally:
            if not keep:  # run_once: no task goes on with the saga
                self._give_slot(key)
        outcome, response, error = answer.outcome, answer.result, answer.error
        attempt = Attempt(attempts, outcome, elapsed_s, answer.retry_after_ms)
        rand = self.rng.random()
        if action is Action.FORWARD:
            decision = after_forward(_view(step), attempt, position, self.rules, rand=rand)
        else:
            decision = after_compensation(attempt, self.rules, rand=rand)
        metrics.record_saga_step(action.value, decision.label)
        log.info(
            "saga %s %s %s",
            action.value,
            step["step_name"],
            decision.label,
            extra={"action": f"saga_{action.value}", "order_id": order_id, "plan_id": step["plan_id"],
                   "seq_id": seq, "service": service, "attempt": attempts, "outcome": outcome.value},
        )  # fmt: skip
        return await self.outcomes.submit(Outcome(step, action, decision, response, error, keep))

    async def _mark(self, calls: list[_Call]) -> list[tuple[int, float] | BaseException]:
        """Mark the attempts of `calls` (of different sagas), committed before any of them is made."""
        forward = [c for c in calls if c.action is Action.FORWARD]
        back = [c for c in calls if c.action is not Action.FORWARD]
        groups = [
            (name, group) for name, group in (("start_forwards", forward), ("start_compensations", back)) if group
        ]
        attempts: dict[tuple[str, str], tuple[int, float]] = {}
        with wrap_db_errors():
            # One statement commits alone (one round trip); both directions commit together.
            async with self.db.pool.acquire() as conn, conn.transaction() if len(groups) > 1 else _alone():
                for name, group in groups:
                    args: list[list[Any]] = [[c.tenant_id for c in group], [c.order_id for c in group],
                                             [c.seq for c in group], [c.key for c in group]]  # fmt: skip
                    if name == "start_compensations":
                        args.append([json.dumps(c.body) for c in group])
                    rows = await conn.fetch(query("saga.sql", name), *args)
                    attempts.update({(r["tenant_id"], r["order_id"]): (r["attempts"], r["elapsed_s"]) for r in rows})
        return [attempts[(c.tenant_id, c.order_id)] for c in calls]

    async def _write(self, items: list[Outcome]) -> list[Continued | BaseException | None]:
        """Write the outcomes of `items` (of different sagas) in one transaction; if that fails other than
        by the database being away, each alone, so that one saga's failure is its own."""
        try:
            kept = await self._write_together(items)
        except NexusError:
            raise
        except Exception:
            if len(items) == 1:
                raise
            results: list[Continued | BaseException | None] = []
            for item in items:
                try:
                    results.append((await self._write_together([item])).get(item.key))
                except Exception as exc:  # noqa: BLE001 - handed to the item's own task, which logs it
                    results.append(exc)
            return results
        return [kept.get(item.key) for item in items]

    async def _write_together(self, items: list[Outcome]) -> dict[tuple[str, str], Continued]:
        with wrap_db_errors():
            async with self.db.pool.acquire() as conn, conn.transaction():
                return await outcomes.write_outcomes(self.gateway, conn, items, self.settings.saga_lease_s, self.owner)

    def _prepare(self, step: asyncpg.Record, action: Action) -> _Call:
        """What the step's next call in `action`'s direction sends, and how its attempt is marked."""
        tenant_id, order_id, seq, plan_id = step["tenant_id"], step["order_id"], step["seq"], step["plan_id"]
        service = step["service"]
        base = self.settings.service_url(service)
        if action is Action.FORWARD:
            key = self.key_function(
                self.secret, tenant_id, order_id, plan_id, step["step_name"], action, step["attempts"] + 1
            )
            refusal = step["forward_error"] or (f"no URL for service {service!r}" if base is None else None)
            path, body, compensates = step["forward_path"], _json(step["forward_payload"]), None
        else:
            key = self.key_function(
                self.secret, tenant_id, order_id, plan_id, step["step_name"], action, step["compensation_attempts"] + 1
            )
            compensates = step["forward_key"] or derived_key(
                self.secret, tenant_id, order_id, plan_id, step["step_name"], Action.FORWARD, 0
            )
            event = json.loads(step["envelope_text"])
            variables = {
                "data": event.get("data") or {},
                "order": {"order_id": order_id, "plan_id": plan_id, "tenant_id": tenant_id},
                "step": {"seq": seq, "type": step["step_name"]},
                "result": json.loads(step["response_text"]) if step["response_text"] else {},
            }
            try:
                body = build_body(_json(step["compensation_spec"]), variables)
            except EffectBodyError:
                body = {}  # the forward call's answer is unknown: the service finds the call by its key
            body["compensates"] = compensates
            path = step["compensation_path"]
            refusal = f"no compensation URL for {service!r}" if base is None or path is None else None
        return _Call(
            tenant_id=tenant_id,
            order_id=order_id,
            seq=seq,
            action=action,
            key=key,
            url=None if refusal else f"{base}{path}",
            body=body,
            compensates=compensates,
            refusal=refusal,
        )

    # -- HTTP and breakers ----------------------------------------------------------------------------------
    async def call_service(
        self, url: str, body: dict[str, Any], key: str, traceparent: str | None, compensates: str | None
    ) -> CallResult:
        """The one place a service is called (forward calls and compensations alike)."""
        # Each effect and compensation call under its span, the request carrying its traceparent
        return await tracing.traced_effect(
            lambda sent: self._post(url, body, key, sent, compensates), url, traceparent, compensates is not None
        )

    async def _post(
        self, url: str, body: dict[str, Any], key: str, traceparent: str | None, compensates: str | None
    ) -> CallResult:
        headers = {
            "content-type": "application/json",
            "accept": "application/json",
            "Idempotency-Key": key,
            "traceparent": traceparent or new_traceparent(),
        }
        if compensates is not None:
            headers["Compensates"] = compensates
        try:
            target = URL(url)
            payload = json.dumps(body, separators=(",", ":")).encode()
        except (ValueError, TypeError) as exc:
            return CallResult(CallOutcome.REFUSED, None, f"request cannot be built: {exc}")
        if target.scheme not in ("http", "https") or not target.host:
            return CallResult(CallOutcome.REFUSED, None, "request cannot be built: not an http(s) URL")
        try:
            if tracing.active():  # the request's own CLIENT span (as a webhook's), the service's parent
                with tracing.http_request_span("POST", url) as request:
                    headers["traceparent"] = tracing.traceparent_of(request) or headers["traceparent"]
                    answer = await self.client.post(target, headers, payload)
                    request.set_attribute("http.response.status_code", answer.status)
            else:
                answer = await self.client.post(target, headers, payload)
        except UnsafeUrlError as exc:  # aimed inside, and not a configured service: never sent
            return CallResult(CallOutcome.REFUSED, None, str(exc)[:500])
        except (ConnectFailedError, ssl.SSLError) as exc:  # nothing reached the service
            return CallResult(CallOutcome.RETRYABLE, None, f"connection failed: {exc}")
        except ConnectTimeoutError as exc:
            return CallResult(CallOutcome.RETRYABLE, None, f"connect timeout: {exc}")
        except (TimeoutError, OSError) as exc:  # sent: the service may have acted
            return CallResult(CallOutcome.UNKNOWN, None, f"{type(exc).__name__}: outcome unknown")
        try:
            result: Any = json.loads(answer.body)
        except ValueError:
            result = {"text": answer.body[:500].decode("utf-8", "replace")}
        outcome = outcome_of_status(answer.status)
        error = None if outcome is CallOutcome.SUCCEEDED else f"HTTP {answer.status}: {str(result)[:300]}"
        retry_after = parse_retry_after(answer.retry_after, dt.datetime.now(dt.UTC)) if error else None
        return CallResult(outcome, result, error, retry_after)

    def _admitted(self, service: str, owner: str) -> bool:
        breaker = self.breakers.get(service, Breaker())
        if breaker.admits_all():
            return True
        probe = breaker.take_probe(dt.datetime.now(dt.UTC), owner, self.breaker_config)
        if probe is None:
            return False
        self.breakers[service] = probe
        return True

    def _record_breaker(self, service: str, owner: str, outcome: CallOutcome) -> None:
        breaker = self.breakers.get(service, Breaker())
        success = outcome in (CallOutcome.SUCCEEDED, CallOutcome.REFUSED)
        after = breaker.record(success, dt.datetime.now(dt.UTC), self.breaker_config, probe_owner=owner)
        self.breakers[service] = after
        if after.state is not breaker.state and after.state in (BreakerState.OPEN, BreakerState.CLOSED):
            verb = "opened" if after.state is BreakerState.OPEN else "closed again"
            log.warning("saga breaker %s for %s", verb, service,
                        extra={"action": "saga_breaker", "service": service, "state": after.state.value})  # fmt: skip

    def _take_slot(self, service: str) -> bool:
        busy = self._busy.get(service, 0)
        if busy >= self.settings.saga_max_inflight_per_service:
            return False
        self._busy[service] = busy + 1
        return True

    def _give_slot(self, key: tuple[str, str]) -> None:
        service = self._slot_of.pop(key, None)
        if service is not None:
            self._busy[service] -= 1

    def _closed_for(self, service: str) -> float | None:
        """None if the service's breaker lets a call through now; else the seconds until it might."""
        breaker = self.breakers.get(service)
        now = dt.datetime.now(dt.UTC)
        if breaker is None or breaker.admits_all() or breaker.probe_available(now):
            return None
        if breaker.open_until is not None and breaker.open_until > now:
            return (breaker.open_until - now).total_seconds()
        return self.settings.saga_call_timeout_s  # another call is the probe: it ends within its timeout

    async def _release_all(self, waiting: list[tuple[tuple[str, str], float]]) -> None:
        """Release claimed sagas that wait (no slot, an open breaker), each due again after its delay."""
        with wrap_db_errors(), contextlib.suppress(asyncpg.PostgresError, NexusError):
            await self.db.execute(query("saga.sql", "release_sagas"), [k[0] for k, _ in waiting],
                                  [k[1] for k, _ in waiting], [d for _, d in waiting], self.owner)  # fmt: skip

    async def _release(self, key: tuple[str, str], owner: str, delay_s: float) -> None:
        with wrap_db_errors(), contextlib.suppress(asyncpg.PostgresError):
            await self.db.execute(query("saga.sql", "release_saga"), *key, delay_s, owner)


@contextlib.asynccontextmanager
async def _alone() -> AsyncIterator[None]:
    """No transaction of our own: the statement commits by itself."""
    yield


def _view(row: asyncpg.Record) -> StepView:
    return StepView(
        seq=row["seq"],
        step=row["step_name"],
        status=StepStatus(row["status"]),
        compensable=row["compensable"],
        pivot=row["pivot"],
        uncertain=row["uncertain"],
    )


def _json(value: Any) -> dict[str, Any]:
    """A jsonb column as a dict (asyncpg hands jsonb over as text unless a codec is set)."""
    if isinstance(value, str):
        value = json.loads(value)
    return value if isinstance(value, dict) else {}
