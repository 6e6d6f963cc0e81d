"""`nexus saga redrive` on real PostgreSQL: the steps' statuses the core decides (`decide/outcomes.redriven`)
written as given, each direction's attempts started again, nothing written for a saga that changed."""

from __future__ import annotations

import pytest

from nexus.errors import NotFoundError
from nexus.saga.admin import redrive
from nexus.store.database import Database


async def _saga(db: Database, order_id: str, status: str, steps: list[tuple[str, int, int]]) -> None:
    """A saga of `status` whose steps are (status, attempts, compensation attempts), seq 1, 2, ..."""
    await db.execute(
        "INSERT INTO sagas (tenant_id, order_id, plan_id, process, status)"
        " VALUES ('default', $1, 'p', 'fulfilment', $2)",
        order_id, status,
    )  # fmt: skip
    for seq, (step_status, attempts, compensations) in enumerate(steps, 1):
        await db.execute(
            "INSERT INTO saga_steps (tenant_id, order_id, seq, step_name, plan_id, event_id, envelope, status,"
            " service, compensable, forward_path, attempts, compensation_attempts, forward_since, compensation_since)"
            " VALUES ('default', $1, $2, $3, 'p', gen_random_uuid(), '{}', $4, 'svc', true, '/x', $5, $6, now(),"
            " now())",
            order_id, seq, f"S{seq}", step_status, attempts, compensations,
        )  # fmt: skip


async def _steps(db: Database, order_id: str) -> list[tuple[str, int, int, bool, bool]]:
    rows = await db.fetch(
        "SELECT status, attempts, compensation_attempts, forward_since IS NULL AS f, compensation_since IS NULL AS c"
        " FROM saga_steps WHERE order_id = $1 ORDER BY seq",
        order_id,
    )
    return [(r["status"], r["attempts"], r["compensation_attempts"], r["f"], r["c"]) for r in rows]


async def test_an_escalated_saga_goes_back_to_its_steps_with_its_failed_step_pending(db: Database) -> None:
    """ESCALATED -> RUNNING: the FAILED step PENDING again, every step's attempts 0 with a new budget, the
    COMPLETED step kept, the compensations untouched."""
    await _saga(db, "esc", "ESCALATED", [("COMPLETED", 1, 0), ("FAILED", 5, 0)])
    assert await redrive(db, "default", "esc") == "RUNNING"
    assert await _steps(db, "esc") == [("COMPLETED", 0, 0, True, False), ("PENDING", 0, 0, True, False)]


async def test_a_failed_saga_goes_back_to_its_compensations_with_its_steps_kept(db: Database) -> None:
    """FAILED -> COMPENSATING: no step's status changes, the compensations' attempts start again at 0."""
    await _saga(db, "fail", "FAILED", [("COMPLETED", 1, 4), ("FAILED", 3, 0)])
    assert await redrive(db, "default", "fail") == "COMPENSATING"
    assert await _steps(db, "fail") == [("COMPLETED", 1, 0, False, True), ("FAILED", 3, 0, False, True)]


async def test_a_saga_that_is_not_stuck_is_not_redriven(db: Database) -> None:
    """A RUNNING saga cannot be redriven: refused, its steps untouched."""
    await _saga(db, "run", "RUNNING", [("FAILED", 2, 0)])
    with pytest.raises(NotFoundError):
        await redrive(db, "default", "run")
    assert await _steps(db, "run") == [("FAILED", 2, 0, False, False)]
