"""Claiming due sagas: one claim loop per process, one task per claimed saga, call slots per service.

The loop leases due sagas in batches (SKIP LOCKED + a lease, so a dead process's sagas are taken over once
their leases run out) and reads their steps, up to the free tasks. A claimed saga whose next call's service
has no free call slot (`saga_max_inflight_per_service`) or an open breaker gets no task: it is released at
once (no task, no lease) and due again later. Any other gets a task that works it (`WorkOnce`) until it is
not due at once any more. A saga is worked by one task at a time, so its calls keep their order. The idle
loop wakes on `nexus_sagas` notifications (`wakeups`) and when a task finishes, polling as the fallback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable

import asyncpg

from nexus.core.saga import SagaStatus, next_work
from nexus.errors import NexusError
from nexus.retrying import sleep_until_set
from nexus.saga import outcomes
from nexus.saga.outcomes import Continued, OrderKey
from nexus.saga.wakeups import SagaWakeups
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.errors import wrap_db_errors
from nexus.store.queries import query
from nexus.store.sagas import step_view

log = logging.getLogger("nexus.saga.executor")

# An idle executor never re-checks a due time more often than this (a due time just passed, a clock skew).
_MIN_WAIT_S = 0.005

Claimed = tuple[list[asyncpg.Record], dict[OrderKey, list[asyncpg.Record]]]
WorkOnce = Callable[[OrderKey, SagaStatus, list[asyncpg.Record]], Awaitable[Continued | None]]
"""One turn of a claimed saga (its next call, or its settling); the saga again if its task goes on with it."""


class CallSlots:
    """Per service, the call slots the tasks of one process hold (at most `per_service` each)."""

    def __init__(self, per_service: int) -> None:
        self.per_service = per_service
        self._busy: dict[str, int] = {}
        self._slot_of: dict[OrderKey, str] = {}

    def take(self, key: OrderKey, service: str) -> bool:
        """A slot of `service` for the saga `key` (giving back one of another service it held); False: none free."""
        if self._slot_of.get(key) == service:
            return True
        self.give(key)
        busy = self._busy.get(service, 0)
        if busy >= self.per_service:
            return False
        self._busy[service] = busy + 1
        self._slot_of[key] = service
        return True

    def give(self, key: OrderKey) -> None:
        service = self._slot_of.pop(key, None)
        if service is not None:
            self._busy[service] -= 1


class SagaClaimer:
    """The claim loop of one process and the tasks it starts."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        owner: str,
        slots: CallSlots,
        work_once: WorkOnce,
        closed_for: Callable[[str], float | None],
        rng: random.Random,
    ) -> None:
        self.db = db
        self.settings = settings
        self.owner = owner
        self.slots = slots
        self.work_once = work_once
        self.closed_for = closed_for
        self.wake = asyncio.Event()
        self._inflight: set[asyncio.Task[None]] = set()
        self._held: set[OrderKey] = set()
        """Sagas a task of this process works on (a claim of one of them is handed to its task)."""
        self._handover: dict[OrderKey, tuple[SagaStatus, list[asyncpg.Record]]] = {}
        self.tasks_peak = 0
        """The most saga tasks this process ran at once (tests count it)."""
        self.wakeups: SagaWakeups | None = None
        if settings.saga_listen and db.url is not None:
            self.wakeups = SagaWakeups(
                db.url, self.wake.set, reconnect_max_s=settings.listen_retry_s, check_s=settings.listen_check_s, rng=rng
            )

    async def run(self, capacity: int) -> None:
        """Claim and work due sagas until cancelled, up to `capacity` tasks at once."""
        try:
            async with asyncio.TaskGroup() as group:
                if self.wakeups is not None:
                    group.create_task(self.wakeups.run())
                group.create_task(self._claim_loop(max(1, capacity)))
        finally:
            for task in self._inflight:
                task.cancel()
            await asyncio.gather(*self._inflight, return_exceptions=True)

    async def _claim_loop(self, capacity: int) -> None:
        """Lease due sagas in batches, up to the free tasks, and start a task for each; sleep when nothing
        more is due until woken (a NOTIFY, a task finished), the next known due time or the poll."""
        while True:
            self.wake.clear()  # before looking: a wake-up arriving from here on is not lost
            room = capacity - len(self._inflight)
            got = 0
            if room > 0:
                try:
                    rows, steps = await self.claim(self.owner, room)
                except NexusError as exc:  # the database is away: wait and try again, the leases protect the work
                    log.warning("saga executor: %s", exc, extra={"action": "saga_retry"})
                    rows, steps = [], {}
                waiting: list[tuple[OrderKey, float]] = []
                for saga in rows:
                    key = (saga["tenant_id"], saga["order_id"])
                    wait_s = self._start(key, SagaStatus(saga["status"]), steps[key])
                    if wait_s is not None:
                        waiting.append((key, wait_s))
                if waiting:
                    await self._release_all(waiting)
                got = len(rows)
            if room <= 0 or 0 < got < room:
                await self.sleep(self.settings.saga_poll_s)  # a finished task wakes us
            elif got == 0:
                await self._idle_wait()

    async def claim(self, owner: str, limit: int) -> Claimed:
        """Lease up to `limit` due sagas and read their steps."""
        with wrap_db_errors():
            async with self.db.pool.acquire() as conn:
                rows = await conn.fetch(query("saga.sql", "claim_sagas"), self.settings.saga_lease_s, owner, limit)
                keys = [(r["tenant_id"], r["order_id"]) for r in rows]
                steps = await outcomes.read_steps_of(conn, keys) if keys else {}
        return rows, steps

    def _start(self, key: OrderKey, status: SagaStatus, steps: list[asyncpg.Record]) -> float | None:
        """Start a task for a claimed saga; or, when its next call's service has no free call slot or an open
        breaker, start nothing: the seconds after which it is due again (the caller releases it)."""
        if key in self._held:
            # Its task wrote an outcome (the lease cleared) and has not ended yet: the claim is the task's
            # now, or the saga would stay leased with nobody working it.
            self._handover[key] = (status, steps)
            return None
        work = next_work(status, [step_view(s) for s in steps])
        if work is not None:
            service = next(s["service"] for s in steps if s["seq"] == work.seq)
            wait_s = self.closed_for(service)
            if wait_s is not None:
                return wait_s
            if not self.slots.take(key, service):
                return self.settings.saga_retry_base_ms / 1000
        self._held.add(key)
        task = asyncio.create_task(self._work(key, status, steps))
        self._inflight.add(task)
        self.tasks_peak = max(self.tasks_peak, len(self._inflight))

        def done(finished: asyncio.Task[None]) -> None:
            self._inflight.discard(finished)
            self.wake.set()  # a slot is free

        task.add_done_callback(done)
        return None

    async def _work(self, key: OrderKey, status: SagaStatus, steps: list[asyncpg.Record]) -> None:
        """The saga's next calls: after each outcome that leaves it due at once (kept leased by the outcome's
        transaction) the task goes on with it; else it ends and frees its place."""
        order_id = key[1]
        try:
            while True:
                again = await self.work_once(key, status, steps)
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
            # Leave the count before the slot is free: a task claimed into the slot may start before this
            # task's done callback runs, and the two must never be counted at once.
            self._inflight.discard(asyncio.current_task())
            self.slots.give(key)

    async def _release_all(self, waiting: list[tuple[OrderKey, float]]) -> None:
        """Release claimed sagas that wait (no slot, an open breaker), each due again after its delay."""
        with wrap_db_errors(), contextlib.suppress(asyncpg.PostgresError, NexusError):
            await self.db.execute(query("saga.sql", "release_sagas"), [k[0] for k, _ in waiting],
                                  [k[1] for k, _ in waiting], [d for _, d in waiting], self.owner)  # fmt: skip

    async def sleep(self, timeout_s: float) -> None:
        await sleep_until_set(self.wake, timeout_s)

    async def _idle_wait(self) -> None:
        """Nothing more was due: sleep until woken (NOTIFY, a task finished), the next known due time, or
        the fallback poll."""
        timeout = self.settings.saga_poll_s
        if self.wakeups is not None:
            with contextlib.suppress(NexusError), wrap_db_errors():
                due = await self.db.fetchval(query("saga.sql", "next_due_in"))
                if due is not None:
                    timeout = min(timeout, max(float(due), _MIN_WAIT_S))
        await self.sleep(timeout)
