"""The rounds' table and medians for RESULTS.md ("Fourth pass (wip/http4)"): summary.py <dir of r*-*.json>."""

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(sys.argv[1])
BUILDS = ("base", "prev8", "http4")
KEYS = ("gw", "pg", "events/s", "p99", "floor", "x")
rows: dict[str, list[dict[str, float]]] = {b: [] for b in BUILDS}
for path in sorted(ROOT.glob("r*-*.json")):
    rnd, build = path.stem.split("-", 1)
    if build not in rows:
        continue
    doc = json.loads(path.read_text())
    r = doc["results"][0]
    rows[build].append({
        "round": int(rnd[1:]), "load": doc["meta"]["load_avg_before"][0], "events/s": r["events_per_s"],
        "p50": r["p50_ms"], "p99": r["p99_ms"], "errors": r["errors"], "gw": r["cpu_s_per_1k_events"]["gateway"],
        "pg": r["cpu_s_per_1k_events"]["postgres"], "floor": r["floor"]["events_per_s"], "x": r["ratio_to_floor"],
    })  # fmt: skip
print("| build, round | load (1 min) | events/s | p50 ms | p99 ms | errors | gateway CPU s/1k "
      "| PostgreSQL CPU s/1k | floor events/s | x floor |")  # fmt: skip
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for rnd in sorted({r["round"] for b in BUILDS for r in rows[b]}):
    for b in BUILDS:
        for r in (r for r in rows[b] if r["round"] == rnd):
            print(f"| {b}, round {rnd} | {r['load']} | {r['events/s']:,.0f} | {r['p50']} | {r['p99']} | {r['errors']} "
                  f"| {r['gw']:.3f} | {r['pg']:.3f} | {r['floor']:,.0f} | {r['x']:.2f} |")  # fmt: skip
med = {b: {k: statistics.median(r[k] for r in rows[b]) for k in KEYS} for b in BUILDS if rows[b]}
print()
for k in KEYS:
    m = {b: round(med[b][k], 3) for b in med}
    print(k, m, "http4/base %.2f" % (m["http4"] / m["base"]), "http4/prev8 %.2f" % (m["http4"] / m["prev8"]))
gw = {b: {r["round"]: r["gw"] for r in rows[b]} for b in BUILDS}
for other in ("base", "prev8"):
    print(f"gateway CPU per round, http4/{other}", [round(gw["http4"][i] / gw[other][i], 2) for i in sorted(gw["http4"])
                                                   if i in gw[other]])  # fmt: skip
