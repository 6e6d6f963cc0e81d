"""The soak's verdict and its report: the pass criteria over its cycles and samples, and soak.json, soak.md and
soak.png (what they hold: `nexus_lab.soak`)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

from nexus_lab.soak_memory import trend
from nexus_lab.tables import text_table

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from nexus_lab.soak import SoakConfig

RSS_TOLERANCE = 0.10
P99_TOLERANCE = 1.5
RSS_REFERENCE_MINUTE = 5
FLAT_REFERENCE_MINUTE = 10
FLAT_JUDGED_MINUTES = 15
FLAT_TOLERANCE = 0.10
FLAT_ROWS = 1_000
POSTGRES_FLOOR_MB = 5.0
"""PostgreSQL's judged figure (~5-15 MB: the server's processes and one backend, outside shared memory) may also
grow this much: a backend's caches fill over its first minutes; a leak that matters passes it within a run."""
SHOWN = "postgres-uss"
"""PostgreSQL's private memory summed over all its processes: shown beside the judged figure, not judged."""


TABLES = ("orders", "outbox", "deliveries", "delivery_attempts", "decision_log", "dead_letters", "saga_steps")


@dataclasses.dataclass
class Cycle:
    """What one cycle did and measured."""

    n: int
    started_s: float
    elapsed_s: float = 0.0
    rounds: int = 0
    """Rounds of plans run (`SoakConfig.rounds_per_cycle` unless the run broke off)."""
    lagged_s: float = 0.0
    """How long the rounds ran on after the faults ended (the cycle waited for them); 0: within the schedule."""
    faults: dict[str, int] = dataclasses.field(default_factory=dict)
    events: int = 0
    p99_ms: float = 0.0
    cpu_s_per_1k: float = 0.0
    tables: dict[str, int] = dataclasses.field(default_factory=dict)
    held: int = 0
    checked: int = 0
    violations: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Sample:
    """RSS (MB) of the never-killed processes at one minute; `settled`: taken at the same phase of every cycle
    (`nexus_lab.soak.Soak.phase_s` after its load began, the load stopped)."""

    minute: float
    rss_mb: dict[str, float]
    settled: bool = False
    tables: dict[str, int] = dataclasses.field(default_factory=dict)
    """Rows of every table of the gateway's schema (settled samples only)."""
    postgres: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    """Own memory (MB) of each PostgreSQL process by kind (`soak_memory.postgres_memory`): what the figure sums."""


def verdict_of(
    config: SoakConfig, cycles: list[Cycle], samples: list[Sample], errors: list[str]
) -> list[tuple[str, bool, str]]:
    """(criterion, held, detail) for each pass criterion."""
    violations = sum(len(c.violations) for c in cycles)
    detail = f"{violations} violations in {len(cycles)} cycles" + (f"; {errors[0]}" if errors else "")
    out = [("no invariant violation", violations == 0 and not errors and bool(cycles), detail)]
    if config.minutes >= RSS_REFERENCE_MINUTE and samples:
        out += [_rss_drift(samples, name) for name in sorted({n for s in samples for n in s.rss_mb} - {SHOWN})]
    else:
        out.append(("RSS at most 10 % above minute 5", True, "not judged: a run shorter than 5 minutes"))
    if len(cycles) >= 2:
        first, last_cycle = cycles[0].p99_ms, cycles[-1].p99_ms
        out.append((f"p99 of the last cycle within {P99_TOLERANCE}x of the first",
                    last_cycle <= P99_TOLERANCE * first, f"{first:.0f} -> {last_cycle:.0f} ms"))  # fmt: skip
    else:
        out.append(("p99 of the last cycle within 1.5x of the first", True, "not judged: one cycle"))
    out.append(_flat_tables(config, samples))
    return out


def _flat_tables(config: SoakConfig, samples: list[Sample]) -> tuple[str, bool, str]:
    """Every table with at least 1,000 rows at minute 10 ends within 10 % or 1,000 rows of that count (finished
    orders leave after `--retention-s`: docs/retention.md), compared on settled samples (the same phase of each
    cycle, so each sees one cycle's finished orders); runs under 15 minutes are not judged."""
    criterion = (f"tables with >= {FLAT_ROWS:,} rows at minute {FLAT_REFERENCE_MINUTE} end within "
                 f"{FLAT_TOLERANCE:.0%} or {FLAT_ROWS:,} rows")  # fmt: skip
    counted = [s for s in samples if s.settled and s.tables]
    reference = next((s for s in counted if s.minute >= FLAT_REFERENCE_MINUTE), None)
    if config.minutes < FLAT_JUDGED_MINUTES or reference is None or reference is counted[-1]:
        return criterion, True, f"not judged: a run shorter than {FLAT_JUDGED_MINUTES} minutes"
    last = counted[-1].tables
    grown = {
        table: (rows, last.get(table, 0))
        for table, rows in reference.tables.items()
        if rows >= FLAT_ROWS and abs(last.get(table, 0) - rows) > max(FLAT_TOLERANCE * rows, FLAT_ROWS)
    }
    judged = sum(1 for rows in reference.tables.values() if rows >= FLAT_ROWS)
    detail = ", ".join(f"{t} {a} -> {b}" for t, (a, b) in sorted(grown.items())) or f"{judged} tables judged, flat"
    return criterion, not grown, f"minute {reference.minute:.1f} -> {counted[-1].minute:.1f}: {detail}"


def _rss_drift(samples: list[Sample], name: str) -> tuple[str, bool, str]:
    """RSS of `name` at the end against minute 5, growth only: memory that falls is no leak. The never-restarted
    gateway and dispatcher are compared minute 5 against the last sample, whatever the phase. PostgreSQL is
    stopped and started in every cycle and its backends come and go with the load: its judged figure is its
    processes' own memory (`soak_memory.steady_mb`: outside shared memory, the server's processes and a median
    backend), at the same phase of each cycle (the settled samples from minute 5), by their Theil-Sen trend
    (`soak_memory.trend`: one sample off the line does not decide, a steady growth does)."""
    samples = [s for s in samples if name in s.rss_mb and (s.settled or name != "postgres")]
    reference = next((i for i, s in enumerate(samples) if s.minute >= RSS_REFERENCE_MINUTE - 0.05), None)
    criterion = f"RSS of {name} at most {RSS_TOLERANCE:.0%} above minute {RSS_REFERENCE_MINUTE}"
    if name == "postgres":
        criterion = (f"PostgreSQL's own memory at most {RSS_TOLERANCE:.0%} or {POSTGRES_FLOOR_MB:g} MB above minute "
                     f"{RSS_REFERENCE_MINUTE} (trend of the settled samples)")  # fmt: skip
    if reference is None or reference == len(samples) - 1:
        return criterion, True, "not judged: no later sample than minute 5"
    if name == "postgres":
        judged = samples[reference:]
        mb, now = trend([(s.minute, s.rss_mb[name]) for s in judged])
        how = f", trend of {len(judged)} settled samples ({', '.join(f'{s.rss_mb[name]:.1f}' for s in judged)})"
    else:
        mb, now, how = samples[reference].rss_mb[name], samples[-1].rss_mb[name], ""
    drift = (now - mb) / mb if mb else 0.0
    held = drift <= RSS_TOLERANCE or (name == "postgres" and now - mb <= POSTGRES_FLOOR_MB)
    return criterion, held, f"{mb:.1f} -> {now:.1f} MB ({drift:+.1%}){how}"


def write_report(
    config: SoakConfig,
    cycles: list[Cycle],
    samples: list[Sample],
    errors: list[str],
    verdict: list[tuple[str, bool, str]],
) -> None:
    """soak.json, soak.md (printed too) and, where matplotlib is installed, soak.png in `config.out`."""
    out = config.out
    out.mkdir(parents=True, exist_ok=True)
    data = {
        "config": {k: str(v) for k, v in dataclasses.asdict(config).items()},
        "cycles": [dataclasses.asdict(c) for c in cycles],
        "samples": [dataclasses.asdict(s) for s in samples],
        "verdict": [{"criterion": c, "held": ok, "detail": d} for c, ok, d in verdict],
        "errors": errors,
    }
    (out / "soak.json").write_text(json.dumps(data, indent=2) + "\n")
    text = render(config, cycles, samples, verdict)
    (out / "soak.md").write_text(text + "\n")
    print(text)
    with contextlib.suppress(ImportError):
        plot(cycles, samples, out / "soak.png")
        plot_tables(samples, out / "soak-tables.png")


def render(config: SoakConfig, cycles: list[Cycle], samples: list[Sample], verdict: list[tuple[str, bool, str]]) -> str:
    names = sorted({n for s in samples for n in s.rss_mb})
    per_minute = [
        (f"{s.minute:.1f}{' (settled)' if s.settled else ''}", *(f"{s.rss_mb.get(n, 0):.1f}" for n in names))
        for s in samples
    ]
    minutes = text_table("RSS of the kept processes (MB; postgres: own memory, judged when settled)",
                         ("minute", *names), per_minute)  # fmt: skip
    header = (
        "cycle",
        "at s",
        "rounds",
        "lag s",
        "events",
        "p99 ms",
        "CPU s/1k ev",
        "faults",
        "invariants",
        *TABLES,
        "db MB",
    )
    rows = [(str(c.n), f"{c.started_s:.0f}", str(c.rounds), f"{c.lagged_s:.0f}", str(c.events), f"{c.p99_ms:.0f}",
             f"{c.cpu_s_per_1k:.3f}",
             str(sum(c.faults.values())), f"{c.held}/{c.checked}",
             *(str(c.tables.get(t, 0)) for t in TABLES), str(c.tables.get("database_mb", 0)))
            for c in cycles]  # fmt: skip
    table = text_table("cycles", header, rows)
    lines = [f"nexus soak: {config.minutes:g} minutes, seed {config.seed!r}", "", minutes, "", table, ""]
    lines += [postgres_table(samples), "", flat_table(samples), ""]
    lines += [f"{'ok  ' if ok else 'FAIL'} {criterion}: {detail}" for criterion, ok, detail in verdict]
    return "\n".join(lines)


def postgres_table(samples: list[Sample]) -> str:
    """PostgreSQL's own memory by process kind at each settled sample: MB summed over the kind's processes (and
    how many there were), what the judged figure is made of."""
    settled = [s for s in samples if s.settled and s.postgres]
    kinds = sorted({k for s in settled for k in s.postgres})
    rows = [
        (f"{s.minute:.1f}", f"{s.rss_mb.get('postgres', 0):.1f}", f"{s.rss_mb.get(SHOWN, 0):.1f}", *_kinds(s, kinds))
        for s in settled
    ]
    title = "PostgreSQL's own memory by process kind at the settled samples (MB, processes)"
    return text_table(title, ("minute", "judged", SHOWN, *kinds), rows)


def _kinds(sample: Sample, kinds: list[str]) -> list[str]:
    """Each kind's own memory summed, with its process count: `12.3 (4)`."""
    return [f"{sum(sample.postgres.get(k, [])):.1f} ({len(sample.postgres.get(k, []))})" for k in kinds]


def flat_table(samples: list[Sample]) -> str:
    """Rows of each table of >= 1,000 rows at the flatness criterion's reference (the first settled sample at or
    after minute 10) and at the last settled sample, with the change."""
    counted = [s for s in samples if s.settled and s.tables]
    reference = next((s for s in counted if s.minute >= FLAT_REFERENCE_MINUTE), counted[-1] if counted else None)
    if reference is None:
        return "table rows: no settled sample"
    last = counted[-1]
    big = sorted(t for t in {*reference.tables, *last.tables}
                 if max(reference.tables.get(t, 0), last.tables.get(t, 0)) >= FLAT_ROWS)  # fmt: skip
    rows = [(t, str(reference.tables.get(t, 0)), str(last.tables.get(t, 0)),
             f"{last.tables.get(t, 0) - reference.tables.get(t, 0):+d}") for t in big]  # fmt: skip
    title = f"rows of the tables of >= {FLAT_ROWS:,} rows (settled samples)"
    return text_table(title, ("table", f"minute {reference.minute:.1f}", f"minute {last.minute:.1f}", "change"), rows)


def plot_tables(samples: list[Sample], path: Path) -> None:
    """soak-tables.png: rows over time of every table that reached 1,000 rows, minutes on x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 1, figsize=(9, 5))
    _plot_tables(axes, [s for s in samples if s.settled and s.tables])
    axes.axvline(FLAT_REFERENCE_MINUTE, color="grey", linestyle=":", label=f"minute {FLAT_REFERENCE_MINUTE}")
    axes.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot(cycles: list[Cycle], samples: list[Sample], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom, rows) = plt.subplots(3, 1, figsize=(9, 10))
    names = sorted({n for s in samples for n in s.rss_mb})
    for name in names:  # a process that was down at a sample (PostgreSQL mid-outage) has no point there
        points = [(s.minute, s.rss_mb[name]) for s in samples if s.rss_mb.get(name)]
        top.plot([m for m, _ in points], [mb for _, mb in points], "o-", label=name)
    settled = [s for s in samples if s.settled and "postgres" in s.rss_mb]
    top.plot([s.minute for s in settled], [s.rss_mb["postgres"] for s in settled], "k*", markersize=10,
             label="postgres, settled (judged)")  # fmt: skip
    top.set_xlabel("minute")
    top.set_ylabel("RSS MB")
    top.set_ylim(bottom=0)
    top.legend(loc="lower right")
    top.set_title("RSS of the kept processes (postgres: its own memory, judged; postgres-uss: its private memory)")
    numbers = [c.n for c in cycles]
    bottom.plot(numbers, [c.p99_ms for c in cycles], "o-", color="tab:blue", label="p99 of HTTP sends")
    bottom.set_xlabel("cycle")
    bottom.set_ylabel("p99 ms", color="tab:blue")
    bottom.set_ylim(bottom=0)
    cpu = bottom.twinx()
    cpu.plot(numbers, [c.cpu_s_per_1k for c in cycles], "s--", color="tab:orange", label="CPU s / 1k events")
    cpu.set_ylabel("CPU s per 1,000 events (kept processes)", color="tab:orange")
    cpu.set_ylim(bottom=0)
    bottom.set_title("per cycle: p99 of the agent's HTTP sends, CPU of the kept processes per 1,000 events")
    _plot_tables(rows, [s for s in samples if s.settled and s.tables])
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _plot_tables(axes: Axes, counted: list[Sample]) -> None:
    """Rows over time of every table that reached 1,000 (the flatness criterion's), at the settled samples."""
    big = sorted({t for s in counted for t, n in s.tables.items() if n >= FLAT_ROWS})
    for table in big:
        axes.plot([s.minute for s in counted], [s.tables.get(table, 0) for s in counted], "o-", label=table)
    axes.set_xlabel("minute")
    axes.set_ylabel("rows")
    axes.set_ylim(bottom=0)
    if big:
        axes.legend(loc="upper left", fontsize="small")
    axes.set_title(f"rows of the tables of >= {FLAT_ROWS:,} rows, at the same phase of each cycle (retention on)")
