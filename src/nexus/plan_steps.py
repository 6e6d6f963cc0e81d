"""Server-numbered steps, the adapter: what the fold's numbering needs of the batch's orders, read under
their locks, and the first verdicts it decided, written in the batch's transaction (`plan_steps`, migration
0016). The rules are in `nexus.core.numbering`, the decider in `nexus.core.decide.numbering`; nothing here
decides.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence

import asyncpg

from nexus.batch_rows import columns, pairs
from nexus.core.decide.items import Incoming, order_key
from nexus.core.decide.numbering import FirstVerdictRow, NumberingReads, StartedPlan
from nexus.core.numbering import FirstVerdict
from nexus.store.queries import query

OrderKey = tuple[str, str]


async def read(conn: asyncpg.Connection, items: Sequence[Incoming]) -> dict[OrderKey, NumberingReads]:
    """Of the orders with proposals or plan ends among `items` (locked): their started plans, the stored first
    verdicts of the proposals' event ids, and their last applied numbered steps."""
    proposed = [(order_key(i.envelope), i.proposal.event_id) for i in items if i.proposal and i.envelope]
    ending = [order_key(i.envelope) for i in items if i.ending and i.envelope]  # their started plans
    keys = sorted({key for key, _ in proposed} | set(ending))
    rows = await conn.fetch(query("steps.sql", "read_numbering"), *pairs(keys), [e for _, e in proposed])
    plans: dict[OrderKey, StartedPlan] = {}
    known: dict[OrderKey, dict[uuid.UUID, FirstVerdict]] = defaultdict(dict)
    last: dict[OrderKey, FirstVerdict] = {}
    for row in rows:
        key = (row["tenant_id"], row["order_id"])
        if row["kind"] == "plan":
            plans[key] = StartedPlan(row["plan_id"], row["process"], row["deadline_at"])
        elif row["kind"] == "known":
            known[key][row["event_id"]] = _verdict(row)
        else:
            last[key] = _verdict(row)
    return {key: NumberingReads(plans.get(key), known.get(key, {}), last.get(key)) for key in keys}


async def record(conn: asyncpg.Connection, verdicts: Sequence[FirstVerdictRow]) -> None:
    """Store the first verdict of each newly numbered step, in the batch's transaction."""
    if verdicts:
        rows = [
            (
                v.tenant_id, v.order_id, v.event_id, v.seq_id, v.keyed, v.digest, v.decision, v.code, v.check,
                v.message, v.decided_at,
            )
            for v in verdicts
        ]  # fmt: skip
        await conn.execute(query("steps.sql", "record_first_verdicts"), *columns(rows, 11))


def _verdict(row: asyncpg.Record) -> FirstVerdict:
    return FirstVerdict(
        row["event_id"],
        row["seq_id"],
        row["digest"],
        row["decision"],
        row["code"],
        row["check"],
        row["message"],
        row["decided_at"],
    )
