"""The lab's one text-table renderer (demo, chaos, checker and bench tables)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def text_table(title: str | None, header: Sequence[str], rows: Sequence[Sequence[Any]], align: str = "") -> str:
    """A plain-text table: an optional title, the header, a rule as wide as the widest line, then the rows.

    `align` has one letter per column, ``l`` or ``r``; by default the first column is left-aligned and the
    others right-aligned (numbers). Columns are two spaces apart; lines carry no trailing spaces."""
    cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    align = align or "l" + "r" * (len(header) - 1)
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        parts = [f"{c:<{w}}" if a == "l" else f"{c:>{w}}" for c, w, a in zip(row, widths, align, strict=True)]
        return "  ".join(parts).rstrip()

    lines = [line(r) for r in cells]
    rule = "-" * max(len(x) for x in lines)
    return "\n".join([*([title] if title is not None else []), lines[0], rule, *lines[1:]])
