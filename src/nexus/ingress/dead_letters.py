"""Dead letters as the API shows them, and their redrive: `GET /v1/dead-letters`, `POST .../redrive`, the
console's button and the MCP operator tools share these."""

from __future__ import annotations

from typing import Any

from nexus.auth.roles import Principal
from nexus.core.decide.answers import Outcome
from nexus.core.decide.items import Incoming, IngressKind
from nexus.errors import AlreadyRedrivenError, NotFoundError
from nexus.gateway import Gateway
from nexus.ingress import tenants
from nexus.store.database import Database
from nexus.store.queries import query
from nexus.store.rows import row_json


async def list_dead_letters(
    db: Database,
    tenant_id: str | None,
    code: str | None = None,
    source: str | None = None,
    include_redriven: bool = True,
    limit: int = 100,
    offset: int = 0,
) -> list[dict[str, Any]]:
    """The dead letters of `tenant_id` (None: every tenant), newest first."""
    rows = await db.fetch(query("api.sql", "dead_letters"), code, source, include_redriven, limit, offset, tenant_id)
    return [dead_letter_json(r) for r in rows]


def dead_letter_json(row: Any) -> dict[str, Any]:
    """A dead_letters row as the API and `nexus dlq` show it."""
    return row_json(row, _DEAD_LETTER_FIELDS, tenant=row["tenant_id"])


_DEAD_LETTER_FIELDS = (
    "id", "source", "code", "error", "event_id", "order_id", "plan_id", "payload", "created_at", "redriven_at",
    "tenant",
)  # fmt: skip


async def redrive_dead_letter(
    db: Database, gateway: Gateway, dead_letter_id: int, tenant_id: str | None = None, by: Principal | None = None
) -> Outcome:
    """Submit a dead letter's original payload again, once: a second redrive is ALREADY_REDRIVEN.

    The claim is a row keyed by the dead letter (dead_letter_redrives, migration 0004): two redrives,
    concurrent or not, cannot both insert it. If the submission fails (database unreachable), the
    claim is withdrawn so the redrive can be tried again. `tenant_id`: the caller's tenant (another
    tenant's dead letter is not found); the payload is resubmitted for the tenant it was dead-lettered under,
    proposed by `by` (the decision log's actor `key:<id>`; None: not recorded, as from the CLI).
    """
    claimed = await db.fetchrow(query("api.sql", "claim_redrive"), dead_letter_id, tenant_id)
    if claimed is None:
        if await db.fetchrow(query("api.sql", "dead_letter"), dead_letter_id, tenant_id) is None:
            raise NotFoundError(f"no dead letter {dead_letter_id}")
        raise AlreadyRedrivenError(f"dead letter {dead_letter_id} was already redriven")
    # Its envelope naming another tenant is dead-lettered again as such, changing nothing.
    actor, name = (by.actor, by.name) if by else (None, None)
    item = tenants.bind_or_dead_letter(
        Incoming.parse(claimed["payload"]), claimed["tenant_id"] or "default", actor, name
    )
    try:
        [outcome] = await gateway.submit([item], source=IngressKind.HTTP)
    except BaseException:
        await db.execute(query("api.sql", "withdraw_redrive"), dead_letter_id)
        raise
    await db.execute(query("api.sql", "record_redrive"), dead_letter_id, outcome.decision.value, outcome.dead_letter_id)
    return outcome
