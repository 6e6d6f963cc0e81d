"""What `nexus bench` prints and writes: a progress line per scenario, the table, the ratios, JSON, a PNG."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nexus_lab.bench.scenarios import Row

# The gateway paths compared with the baselines, by their scenario names.
GATEWAY = {"http": "HTTP, 1 event/request", "submit": "Gateway.submit, 1 event/call"}
BASELINES = {"raw": "raw SQL floor (1 tx/event)", "peer": "DBOS Transact (workflow/order, step/event)"}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def progress(r: Row) -> None:
    extra = ""
    if r.get("cpu_pct"):
        cpu = r["cpu_pct"]
        extra = f"  cpu% server {cpu['server']} postgres {cpu['postgres']} clients {cpu['clients']}"
    if r.get("cpu_s_per_1000"):
        extra += "  cpu s/1000 events " + " ".join(f"{k} {v}" for k, v in r["cpu_s_per_1000"].items())
    print(
        f"  {r['suite']:<8} c={r['concurrency']:<3} {r['events_per_s']:>9,.0f} events/s  p50 {_ms(r['p50_ms'])}"
        f"  p95 {_ms(r['p95_ms'])}  p99 {_ms(r['p99_ms'])} ms ({r['latency_of']})  {r['scenario']}{extra}",
        flush=True,
    )


def table(rows: Sequence[Row]) -> str:
    head = f"| {'scenario':<44} | conc | events | events/s | p50 ms | p95 ms | p99 ms | latency of   |"
    lines = [head, "|" + "|".join("-" * len(c) for c in head.split("|")[1:-1]) + "|"]
    for r in rows:
        lines.append(
            f"| {r['scenario']:<44} | {r['concurrency']:>4} | {r['events']:>6} | {r['events_per_s']:>8,.0f} |"
            f" {_ms(r['p50_ms']):>6} | {_ms(r['p95_ms']):>6} | {_ms(r['p99_ms']):>6} | {r['latency_of']:<12} |"
        )
    return "\n".join(lines)


def ratios(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Per concurrency: events/s of each gateway path over the raw floor and over the peer, same run."""
    rate = {(r["scenario"], r["concurrency"]): r["events_per_s"] for r in rows}
    out = []
    for conc in sorted({r["concurrency"] for r in rows}):
        entry: dict[str, Any] = {"concurrency": conc}
        for g, g_name in GATEWAY.items():
            for b, b_name in BASELINES.items():
                if (g_name, conc) in rate and (b_name, conc) in rate:
                    entry[f"{g}/{b}"] = round(rate[g_name, conc] / rate[b_name, conc], 2)
        if len(entry) > 1:
            out.append(entry)
    return out


def ratio_table(entries: Sequence[dict[str, Any]]) -> str:
    keys = [f"{g}/{b}" for g in GATEWAY for b in BASELINES]
    lines = ["| conc | " + " | ".join(keys) + " |", "|-----:|" + "|".join("-" * (len(k) + 2) for k in keys) + "|"]
    for e in entries:
        cells = [f"{e[k]:.2f}" if k in e else "-" for k in keys]
        lines.append(
            f"| {e['concurrency']:>4} | "
            + " | ".join(f"{c:>{len(k)}}" for c, k in zip(cells, keys, strict=True))
            + " |"
        )
    return "\n".join(lines)


def write_json(path: Path, meta: dict[str, Any], rows: Sequence[Row], skipped: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"meta": meta, "results": list(rows), "ratios": ratios(rows), "skipped": skipped}
    path.write_text(json.dumps(body, indent=2) + "\n")


def plot(path: Path, rows: Sequence[Row], title: str) -> None:
    """Events/s (log y) and p99 latency (log y) by concurrency, one line per scenario."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[Row]] = {}
    for r in rows:
        series.setdefault(r["scenario"], []).append(r)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2))
    for name, points in series.items():
        points = sorted(points, key=lambda r: r["concurrency"])
        xs = [p["concurrency"] for p in points]
        style = "--" if name in BASELINES.values() else "-"
        left.plot(xs, [p["events_per_s"] for p in points], style, marker="o", label=name)
        lat = [(p["concurrency"], p["p99_ms"]) for p in points if p["p99_ms"]]
        if lat:
            right.plot(*zip(*lat, strict=True), style, marker="o", label=f"{name} ({points[0]['latency_of']})")
    for ax, ylabel in ((left, "events/s"), (right, "p99 latency, ms")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("concurrency")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_xticks(sorted({r["concurrency"] for r in rows}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    left.set_title("throughput (dashed: baselines)")
    right.set_title("p99 latency (of what each scenario times)")
    handles, labels = left.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
