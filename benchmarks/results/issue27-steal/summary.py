"""Tables for RESULTS.md ("Issue 27, where it stands, with the host's steal"): summary.py <this directory>.

Kafka runs are S<set>-<build>-r<round>.json (kafka-ab.sh / kafka-rounds.sh), HTTP runs r<round>-<build>.json
(http-rounds.sh). Sets S1 and S2 ran before the bench recorded steal."""

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(sys.argv[1])


def kafka() -> None:
    runs = defaultdict(list)
    for path in sorted(ROOT.glob("S*-*-r*.json")):
        group, build, rnd = path.stem.split("-")
        doc = json.loads(path.read_text())
        r = doc["results"][0]
        steal = doc["meta"].get("cpu_percent", {}).get("steal")
        cpu = r["cpu_s_per_1000"]
        runs[build].append((group, rnd, r["events_per_s"], r["p99_ms"], cpu["gateway"], cpu["postgres"], steal))
    print(
        "| build | runs | events/s (each: set/round, steal %) | median events/s | median p99 ms | p99 < 250 ms "
        "| median gateway CPU s/1k | median PostgreSQL CPU s/1k "
        "| runs at steal <= 5 %: events/s, p99 ms, gateway CPU |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---|")
    for build, rows in runs.items():
        each = ", ".join(f"{g}/{r[1:]} {e:,.0f}" + (f" ({s} %)" if s is not None else "") for g, r, e, *_, s in rows)
        print(
            f"| {build} | {len(rows)} | {each} | {statistics.median(x[2] for x in rows):,.0f} "
            f"| {statistics.median(x[3] for x in rows):,.0f} | {sum(x[3] < 250 for x in rows)}/{len(rows)} "
            f"| {statistics.median(x[4] for x in rows):.3f} | {statistics.median(x[5] for x in rows):.3f} "
            f"| {low(rows)} |"
        )


def low(rows: list) -> str:
    """Medians of the runs whose host stole at most 5 % of the machine's CPU time."""
    quiet = [x for x in rows if x[6] is not None and x[6] <= 5]
    if not quiet:
        return "(no steal recorded)"
    return (
        f"{len(quiet)} runs: {statistics.median(x[2] for x in quiet):,.0f}, "
        f"{statistics.median(x[3] for x in quiet):,.0f} "
        f"({sum(x[3] < 250 for x in quiet)}/{len(quiet)} < 250), {statistics.median(x[4] for x in quiet):.3f}"
    )


def http() -> None:
    runs = defaultdict(list)
    for path in sorted(ROOT.glob("r*-*.json")):
        rnd, build = path.stem.split("-", 1)
        doc = json.loads(path.read_text())
        r = doc["results"][0]
        steal = doc["meta"].get("cpu_percent", {}).get("steal")
        cpu = r["cpu_s_per_1k_events"]
        runs[build].append(
            (rnd, r["events_per_s"], r["p99_ms"], cpu["gateway"], cpu["postgres"], r["ratio_to_floor"], steal)
        )
    print(
        "| build | gateway CPU s/1k (each round, steal %) | median | events/s median | p99 ms median "
        "| x pgbench floor median |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for build, rows in runs.items():
        each = ", ".join(f"{x[3]:.3f} ({x[6]} %)" for x in rows)
        print(
            f"| {build} | {each} | {statistics.median(x[3] for x in rows):.3f} "
            f"| {statistics.median(x[1] for x in rows):,.0f} | {statistics.median(x[2] for x in rows):.0f} "
            f"| {statistics.median(x[5] for x in rows):.2f} |"
        )


kafka()
print()
http()
