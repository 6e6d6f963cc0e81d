"""Server-numbered steps, the adapter: what the fold's numbering needs of the batch's orders, read under
their locks in the batch's one read statement (`batch_rows.read_batch`: its 'plan', 'known' and 'last' rows), and
the first verdicts it decided written with the batch's other rows, in its one write statement
(`batch_rows.write_rows`, `plan_steps`, migration 0016). The rules are in `nexus.core.numbering`, the decider in
`nexus.core.decide.numbering`; nothing here decides.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence

import asyncpg

from nexus.core.decide.items import Incoming, order_key
from nexus.core.decide.numbering import NumberingReads, StartedPlan
from nexus.core.numbering import FirstVerdict

OrderKey = tuple[str, str]
KINDS = frozenset({"plan", "known", "last"})
"""The kinds of `read_batch`'s rows that are the numbering's."""


def asked(items: Sequence[Incoming]) -> tuple[list[OrderKey], list[uuid.UUID]]:
    """Of `items`: the orders with proposals or plan ends (whose started plans and numbered steps the batch reads)
    and the proposals' event ids (whose stored first verdicts it reads)."""
    proposed = [(order_key(i.envelope), i.proposal.event_id) for i in items if i.proposal and i.envelope]
    ending = [order_key(i.envelope) for i in items if i.ending and i.envelope]  # their started plans
    return sorted({key for key, _ in proposed} | set(ending)), [e for _, e in proposed]


def numbering_of(rows: Iterable[asyncpg.Record], keys: Sequence[OrderKey]) -> dict[OrderKey, NumberingReads]:
    """The numbering's reads of each order of `keys` from its rows (kinds `KINDS`)."""
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
        row["check_id"],
        row["message"],
        row["decided_at"],
    )
