"""Every write of an order's state goes through the fold (issue 33 item 1): of the store's named queries only
gateway.sql `write_batch` inserts or upserts orders (the BatchPlan's rows, `finished` included; through the function
`nexus_write_batch` since migration 0046), and the one other statement updating orders, saga.sql `set_outbox_counts`,
sets no column the fold decides a state from."""

from __future__ import annotations

import re
from importlib import resources

from nexus.store.queries import load
from tests.sql_functions import functions, with_called

WRITES = re.compile(r"\b(INSERT\s+INTO|UPDATE)\s+orders\b", re.IGNORECASE)
STATE = re.compile(r"\b(status|tombstone|finished_at|last_seq|plan_id)\s*=", re.IGNORECASE)


def order_writers() -> dict[tuple[str, str], str]:
    """Every named query writing the orders table, by (file, name)."""
    files = [f.name for f in resources.files("nexus.store").joinpath("queries").iterdir() if f.name.endswith(".sql")]
    return {(f, name): sql for f in sorted(files) for name, sql in load(f).items() if WRITES.search(with_called(sql))}


def test_only_write_batch_writes_an_orders_state() -> None:
    """`write_batch` is the one query inserting orders; `set_outbox_counts` the one other writer, of a count only."""
    writers = order_writers()
    assert sorted(writers) == [("gateway.sql", "write_batch"), ("saga.sql", "set_outbox_counts")]
    counts = writers[("saga.sql", "set_outbox_counts")]
    assert not re.search(r"INSERT\s+INTO\s+orders", counts, re.IGNORECASE) and not STATE.search(counts)


def test_the_one_function_writing_orders_is_the_group_commits() -> None:
    """Of the functions the migrations define, only `nexus_write_batch` (the group commit's write) inserts or updates
    orders: no trigger or helper writes an order's state beside the fold."""
    assert [name for name, body in functions().items() if WRITES.search(body)] == ["nexus_write_batch"]
