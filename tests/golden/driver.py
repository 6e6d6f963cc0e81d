"""Runs the golden corpus's actions through the real gateway on a real PostgreSQL database, and normalises
the answers (and the database's final content) so that two runs of the same code compare equal.

Normalised: timestamps (ISO 8601 strings and datetimes), the answers' `deadline` and `approval_id`, dead
letter ids (kept as "has one"). Every other field is compared as it is.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

from nexus.auth.roles import Principal, Role
from nexus.core.decide.answers import Outcome
from nexus.core.decide.approvals import approval_id_for
from nexus.core.decide.items import Incoming
from nexus.core.process_compile import compile_definition
from nexus.core.process_model import ProcessCatalog
from nexus.core.saga import Action, CallDecision, SagaStatus, StepStatus
from nexus.errors import NexusError
from nexus.gateway import Gateway
from nexus.lifecycle.approvals import answer, approver_of
from nexus.processes import builtin_catalog
from nexus.saga import outcomes
from nexus.store import sagas as saga_records
from nexus.store.database import Database
from nexus.store.queries import query
from tests.unit.test_deadlines import timed_yaml

_TS = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?")
# as the API makes an approver of its key (key 1, named golden-approver): actor key:1
APPROVER = approver_of(Principal(1, None, frozenset({Role.APPROVER}), "golden-approver"))


def catalog() -> ProcessCatalog:
    """The shipped processes and `timed` (the order with a deadline section: default 1 h, at most 2 h)."""
    return ProcessCatalog.of([*builtin_catalog().versions.values(), compile_definition(timed_yaml(3600, 7200))])


def normal(value: Any) -> Any:
    """Timestamps replaced by a placeholder, recursively."""
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normal(v) for v in value]
    if isinstance(value, dt.datetime):
        return "<ts>"
    if isinstance(value, str):
        return _TS.sub("<ts>", value)
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    body = outcome.as_json()
    if "deadline" in body:
        body["deadline"] = "<deadline>"
    if body.get("approval_id"):
        body["approval_id"] = "<approval_id>"
    body["dead_letter"] = outcome.dead_letter_id is not None
    return normal(body)  # type: ignore[no-any-return]


async def submit(gateway: Gateway, items: Sequence[Incoming], kind: str) -> list[Outcome]:
    """One request through the gateway's entry point, as the named ingress kind hands it over."""
    return await gateway.submit(items, source=kind)


class Driver:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.catalog = catalog()
        self.http = Gateway(db, catalog=self.catalog)
        self.kafka = Gateway(db, record_plan_mismatch=False, catalog=self.catalog)

    async def setup(self) -> None:
        await self.db.execute("INSERT INTO tenant_limits (tenant_id, max_order_amount) VALUES ('acme', 50)")
        await self.db.execute(
            "INSERT INTO subscriptions (name, url, secret) VALUES ('golden', 'http://127.0.0.1:9/g', 's')"
        )

    async def run(self, action: dict[str, Any]) -> Any:
        try:
            return await self._run(action)
        except NexusError as exc:
            return {"error": type(exc).__name__, "code": exc.code.value}

    async def _run(self, action: dict[str, Any]) -> Any:
        op = action["op"]
        if op == "submit":
            gateway = self.kafka if action["kind"] == "kafka" else self.http
            results = await submit(gateway, [Incoming.parse(raw) for raw in action["items"]], action["kind"])
            return [outcome_json(o) for o in results]
        if op in ("approve", "deny"):
            approval = approval_id_for(uuid.UUID(action["event_id"]), action["tenant"])
            return outcome_json(await answer(self.http, approval, APPROVER, approve=op == "approve"))
        if op == "effect_ok":
            return await self._effect_ok(action["tenant"], action["order_id"], action["seq"])
        if op == "effect_abort":
            async with self.db.pool.acquire() as conn, conn.transaction():
                return await self.http.abort_for_effects(conn, (action["tenant"], action["order_id"]), "effect failed")
        if op == "sweep":
            return await self.http.abort_overdue()
        if op == "expire":
            return len(await self.http.expire_buffered(0))
        raise ValueError(op)

    async def _effect_ok(self, tenant: str, order_id: str, seq: int) -> Any:
        """The effect of step `seq` succeeded: what the saga executor writes (`Gateway.fold_effects`); the
        saga is left RUNNING and not due, as the corpus was recorded."""
        async with self.db.pool.acquire() as conn, conn.transaction():
            steps = await conn.fetch(query("saga.sql", "read_steps"), tenant, order_id)
            step = next((s for s in steps if s["seq"] == seq), None)
            if step is None:
                return "no such step"
            done = CallDecision(StepStatus.COMPLETED, SagaStatus.RUNNING)
            command = outcomes.command_of(outcomes.Outcome(step, Action.FORWARD, done, {}, None, keep=False))
            await self.http.fold_effects(conn, [command], 0, "golden")
            await saga_records.set_saga(conn, (tenant, order_id), SagaStatus.RUNNING, None)
            return str(await conn.fetchval("SELECT status FROM orders WHERE tenant_id = $1 AND order_id = $2",
                                           tenant, order_id))  # fmt: skip

    async def snapshot(self) -> dict[str, Any]:
        """The database's content the decisions wrote, ordered, without ids, hashes or clock values."""
        tables = {
            "orders": "SELECT tenant_id, order_id, plan_id, status, last_seq, tombstone, outbox_count, process,"
            " process_version, facts::text AS facts, superseded_plans, deadline_at IS NOT NULL AS has_deadline"
            " FROM orders ORDER BY tenant_id, order_id",
            "pending": "SELECT tenant_id, order_id, seq_id, event_id::text FROM pending_events ORDER BY 1, 2, 3",
            "outbox": "SELECT tenant_id, order_id, position, event_id::text, event_type, seq_id, plan_id,"
            " payload::text AS payload FROM outbox ORDER BY tenant_id, order_id, position",
            "deliveries": "SELECT tenant_id, order_id, position, head FROM deliveries ORDER BY 1, 2, 3",
            "decision_log": "SELECT tenant_id, order_id, position, actor, actor_name, event_id, plan_id, seq,"
            ' event_type, decision, code, "check", message FROM decision_log ORDER BY tenant_id, order_id, position',
            "rejected": "SELECT tenant_id, event_id::text, order_id, plan_id, seq_id, event_type, code, check_id,"
            " message, drained FROM rejected_events ORDER BY 1, 3, 2",
            "dead_letters": "SELECT source, code, error, event_id, order_id, plan_id, payload FROM dead_letters"
            " ORDER BY id",
            "approvals": "SELECT tenant_id, order_id, seq_id, event_id::text, status, decided_by FROM approvals"
            " ORDER BY 1, 2, 4",
            "decisions": "SELECT tenant_id, order_id, value::text AS value FROM decisions_outbox ORDER BY id",
            "sagas": "SELECT tenant_id, order_id, plan_id, process, status FROM sagas ORDER BY 1, 2",
            "saga_steps": "SELECT tenant_id, order_id, seq, step_name, status, compensable, pivot,"
            " forward_payload::text AS forward_payload FROM saga_steps ORDER BY 1, 2, 3",
        }
        out: dict[str, Any] = {}
        for name, sql in tables.items():
            rows = await self.db.fetch(sql)
            out[name] = [normal(_decoded(dict(r))) for r in rows]
        return out


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    """jsonb columns read as text, parsed (so key order does not matter), timestamps inside normalised."""
    for key in ("facts", "payload", "value", "forward_payload"):
        if isinstance(row.get(key), str) and row[key][:1] in "{[":
            with contextlib.suppress(ValueError):
                row[key] = json.loads(row[key])
    return row


async def replay(db: Database, actions: Sequence[dict[str, Any]]) -> tuple[list[Any], dict[str, Any]]:
    """Every action's answer, in order, and the final snapshot."""
    driver = Driver(db)
    await driver.setup()
    answers = [await driver.run(a) for a in actions]
    return answers, await driver.snapshot()
