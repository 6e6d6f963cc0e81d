"""`nexus ...` whose step numbering forgets the idempotency keys it has seen: a repeated MCP call is numbered
as a new step instead of answered DUPLICATE with its first verdict. The gateway-kill scenario's MCP
agents, which repeat one call per order, must catch it."""

from __future__ import annotations

import sys
from typing import Any


def main() -> int:
    from nexus.core.decide import numbering

    original = numbering.assign

    def forgetful(*args: Any, **kwargs: Any) -> Any:
        kwargs["known"] = {}
        return original(*args, **kwargs)

    numbering.assign = forgetful  # type: ignore[assignment]  # the broken build: a stand-in of another type
    from nexus_cli import main as nexus_main

    return nexus_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
