"""The table `nexus chaos` ends with: one row per scenario."""

from __future__ import annotations

from collections.abc import Sequence

from nexus_lab.chaos.result import ScenarioResult
from nexus_lab.tables import text_table

HEADER = ("scenario", "plans", "faults injected", "invariants held", "time", "result")


def row(r: ScenarioResult) -> tuple[str, ...]:
    if r.error:
        result = "ERROR"
    elif not r.invariants_ok:
        result = "FAILED"
    elif not r.fault_proved:
        result = "ok (no fault)"
    else:
        result = "ok"
    return (r.name, str(r.plans), str(r.injected), f"{r.held}/{r.checked}", f"{r.elapsed_s:.1f}s", result)


def render(results: Sequence[ScenarioResult], seed: str) -> str:
    """The summary table, then what each scenario injected."""
    lines = [text_table(f"nexus chaos (seed {seed})", HEADER, [row(r) for r in results]), ""]
    for r in results:
        what = ", ".join(f"{n} {k}" for k, n in sorted(r.faults.items())) or "nothing"
        lines.append(f"{r.name}: {what}")
    failed = [r.name for r in results if not r.ok]
    lines.append("")
    lines.append(f"FAILED: {', '.join(failed)}" if failed else "all invariants held in every scenario")
    return "\n".join(lines)
