"""`nexus ...` with the per-order advisory lock removed: `begin_locked` (the group commit's and the plan starts'
transactions, nexus.store.locked) only begins, `lock_orders` (every other writer) locks nothing.

Two writers of one order then decide on the same state: a step buffered by one while the other applies
its predecessor stays buffered forever, and the order's row is overwritten by whichever commits last.
"""

from __future__ import annotations

import sys

from nexus.store.queries import load


def main() -> int:
    # Same parameters ($1, $2: the batch's tenants and order ids), no lock taken.
    load("gateway.sql")["lock_orders"] = "SELECT cardinality($1::text[]) + cardinality($2::text[])"
    load("gateway.sql")["begin_locked"] = "BEGIN"
    from nexus_cli import main as nexus_main

    return nexus_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
