"""`nexus ...` with a remover that takes finished orders away while their deliveries are still pending.

The notifications not yet delivered leave with the order: the receiver never gets them, and the order's
removal marker says its deliveries were open.
"""

from __future__ import annotations

import sys

from nexus.store.queries import load


def main() -> int:
    queries = load("retention.sql")
    guard = "AND d.state = 'pending')"
    assert guard in queries["due_orders"], "the open-delivery guard moved: update this variant"
    queries["due_orders"] = queries["due_orders"].replace(guard, "AND false)")
    from nexus_cli import main as nexus_main

    return nexus_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
