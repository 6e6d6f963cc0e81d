"""Server-numbered steps, the adapter: what the fold's numbering needs of the batch's orders, read under
their locks (the first verdicts it decided are written with the batch's other rows, in its one write statement:
`batch_rows.write_rows`, `plan_steps`, migration 0016). The rules are in `nexus.core.numbering`, the decider in
`nexus.core.decide.numbering`; nothing here decides.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence

import asyncpg

from nexus.batch_rows import pairs
from nexus.core.decide.items import Incoming, order_key
from nexus.core.decide.numbering import NumberingReads, StartedPlan
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
