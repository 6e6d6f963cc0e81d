"""The blocked-actions report: the decision-log rows whose decision is REJECTED, listed and counted."""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Sequence
from typing import Any, NamedTuple

from nexus.store.database import Database
from nexus.store.queries import query

DIMENSIONS = {7: "by_code", 11: "by_check", 13: "by_step_type", 14: "by_actor"}
"""GROUPING() bitmask of `blocked_summary`'s grouping sets -> the summary key."""
UNKNOWN_ACTOR = "unknown"


class Filters(NamedTuple):
    """What the report keeps (None: any), in the order the `blocked` queries take them as arguments."""

    tenant: str | None = None
    order: str | None = None
    plan: str | None = None
    code: str | None = None
    since: dt.datetime | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            k: (v.isoformat() if isinstance(v, dt.datetime) else v) for k, v in self._asdict().items() if v is not None
        }


def item_json(row: Any) -> dict[str, Any]:
    return {
        "id": row["id"],
        "at": row["at"].isoformat(),
        "tenant": row["tenant_id"],
        "order_id": row["order_id"],
        "plan_id": row["plan_id"],
        "seq": row["seq"],
        "event_type": row["event_type"],
        "event_id": row["event_id"],
        "code": row["code"],
        "check": row["check"],
        "message": row["message"],
        "actor": row["actor"],
        "actor_name": row["actor_name"],
    }


async def blocked_actions(
    db: Database, filters: Filters, *, limit: int = 100, offset: int = 0, cursor: int | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """Newest first. `next_cursor` (the last id, as a string) fetches the next page; None at the end."""
    rows = await db.fetch(query("audit.sql", "blocked"), *filters, cursor, limit + 1, offset)
    items = [item_json(r) for r in rows[:limit]]
    next_cursor = str(items[-1]["id"]) if len(rows) > limit and items else None
    return items, next_cursor


async def blocked_summary(db: Database, filters: Filters) -> dict[str, Any]:
    """Counts of blocked actions: total, and by code, check, step type and agent (actor)."""
    rows = await db.fetch(query("audit.sql", "blocked_summary"), *filters)
    summary: dict[str, Any] = {"total": 0, **{name: {} for name in DIMENSIONS.values()}}
    for r in rows:
        if r["g"] == 15:
            summary["total"] = r["n"]
            continue
        name = DIMENSIONS[r["g"]]
        column = {"by_code": "code", "by_check": "check", "by_step_type": "event_type", "by_actor": "actor"}[name]
        key = r[column]
        if key is None:
            if name != "by_actor":
                continue  # a rejection without a failed check (or type) is not counted under a check
            key = UNKNOWN_ACTOR
        summary[name][key] = r["n"]
    return summary


def render_table(summary: dict[str, Any], items: Sequence[dict[str, Any]]) -> str:
    lines = [f"blocked actions: {summary['total']}"]
    for name in DIMENSIONS.values():
        counts = summary[name]
        if counts:
            lines.append(f"  {name.replace('_', ' ')}:")
            lines.extend(f"    {count:>6}  {key}" for key, count in counts.items())
    if items:
        lines.append("recent:")
        for i in items:
            check = f" check={i['check']}" if i["check"] else ""
            named = f" ({i['actor_name']!r})" if i.get("actor_name") else ""
            lines.append(
                f"  {i['at']}  {i['tenant']}/{i['order_id']} plan={i['plan_id']} seq={i['seq']} "
                f"{i['event_type']} {i['code']}{check} actor={i['actor'] or UNKNOWN_ACTOR}{named}"
            )
            if i["message"]:
                lines.append(f"      {i['message'][:200]}")
    return "\n".join(lines)


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f3f3f3}td.n{text-align:right}.grid{display:flex;flex-wrap:wrap;gap:2em}
.muted{color:#777}svg text{font:12px system-ui,sans-serif}
"""


def _bar_chart(counts: dict[str, int], title: str) -> str:
    """An inline SVG bar chart (no script, no external asset)."""
    if not counts:
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{html.escape(title)}" '
            'width="420" height="24"><text x="0" y="16">no data</text></svg>'
        )
    top = max(counts.values())
    bar_h, gap, label_w, width = 20, 6, 170, 420
    height = len(counts) * (bar_h + gap)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{html.escape(title)}" '
        f'width="{width + label_w}" height="{height}">'
    ]
    for n, (key, count) in enumerate(counts.items()):
        y = n * (bar_h + gap)
        w = max(1, round((width - 40) * count / top))
        parts.append(f'<text x="0" y="{y + 14}">{html.escape(str(key))[:28]}</text>')
        parts.append(f'<rect x="{label_w}" y="{y}" width="{max(w, 1)}" height="{bar_h}" fill="#c0392b"/>')
        parts.append(f'<text x="{label_w + max(w, 1) + 4}" y="{y + 14}">{count}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _count_table(counts: dict[str, int], heading: str) -> str:
    rows = "".join(f'<tr><td>{html.escape(str(k))}</td><td class="n">{v}</td></tr>' for k, v in counts.items())
    rows = rows or "<tr><td colspan=2>none</td></tr>"
    return f"<table><tr><th>{html.escape(heading)}</th><th>count</th></tr>{rows}</table>"


def render_html(
    summary: dict[str, Any], items: Sequence[dict[str, Any]], filters: Filters, generated_at: dt.datetime
) -> str:
    """One self-contained page: inline CSS, inline SVG chart, no external assets."""
    sections = [
        ("by code", "code", summary["by_code"]),
        ("by check", "check", summary["by_check"]),
        ("by step type", "step type", summary["by_step_type"]),
        ("by agent", "agent", summary["by_actor"]),
    ]
    tables = "".join(
        f"<div><h2>{html.escape(title)}</h2>{_count_table(counts, heading)}</div>"
        for title, heading, counts in sections
    )
    recent = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(i[k]) if i[k] is not None else '')}</td>"
            for k in ("at", "tenant", "order_id", "plan_id", "seq", "event_type", "code", "check", "actor", "message")
        )
        + "</tr>"
        for i in items
    )
    scope = ", ".join(f"{k}={v}" for k, v in filters.as_json().items()) or "all"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Nexus: blocked actions</title>
<style>{_CSS}</style></head><body>
<h1>Blocked actions: {summary["total"]}</h1>
<p class="muted">Steps the gateway REJECTED (decision log). Filters: {html.escape(scope)}.
Generated {html.escape(generated_at.isoformat(timespec="seconds"))}.</p>
<h2>By code</h2>
{_bar_chart(summary["by_code"], "blocked actions by code")}
<div class="grid">{tables}</div>
<h2>Most recent</h2>
<table><tr><th>at</th><th>tenant</th><th>order</th><th>plan</th><th>seq</th><th>step type</th><th>code</th>
<th>check</th><th>agent</th><th>message</th></tr>{recent or "<tr><td colspan=10>none</td></tr>"}</table>
</body></html>
"""
