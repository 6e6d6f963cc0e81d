"""`nexus ...` whose process never rejects a step in turn (`validate_step` approves everything).

Hallucinated steps then apply: a payment of the wrong amount or currency, an invented step type, a
skipped step are applied and notified, and the honest step that follows them is a DUPLICATE.
"""

from __future__ import annotations

import sys

import nexus.core.decide.validation


def main() -> int:
    nexus.core.decide.validation.validate_step = lambda *args, **kwargs: None  # type: ignore[assignment]
    from nexus.cli import main as nexus_main

    return nexus_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
