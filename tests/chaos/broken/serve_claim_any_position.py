"""`nexus ...` whose dispatcher ignores the per-order delivery order: `claim` without its condition that
no lower position of the same (order, subscription) is still pending.

A notification waiting for its retry then no longer holds back the order's next ones, so a receiver
that fails now and then takes an order's notifications out of position order.
"""

from __future__ import annotations

import re
import sys

from nexus.store.queries import load

_IN_ORDER = re.compile(r"\s*AND NOT EXISTS \(\s*SELECT 1 FROM deliveries AS p.*?p\.position < d\.position\)", re.S)


def main() -> int:
    queries = load("delivery.sql")
    claim, found = _IN_ORDER.subn("", queries["claim"])
    if found != 1:
        raise SystemExit("the claim query changed shape: update this broken variant")
    queries["claim"] = claim
    from nexus.cli import main as nexus_main

    return nexus_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
