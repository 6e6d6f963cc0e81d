"""Saga executors: in any number of processes, like the outbox dispatcher.

`SagaExecutor` puts together the jobs of one process, each in its own module: claiming due sagas and
starting a task per saga (`claiming`: one claim loop, call slots per service, wake-ups), calling the
services (`calling`: the HTTP client, a breaker per service), recording attempts and outcomes
(`recording`, `outcomes`: the attempt marked before the call, the outcome written under the order's lock).
What stays here is one turn of a saga: `core.saga.next_work` names its one next call, the call is prepared
(its derived `Idempotency-Key`, its body), marked, made, and decided by the pure retry rules
(`after_forward` / `after_compensation`: position decides, core/saga.py's table). Forward calls and
compensations take the same path (`_perform`). A saga is worked by one task at a time and makes one call
at a time, so its own steps and its compensations keep their order; different orders' calls run
concurrently.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable
from typing import Any

import asyncpg

from nexus import metrics
from nexus.core.breaker import Breaker
from nexus.core.saga import (
    Action,
    Attempt,
    CallOutcome,
    EffectBodyError,
    Position,
    RetryRules,
    SagaStatus,
    StepStatus,
    after_compensation,
    after_forward,
    build_body,
    call_mark,
    idempotency_key,
    next_work,
    position_of,
)
from nexus.gateway import Gateway
from nexus.saga.calling import CallResult, ServiceCaller
from nexus.saga.claiming import CallSlots, SagaClaimer
from nexus.saga.grouped import Grouped
from nexus.saga.outcomes import Continued, OrderKey, Outcome
from nexus.saga.recording import Call, SagaRecorder
from nexus.saga.wakeups import SagaWakeups
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.saga_keys import legacy_secret
from nexus.store.sagas import step_view
from nexus_wire.backoff import RetryPolicy

__all__ = ["KeyFunction", "SagaExecutor"]

log = logging.getLogger(__name__)

KeyFunction = Callable[[bytes, str, str, str, str, Action, int], str]


class SagaExecutor:
    """Performs the effects of due sagas until cancelled."""

    def __init__(
        self,
        db: Database,
        gateway: Gateway,
        settings: Settings,
        owner: str,
        *,
        key_function: KeyFunction | None = None,
    ) -> None:
        self.settings = settings
        self.owner = owner
        # Each call's key is read from its step's row, fixed when the step was recorded (store/saga_keys); the
        # old derivation only for a step a gateway of an older version recorded and nobody filled in yet.
        self.legacy_secret = legacy_secret(settings)
        self.key_function = key_function
        """None: the stored keys; a function of the attempt: a key per attempt (a broken variant's)."""
        self.rules = RetryRules(
            RetryPolicy(
                base_ms=settings.saga_retry_base_ms,
                max_ms=settings.saga_retry_max_ms,
                max_attempts=settings.saga_max_attempts,
            ),
            budget_s=settings.saga_retry_budget_s,
        )
        self.rng = random.Random()
        self.caller = ServiceCaller(settings, owner)
        self.recorder = SagaRecorder(db, gateway, settings, owner)
        self.slots = CallSlots(settings.saga_max_inflight_per_service)
        self.claimer = SagaClaimer(db, settings, owner, self.slots, self._work_turn, self.caller.closed_for, self.rng)
        self._calls = 0

    # The parts' state, as operators' tools and tests read it.
    @property
    def breakers(self) -> dict[str, Breaker]:
        return self.caller.breakers

    @property
    def outcomes(self) -> Grouped[Outcome, Continued | None]:
        return self.recorder.outcomes

    @property
    def wakeups(self) -> SagaWakeups | None:
        return self.claimer.wakeups

    @property
    def tasks_peak(self) -> int:
        return self.claimer.tasks_peak

    @property
    def _wake(self) -> asyncio.Event:
        return self.claimer.wake

    async def _sleep(self, timeout_s: float) -> None:
        await self.claimer.sleep(timeout_s)

    async def call_service(
        self, url: str, body: dict[str, Any], key: str, traceparent: str | None, compensates: str | None
    ) -> CallResult:
        """The one place a service is called (`calling.ServiceCaller`)."""
        return await self.caller.call_service(url, body, key, traceparent, compensates)

    async def aclose(self) -> None:
        await self.caller.aclose()

    async def run(self, workers: int | None = None) -> None:
        """Work due sagas until cancelled, up to `workers` at once (default: the `saga_executors` setting)."""
        try:
            await self.claimer.run(self.settings.saga_executors if workers is None else workers)
        finally:
            await self.aclose()

    async def run_once(self, owner: str | None = None) -> bool:
        """Claim one due saga and make its next call, here and now; False when nothing was due."""
        rows, steps = await self.claimer.claim(owner or self.owner, 1)
        if not rows:
            return False
        key = (rows[0]["tenant_id"], rows[0]["order_id"])
        # The saga's lease is cleared with its outcome: the next run_once (any owner) may claim it.
        await self._work_once(key, SagaStatus(rows[0]["status"]), steps[key], owner or self.owner, keep=False)
        return True

    async def _work_turn(self, key: OrderKey, status: SagaStatus, steps: list[asyncpg.Record]) -> Continued | None:
        """A task's turn of its saga (the claimer's `WorkOnce`): kept leased when due again at once."""
        return await self._work_once(key, status, steps, self.owner, keep=True)

    async def _work_once(
        self, key: OrderKey, status: SagaStatus, steps: list[asyncpg.Record], owner: str, *, keep: bool
    ) -> Continued | None:
        """The claimed saga's next call (or, with none to make, its settling); the saga again if its task
        goes on with it (`keep`, and due at once), else None (its lease cleared)."""
        views = [step_view(s) for s in steps]
        work = next_work(status, views)
        if work is None:
            await self.recorder.settle(key, status)
            return None
        step = next(s for s in steps if s["seq"] == work.seq)
        position = position_of(next(v for v in views if v.seq == work.seq), views)
        self._calls += 1
        caller = f"{self.owner}#{self._calls}"
        return await self._perform(key, step, work.action, position, owner, caller, keep=keep)

    async def _perform(
        self,
        key: OrderKey,
        step: asyncpg.Record,
        action: Action,
        position: Position,
        owner: str,
        caller: str,
        *,
        keep: bool,
    ) -> Continued | None:
        """Make the step's next call (forward or compensation) and write its outcome back.

        The same path for both directions: call slot, breaker, key, the attempt marked (committed before the
        call), the call, the pure decision (`after_forward` / `after_compensation`), the outcome written
        under the order's lock. Only what is called and what is written differ (`_prepare`, `outcomes`).
        """
        service = step["service"]
        if not self.slots.take(key, service):  # a slot of the service before the attempt: never waited for
            await self.recorder.release(key, owner, self.settings.saga_retry_base_ms / 1000)
            return None
        try:
            if not self.caller.admitted(service, caller):
                await self.recorder.release(key, owner, self.caller.breaker_config.cooldown_s)
                return None
            answer, attempts, elapsed_s = await self._call(step, action, caller)
        finally:
            if not keep:  # run_once: no task goes on with the saga
                self.slots.give(key)
        attempt = Attempt(attempts, answer.outcome, elapsed_s, answer.retry_after_ms)
        rand = self.rng.random()
        if action is Action.FORWARD:
            decision = after_forward(step_view(step), attempt, position, self.rules, rand=rand)
        else:
            decision = after_compensation(attempt, self.rules, rand=rand)
        metrics.record_saga_step(action.value, decision.label)
        log.info(
            "saga %s %s %s",
            action.value,
            step["step_name"],
            decision.label,
            extra={"action": f"saga_{action.value}", "order_id": key[1], "plan_id": step["plan_id"],
                   "seq_id": step["seq"], "service": service, "attempt": attempts, "outcome": answer.outcome.value},
        )  # fmt: skip
        return await self.recorder.outcomes.submit(Outcome(step, action, decision, answer.result, answer.error, keep))

    async def _call(self, step: asyncpg.Record, action: Action, caller: str) -> tuple[CallResult, int, float]:
        """Mark the attempt, make the call: its answer, the attempt's number and the seconds since the call's
        first attempt (its budget's start) until its answer."""
        call = self._prepare(step, action)
        attempts, elapsed_s = await self.recorder.marks.submit(call)
        started = asyncio.get_running_loop().time()
        if call.refusal is not None:
            answer = CallResult(CallOutcome.REFUSED, None, call.refusal)
        else:
            assert call.url is not None
            answer = await self.call_service(call.url, call.body, call.key, step["traceparent"], call.compensates)
            self.caller.record(step["service"], caller, answer.outcome)
        return answer, attempts, elapsed_s + asyncio.get_running_loop().time() - started

    def _prepare(self, step: asyncpg.Record, action: Action) -> Call:
        """What the step's next call in `action`'s direction sends, and how its attempt is marked."""
        tenant_id, order_id, seq, plan_id = step["tenant_id"], step["order_id"], step["seq"], step["plan_id"]
        service = step["service"]
        base = self.settings.service_url(service)
        key = self._key(step, action)
        if action is Action.FORWARD:
            refusal = step["forward_error"] or (f"no URL for service {service!r}" if base is None else None)
            path, body, compensates = step["forward_path"], _json(step["forward_payload"]), None
        else:
            compensates = step["forward_key"] or self._key(step, Action.FORWARD)
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
        return Call(
            tenant_id=tenant_id,
            order_id=order_id,
            seq=seq,
            action=action,
            key=key,
            url=None if refusal else f"{base}{path}",
            body=body,
            compensates=compensates,
            refusal=refusal,
            mark=call_mark(action, StepStatus(step["status"])),
        )

    def _key(self, step: asyncpg.Record, action: Action) -> str:
        """The Idempotency-Key of every attempt of the step's call in `action`'s direction."""
        forward = action is Action.FORWARD
        parts = (step["tenant_id"], step["order_id"], step["plan_id"], step["step_name"], action)
        if self.key_function is not None:
            attempt = step["attempts" if forward else "compensation_attempts"] + 1
            return self.key_function(self.legacy_secret, *parts, attempt)
        stored: str | None = step["forward_key" if forward else "compensation_key"]
        return stored or idempotency_key(self.legacy_secret, *parts)


def _json(value: Any) -> dict[str, Any]:
    """A jsonb column as a dict (asyncpg hands jsonb over as text unless a codec is set)."""
    if isinstance(value, str):
        value = json.loads(value)
    return value if isinstance(value, dict) else {}
