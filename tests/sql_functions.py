"""The SQL functions the migrations define, read as text (no database): a named query calling one is read together
with the function's body, so a check on the text of the store's statements (who writes orders, what routes by
tenant) follows a statement into the function that runs it (migration 0046's `nexus_read_batch`, ...)."""

from __future__ import annotations

import functools
import re
from importlib import resources

FUNCTION = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(\w+)\s*\(.*?\$\$.*?\$\$", re.IGNORECASE | re.DOTALL)


@functools.cache
def functions() -> dict[str, str]:
    """Each function's last definition in the migrations (its whole CREATE FUNCTION text), by name."""
    folder = resources.files("nexus.store").joinpath("migrations")
    texts = [f.read_text() for f in sorted(folder.iterdir(), key=lambda f: f.name) if f.name.endswith(".sql")]
    return {m.group(1).lower(): m.group(0) for text in texts for m in FUNCTION.finditer(text)}


def with_called(sql: str) -> str:
    """`sql` followed by the definitions of the functions it calls (one level: what the store's statements do)."""
    called = [body for name, body in functions().items() if re.search(rf"\b{name}\s*\(", sql, re.IGNORECASE)]
    return "\n".join([sql, *called])
