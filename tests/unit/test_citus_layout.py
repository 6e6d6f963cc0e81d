"""The schema stays ready for Citus (docs/scaling.md): every table is distributed by `tenant_id` or named a
reference/coordinator table with a reason; a distributed table's primary key and unique indexes include
`tenant_id`, and every hot-path statement routes by it, but for named exceptions with their reasons.

No database: the migrations are read as SQL text (CREATE TABLE, ALTER TABLE ADD/DROP, CREATE UNIQUE INDEX,
DROP INDEX/TABLE), with PostgreSQL's default constraint names, so a later migration that adds or drops a key is
followed. A failure says what to add, and where."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from nexus.store.queries import load
from tests.sql_functions import with_called

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = ROOT / "src" / "nexus" / "store" / "migrations"
DIST = "tenant_id"
THIS = "tests/unit/test_citus_layout.py"

DISTRIBUTED = {
    "orders", "pending_events", "outbox", "deliveries", "dead_letters", "rejected_events", "decision_log",
    "approvals", "decisions_outbox", "delivery_attempts", "sagas", "saga_steps", "plans", "plan_steps",
    "mcp_tasks", "tenant_usage", "removed_orders",
}  # fmt: skip
"""Distributed by tenant_id and co-located: one tenant's order, its steps, notifications and log on one worker."""

REFERENCE_TABLES = {
    "processes": "process definitions, read by every tenant's batch: a reference table (copied to each worker)",
    "tenant_limits": "one row per tenant read with every batch: a reference table",
    "api_keys": "read by key hash before the tenant is known (authentication): a reference table",
    "subscriptions": "a subscription may span every tenant (NULL tenant); joined by every batch's fan-out: a "
    "reference table",
    "circuit_breakers": "one row per subscription, beside it: a reference table",
    "nexus_secrets": "process-wide secrets: a reference table",
    "console_sessions": "operator sessions, not a tenant's data: a coordinator (local) table",
    "audit_checkpoints": "one signed chain over every tenant's heads: a coordinator (local) table",
    "audit_erasures": "signed records of erased tenants, read with the checkpoints: a coordinator (local) table",
    "audit_anchors": "the trims' anchors, read with the checkpoints by `nexus audit verify`: a coordinator table",
    "dead_letter_redrives": "no tenant column (keyed by the dead letter's id): to be given dead_letters' tenant_id "
    "and co-located when distributed; rare writes (a redrive)",
}
"""Tables that are not distributed, each with the reason."""

KEY_EXCEPTIONS = {
    ("outbox", "outbox_pkey"): "uuid ids, unique by construction; deliveries reference them: distributing turns "
    "the key into (tenant_id, id) and the reference into (tenant_id, outbox_id)",
    ("deliveries", "deliveries_pkey"): "(outbox_id, subscription_id) is unique because outbox ids are: becomes "
    "(tenant_id, outbox_id, subscription_id) with the outbox's key",
    ("dead_letters", "dead_letters_pkey"): "bigserial ids; tenant_id is NULL for input with no envelope: "
    "distributing gives those a tenant of their own ('~ingress' rows) and the key (tenant_id, id)",
    ("decision_log", "decision_log_pkey"): "bigserial storage id; the chain's unique key (order_id, tenant_id, "
    "position) carries the tenant: the key becomes (tenant_id, id)",
    ("approvals", "approvals_pkey"): "random uuid ids (the approval's public id); unique (tenant_id, event_id) "
    "carries the tenant: the key becomes (tenant_id, approval_id)",
    ("decisions_outbox", "decisions_outbox_pkey"): "bigserial; the relay reads across tenants in id order: the "
    "key becomes (tenant_id, id) and the relay runs per shard",
    ("mcp_tasks", "mcp_tasks_pkey"): "random uuid task ids (the task's public id, looked up with its tenant): the key "
    "becomes (tenant_id, task_id), co-located with its approval",
    ("delivery_attempts", "delivery_attempts_pkey"): "identity id of a history row nobody looks up by id: the key "
    "becomes (tenant_id, id)",
}
"""A distributed table's primary key or unique index without tenant_id: (table, constraint or index name)."""

HOT_PATH = {
    "gateway.sql": None,  # every statement: Gateway.submit's batch
    "steps.sql": None,  # every statement: POST /v1/orders/{id}/steps and plans
    "delivery.sql": ("claim", "finish", "promote_heads", "clear_heads", "record_attempts"),
    "saga.sql": (
        "claim_sagas", "read_saga_gates", "upsert_sagas", "insert_saga_steps", "turn_sagas", "read_steps_of",
        "lock_saga", "start_forwards", "start_compensations", "finish_forwards", "set_sagas", "release_sagas",
        "finish_compensations", "set_outbox_counts", "set_saga",
    ),
}  # fmt: skip
"""The statements of the hot path: each must route by tenant_id (filter, join or insert it)."""

QUERY_EXCEPTIONS = {
    ("gateway.sql", "lock_orders"): "advisory locks on a hash of (tenant, order): no table; under Citus taken on "
    "the coordinator, as today, or on the worker of the order's shard",
    ("gateway.sql", "begin_locked"): "BEGIN and lock_orders' locks in one query: no table, as lock_orders",
    ("gateway.sql", "notify_orders"): "pg_notify of the orders written, no table",
    ("delivery.sql", "claim"): "the dispatcher claims the oldest due deliveries of every tenant (a multi-shard "
    "query): under Citus each dispatcher claims per shard group",
    ("delivery.sql", "finish"): "finds the claimed rows by the deliveries key (outbox_id, subscription_id): routes "
    "once that key carries tenant_id (KEY_EXCEPTIONS), the claim returning it",
    ("saga.sql", "claim_sagas"): "the executor claims due sagas of every tenant (multi-shard; its tenant_id "
    "appears only in a self-join): per shard group under Citus",
}
"""Hot-path statements that do not route by tenant_id: (file, name)."""


@dataclasses.dataclass
class Table:
    columns: set[str] = dataclasses.field(default_factory=set)
    keys: dict[str, str] = dataclasses.field(default_factory=dict)
    """Primary key and unique constraints/indexes by name: their column list (or expressions) as text."""


def _statements(text: str) -> list[str]:
    text = re.sub(r"\$\$.*?\$\$", "''", text, flags=re.S)
    text = re.sub(r"--[^\n]*", "", text)
    return [s.strip() for s in text.split(";") if s.strip()]


def _split_top(body: str) -> list[str]:
    """Comma-separated items at parenthesis depth 0."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            items.append(body[start:i].strip())
            start = i + 1
    items.append(body[start:].strip())
    return [item for item in items if item]


def _cols(text: str) -> list[str]:
    return [c.strip().strip('"') for c in _split_top(text)]


def _key_name(table: str, kind: str, columns: list[str]) -> str:
    return f"{table}_pkey" if kind == "PRIMARY KEY" else f"{table}_{'_'.join(columns)}_key"


def _add_constraint(tables: dict[str, Table], table: str, item: str) -> None:
    named = re.match(r"CONSTRAINT\s+(\w+)\s+(.*)", item, re.S | re.I)
    name, item = (named.group(1), named.group(2)) if named else (None, item)
    found = re.match(r"(PRIMARY KEY|UNIQUE)\s*\((.*)\)", item, re.S | re.I)
    if found:
        kind, columns = found.group(1).upper(), _cols(found.group(2))
        tables[table].keys[name or _key_name(table, kind, columns)] = ", ".join(columns)


def _create_table(tables: dict[str, Table], stmt: str) -> None:
    head = re.match(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)\s*\((.*)\)\s*$", stmt, re.S | re.I)
    assert head, stmt
    table = head.group(1)
    tables[table] = Table()
    for item in _split_top(head.group(2)):
        if re.match(r"(PRIMARY KEY|UNIQUE|CONSTRAINT)\b", item, re.I):
            _add_constraint(tables, table, item)
        elif not re.match(r"(CHECK|FOREIGN KEY|EXCLUDE)\b", item, re.I):
            column = item.split()[0].strip('"')
            tables[table].columns.add(column)
            if re.search(r"\bPRIMARY KEY\b", item, re.I):
                tables[table].keys[f"{table}_pkey"] = column
            elif re.search(r"\bUNIQUE\b", item, re.I):
                tables[table].keys[f"{table}_{column}_key"] = column


def _alter_table(tables: dict[str, Table], stmt: str) -> None:
    head = re.match(r"ALTER TABLE (?:IF EXISTS )?(?:ONLY )?(\w+)\s+(.*)$", stmt, re.S | re.I)
    assert head, stmt
    table = head.group(1)
    for action in _split_top(head.group(2)):
        if m := re.match(r"ADD COLUMN (?:IF NOT EXISTS )?(\w+)", action, re.I):
            tables[table].columns.add(m.group(1))
        elif m := re.match(r"DROP COLUMN (?:IF EXISTS )?(\w+)", action, re.I):
            tables[table].columns.discard(m.group(1))
        elif m := re.match(r"DROP CONSTRAINT (?:IF EXISTS )?(\w+)", action, re.I):
            tables[table].keys.pop(m.group(1), None)
        elif m := re.match(r"ADD\s+(.*)", action, re.S | re.I):
            _add_constraint(tables, table, m.group(1))


def schema() -> dict[str, Table]:
    """Every table the migrations leave, with its columns and unique keys."""
    tables: dict[str, Table] = {}
    for path in sorted(MIGRATIONS.glob("*.sql")):
        for stmt in _statements(path.read_text(encoding="utf-8")):
            if re.match(r"CREATE TABLE\b", stmt, re.I):
                _create_table(tables, stmt)
            elif re.match(r"ALTER TABLE\b", stmt, re.I):
                _alter_table(tables, stmt)
            elif m := re.match(
                r"CREATE UNIQUE INDEX (?:IF NOT EXISTS )?(\w+) ON (\w+)[^(]*\((.*?)\)\s*(WHERE|$)", stmt, re.S | re.I
            ):
                tables[m.group(2)].keys[m.group(1)] = m.group(3)
            elif m := re.match(r"DROP INDEX (?:IF EXISTS )?(\w+)", stmt, re.I):
                for table in tables.values():
                    table.keys.pop(m.group(1), None)
            elif m := re.match(r"DROP TABLE (?:IF EXISTS )?(\w+)", stmt, re.I):
                tables.pop(m.group(1), None)
    return tables


def routes_by_tenant(sql: str) -> bool:
    """Whether a statement compares tenant_id in a condition (a filter, or a join to the batch's unnest) or
    inserts it (so Citus can route it to the tenant's shard). A reading of the text, not a planner: a statement
    that only joins a table to itself on tenant_id passes it, hence the claims named in QUERY_EXCEPTIONS."""
    code = re.sub(r"--[^\n]*", "", sql)
    if re.search(r"\btenant_id\s*(=|IN\b|IS NOT DISTINCT FROM)", code, re.I):
        return True
    if re.search(r"=\s*[\w.]*\btenant_id\b", code):
        return True
    if re.search(r"\btenant_id\b[^()]*\)\s*(=|IN\b)", code, re.I):
        return True
    insert = re.search(r"INSERT INTO \w+\s*\(([^)]*)\)", code, re.I)
    return bool(insert and "tenant_id" in _cols(insert.group(1)))


def test_every_table_is_distributed_by_tenant_or_named_with_a_reason() -> None:
    """A table in neither list fails, naming where to add it (a new table cannot be forgotten at merge)."""
    tables = schema()
    unplaced = sorted(set(tables) - DISTRIBUTED - set(REFERENCE_TABLES))
    assert not unplaced, (
        f"tables in no Citus layout: {unplaced}. Add each to DISTRIBUTED in {THIS} (it has a tenant_id column; "
        "its primary key and unique indexes must include tenant_id), or to REFERENCE_TABLES with the reason it "
        "is read across tenants; docs/scaling.md lists them. (removed_orders and the quota usage table are "
        "expected in DISTRIBUTED.)"
    )
    missing = sorted(set(DISTRIBUTED) - set(tables)) + sorted(set(REFERENCE_TABLES) - set(tables))
    assert not missing, f"{THIS} names tables the migrations no longer create: {missing}; remove them"
    without = sorted(t for t in DISTRIBUTED if DIST not in tables[t].columns)
    assert not without, f"distributed tables without a tenant_id column: {without}; add the column in a migration"


def test_a_distributed_tables_keys_include_the_tenant() -> None:
    """Each primary key and unique index of a distributed table includes tenant_id, but for named exceptions."""
    tables = schema()
    bad = {
        (t, name): cols
        for t in sorted(DISTRIBUTED & set(tables))
        for name, cols in tables[t].keys.items()
        if DIST not in cols
    }
    unexplained = {k: v for k, v in bad.items() if k not in KEY_EXCEPTIONS}
    assert not unexplained, (
        "unique keys of distributed tables without tenant_id (Citus refuses them): "
        + "; ".join(f"{t}.{n} ({c})" for (t, n), c in unexplained.items())
        + f". Put tenant_id in the key, or add (table, name) to KEY_EXCEPTIONS in {THIS} with the reason"
    )
    stale = sorted(set(KEY_EXCEPTIONS) - set(bad))
    assert not stale, f"KEY_EXCEPTIONS names keys that now include tenant_id or are gone: {stale}; remove them"


def test_the_hot_paths_statements_route_by_the_tenant() -> None:
    """Each hot-path statement filters, joins or inserts on tenant_id (itself, or in the function it calls: Citus
    distributes a PL/pgSQL function's queries as any other), but for named exceptions."""
    failing, seen = [], set()
    for file, names in HOT_PATH.items():
        queries = load(file)
        for name in names or tuple(queries):
            assert name in queries, f"{file} has no statement {name!r}: update HOT_PATH in {THIS}"
            seen.add((file, name))
            if not routes_by_tenant(with_called(queries[name])) and (file, name) not in QUERY_EXCEPTIONS:
                failing.append(f"{file} {name}")
    assert not failing, (
        f"hot-path statements that do not route by tenant_id: {failing}. Filter them by tenant_id, or add "
        f"(file, name) to QUERY_EXCEPTIONS in {THIS} with the reason"
    )
    stale = sorted(set(QUERY_EXCEPTIONS) - seen)
    assert not stale, f"QUERY_EXCEPTIONS names statements off the hot path: {stale}; remove them"


def test_the_readers_catch_what_they_are_for() -> None:
    """The checks themselves: a key without the tenant and a statement without it are seen; with it, not."""
    tables: dict[str, Table] = {}
    _create_table(tables, "CREATE TABLE t (id bigserial PRIMARY KEY, tenant_id text, k text UNIQUE)")
    _alter_table(tables, "ALTER TABLE t DROP CONSTRAINT t_k_key, ADD UNIQUE (tenant_id, k)")
    assert tables["t"].keys == {"t_pkey": "id", "t_tenant_id_k_key": "tenant_id, k"}
    assert routes_by_tenant("SELECT 1 FROM t WHERE tenant_id = $1 AND id = $2")
    assert routes_by_tenant("INSERT INTO t (tenant_id, k) SELECT * FROM unnest($1::text[], $2::text[])")
    assert not routes_by_tenant("SELECT 1 FROM t WHERE id = $1 -- tenant_id = $2")
    call = "SELECT * FROM nexus_read_batch($1::text[], $2::text[], $3::text[], $4, $5, $6, $7)"
    assert not routes_by_tenant(call) and routes_by_tenant(with_called(call))  # followed into migration 0046
