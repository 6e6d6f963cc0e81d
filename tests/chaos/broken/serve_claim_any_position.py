"""`nexus ...` whose dispatcher ignores the per-order delivery order: `claim` without its condition that
the row be its (order, subscription)'s head, i.e. that no lower position is still pending.

A notification waiting for its retry then no longer holds back the order's next ones, so a receiver
that fails now and then takes an order's notifications out of position order.
"""

from __future__ import annotations

import re
import sys

from nexus.store.queries import load

_IN_ORDER = re.compile(r"\n\s*AND d\.head\n")


def main() -> int:
    queries = load("delivery.sql")
    claim, found = _IN_ORDER.subn("\n", queries["claim"])
    if found != 1:
        raise SystemExit("the claim query changed shape: update this broken variant")
    queries["claim"] = claim
    from nexus_cli import main as nexus_main

    return nexus_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
