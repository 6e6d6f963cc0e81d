"""The saga invariants, proven from PostgreSQL (sagas, saga_steps) and the services' ledgers (`nexus services`).

1. every effect happened at most once in effect: per order and service, at most one forward entry is
   left standing (not compensated), and every forward entry's key is the key the saga recorded;
2. a compensated saga left every ledger as before it: each of its forward entries was compensated;
3. compensations ran in reverse order (by the steps' seq);
4. nothing after the pivot was compensated;
5. no compensation without its forward step: every release/refund names a forward entry of the ledger,
   and a cancellation that arrived first (`void`) was never followed by that forward entry;
6. a repeated call got the first answer: the result a completed step recorded names the ledger entry of
   its key (a call repeated after a crash, with the same key, answered the first charge, not a new one).

`check_sagas` is pure (rows in, problems out); `check_sagas_live` reads them.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from nexus.store.database import Database

FORWARD_KINDS = {"reserve", "charge", "ship", "invoice"}
UNDO_KINDS = {"release", "refund"}


def check_sagas(
    sagas: Sequence[Mapping[str, Any]],
    steps: Sequence[Mapping[str, Any]],
    ledgers: Mapping[str, Mapping[str, Any]],
) -> list[str]:
    """Every violation of the saga invariants, one line each (empty: all hold)."""
    problems: list[str] = []
    status_of = {(s["tenant_id"], s["order_id"]): s["status"] for s in sagas}
    steps_of: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for step in steps:
        steps_of[step["order_id"]].append(step)
    for service, book in ledgers.items():
        problems += _service_problems(service, book, steps, steps_of, status_of)
    problems += _order_problems(steps_of)
    return problems


def _service_problems(
    service: str,
    book: Mapping[str, Any],
    steps: Sequence[Mapping[str, Any]],
    steps_of: Mapping[str, list[Mapping[str, Any]]],
    status_of: Mapping[tuple[str, str], str],
) -> list[str]:
    """The violations one service's ledger shows."""
    problems: list[str] = []
    entries = list(book.get("entries", []))
    forwards = [e for e in entries if e["kind"] in FORWARD_KINDS]
    undone = {e["compensates"] for e in entries if e["kind"] in UNDO_KINDS | {"void"}}
    forward_keys = {e["key"] for e in forwards}
    standing: dict[Any, list[str]] = defaultdict(list)
    for entry in forwards:
        if entry["key"] not in undone:
            standing[entry["order_id"]].append(entry["key"])
    for order_id, keys in standing.items():
        if len(keys) > 1:
            problems.append(f"{service}: order {order_id}: {len(keys)} effects in effect (keys {keys})")
    recorded = {s["forward_key"] for s in steps if s["service"] == service and s["forward_key"]}
    for entry in forwards:
        if entry["order_id"] in steps_of and entry["key"] not in recorded:
            problems.append(f"{service}: order {entry['order_id']}: a call with a key the saga never recorded")
    for entry in entries:
        if entry["kind"] in UNDO_KINDS and entry["compensates"] not in forward_keys:
            problems.append(f"{service}: {entry['kind']} {entry['key'][:12]} without its forward call")
        if entry["kind"] == "void" and entry["compensates"] in forward_keys:
            problems.append(f"{service}: a forward call was recorded after its cancellation")
    by_order_forward: dict[Any, list[Mapping[str, Any]]] = defaultdict(list)
    for entry in forwards:
        by_order_forward[entry["order_id"]].append(entry)
    for (_, order_id), status in status_of.items():
        if status != "COMPENSATED":
            continue
        compensable = {s["service"] for s in steps_of.get(order_id, []) if s["compensable"]}
        if service in compensable:
            for entry in by_order_forward.get(order_id, []):
                if entry["key"] not in undone:
                    problems.append(f"{service}: order {order_id}: compensated saga left {entry['kind']} standing")
    by_key = {e["key"]: e for e in forwards}
    for step in steps:
        entry = by_key.get(step["forward_key"]) if step["service"] == service else None
        result = step.get("result")
        if entry is None or not result or step["status"] not in ("COMPLETED", "COMPENSATED"):
            continue
        if entry["ref"] not in result.values():
            problems.append(f"{service}: order {step['order_id']}: recorded {result} but the ledger holds "
                            f"{entry['ref']} for its key")  # fmt: skip
    return problems


def _order_problems(steps_of: Mapping[str, list[Mapping[str, Any]]]) -> list[str]:
    """The violations of each order's compensations: in reverse order, none at or after the pivot."""
    problems: list[str] = []
    for order_id, order_steps in steps_of.items():
        compensated = [s for s in order_steps if s["status"] == "COMPENSATED"]
        times = [(s["seq"], s["compensated_at"]) for s in compensated]
        ordered = sorted(times, key=lambda t: t[1])
        if [seq for seq, _ in ordered] != sorted((seq for seq, _ in times), reverse=True):
            problems.append(f"order {order_id}: compensations not in reverse order: {[seq for seq, _ in ordered]}")
        pivots = [s["seq"] for s in order_steps if s["pivot"]]
        if pivots and any(s["seq"] >= pivots[0] for s in compensated):
            problems.append(f"order {order_id}: a step at or after the pivot was compensated")
    return problems


async def check_sagas_live(db: Database, services_url: str) -> list[str]:
    """Read sagas, steps and ledgers, then `check_sagas`."""
    sagas = await db.fetch("SELECT tenant_id, order_id, status FROM sagas")
    steps = await db.fetch(
        "SELECT order_id, seq, service, status, compensable, pivot, forward_key, compensated_at,"
        " forward_response::text AS result FROM saga_steps"
    )
    async with httpx.AsyncClient(timeout=10) as client:
        ledgers = (await client.get(services_url.rstrip("/") + "/ledgers")).json()
    rows = [{**dict(r), "result": _object(r["result"])} for r in steps]
    return check_sagas([dict(r) for r in sagas], rows, ledgers)


def _object(text: str | None) -> dict[str, Any] | None:
    value = json.loads(text) if text else None
    return value if isinstance(value, dict) else None
