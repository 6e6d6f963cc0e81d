"""Recording a saga's calls: each attempt marked before its call (committed: a crash after it leaves the step
uncertain, never forgotten), each outcome written back under the order's lock (`outcomes`), a saga with
nothing to call settled, a saga that waits released.

The marks and the outcomes of many tasks are written in groups (`grouped`): one statement marks the
attempts of every task ready to call, one transaction writes every outcome that arrived meanwhile.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg

from nexus.core.saga import Action, CallMark, SagaStatus, StepStatus
from nexus.errors import NexusError
from nexus.gateway import Gateway
from nexus.saga import outcomes
from nexus.saga.grouped import Grouped
from nexus.saga.outcomes import Continued, OrderKey, Outcome
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.errors import wrap_db_errors
from nexus.store.queries import query

__all__ = ["Call", "SagaRecorder"]


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
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
    mark: CallMark
    """What marking its attempt writes over the step (core/saga.py `call_mark`)."""


class SagaRecorder:
    """The database side of one executor process's calls."""

    def __init__(self, db: Database, gateway: Gateway, settings: Settings, owner: str) -> None:
        self.db = db
        self.gateway = gateway
        self.settings = settings
        self.owner = owner
        self.marks: Grouped[Call, tuple[int, float]] = Grouped(self._mark)
        """The attempts of the calls about to be made, marked together (the attempt numbers and the seconds
        since each call's first attempt back)."""
        self.outcomes: Grouped[Outcome, Continued | None] = Grouped(self._write)
        """The calls' outcomes, written together."""

    async def _mark(self, calls: list[Call]) -> list[tuple[int, float] | BaseException]:
        """Mark the attempts of `calls` (of different sagas), committed before any of them is made."""
        forward = [c for c in calls if c.action is Action.FORWARD]
        back = [c for c in calls if c.action is not Action.FORWARD]
        groups = [
            (name, group) for name, group in (("start_forwards", forward), ("start_compensations", back)) if group
        ]
        attempts: dict[OrderKey, tuple[int, float]] = {}
        with wrap_db_errors():
            # One statement commits alone (one round trip); both directions commit together.
            async with self.db.pool.acquire() as conn, conn.transaction() if len(groups) > 1 else _alone():
                for name, group in groups:
                    args: list[list[Any]] = [[c.tenant_id for c in group], [c.order_id for c in group],
                                             [c.seq for c in group], [c.key for c in group]]  # fmt: skip
                    if name == "start_compensations":
                        args.append([json.dumps(c.body) for c in group])
                    args += [[_text(c.mark.status) for c in group], [c.mark.uncertain for c in group]]
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

    async def _write_together(self, items: list[Outcome]) -> dict[OrderKey, Continued]:
        with wrap_db_errors():
            async with self.db.pool.acquire() as conn, conn.transaction():
                return await outcomes.write_outcomes(self.gateway, conn, items, self.settings.saga_lease_s, self.owner)

    async def settle(self, key: OrderKey, status: SagaStatus) -> None:
        """Nothing to call: the saga waits for the agent's next step, or its compensation is over (the plan
        aborted, `effect_failed`); decided by the gateway under the order's lock (`Gateway.settle_saga`)."""
        await self.gateway.settle_saga(key, status)

    async def release(self, key: OrderKey, owner: str, delay_s: float) -> None:
        """Give a claimed saga back without a call, due again after `delay_s`."""
        with wrap_db_errors(), contextlib.suppress(asyncpg.PostgresError):
            await self.db.execute(query("saga.sql", "release_saga"), *key, delay_s, owner)


def _text(status: StepStatus | None) -> str | None:
    return None if status is None else status.value


@contextlib.asynccontextmanager
async def _alone() -> AsyncIterator[None]:
    """No transaction of our own: the statement commits by itself."""
    yield
