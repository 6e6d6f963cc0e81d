"""Writing the decision log inside the caller's transaction: one read of the chain heads, one INSERT."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg

from nexus.core.audit_chain import INGRESS_ORDER, Entry, place
from nexus.store.queries import query
from nexus.store.rows import json_rows


async def record_entries(conn: asyncpg.Connection, entries: Sequence[Entry], at: dt.datetime | None = None) -> None:
    """Append `entries` to their chains, in order, in the transaction open on `conn`.

    The caller holds the advisory lock of every order named (Gateway.submit and the buffer sweeper do):
    the heads read here cannot move before commit. The ingress chain (items that never had an order) is
    locked here, last, after every order lock, so lock order stays acyclic.
    """
    if not entries:
        return
    records = await record_rows(conn, entries, {}, set(), at)
    await conn.execute(query("audit.sql", "insert_records"), json_rows(records.rows), records.at)


@dataclasses.dataclass(frozen=True, slots=True)
class Records:
    """Entries placed in their chains, as audit.sql `insert_records` and gateway.sql `write_batch` take them:
    one row per record (its columns but `at`, in their order, the hashes in hex), all at `at`."""

    rows: list[tuple[Any, ...]]
    at: dt.datetime | None = None


async def record_rows(
    conn: asyncpg.Connection,
    entries: Sequence[Entry],
    heads: Mapping[tuple[str, str], tuple[int, bytes]],
    known: set[tuple[str, str]],
    at: dt.datetime | None = None,
) -> Records:
    """`entries` placed in their chains (see `record_entries`). `heads`: the heads of the chains in `known`,
    already read under their locks (a chain in `known` without a head is new); the heads of the other
    chains are read here (Gateway.submit reads its orders' heads with the rest of the batch)."""
    if not entries:
        return Records([])
    positions, prevs, hashes, now = await _placed(conn, entries, heads, known, at)
    rows = [
        (e.tenant_id, e.order_id, position, e.actor, e.event_id, e.plan_id, e.seq, e.event_type, e.decision,
         e.code, e.check, e.message, prev.hex(), digest.hex(), e.actor_name)
        for e, position, prev, digest in zip(entries, positions, prevs, hashes, strict=True)
    ]  # fmt: skip
    return Records(rows, now)


async def _placed(
    conn: asyncpg.Connection,
    entries: Sequence[Entry],
    heads: Mapping[tuple[str, str], tuple[int, bytes]],
    known: set[tuple[str, str]],
    at: dt.datetime | None,
) -> tuple[list[int], list[bytes], list[bytes], dt.datetime]:
    """Each entry's position, previous hash and hash in its chain, and the time they are recorded at."""
    chains = sorted({e.chain for e in entries} - known)
    ingress = [(tenant, order_id) for tenant, order_id in chains if order_id == INGRESS_ORDER]
    if ingress:
        await conn.execute(query("gateway.sql", "lock_orders"), [t for t, _ in ingress], [o for _, o in ingress])
    current = dict(heads)
    if chains:
        rows = await conn.fetch(query("audit.sql", "read_heads"), [t for t, _ in chains], [o for _, o in chains])
        current.update({(r["tenant_id"], r["order_id"]): (r["position"], bytes(r["hash"])) for r in rows})
    now = at or dt.datetime.now(dt.UTC)
    positions, prevs, hashes = place(entries, current, now)
    return positions, prevs, hashes, now
