"""Tables for RESULTS.md ("Issue 27 on a faster machine"): summary.py <this directory>.

Kafka runs are K<set>-<build>-r<round>.json (kafka-ab.sh, order rotated each round), HTTP runs
H<round>-<build>.json (http-rounds.sh; each run by ../issue27-steal/http-run.sh, the Kafka ones by its
kafka-run.sh and kafka-ab.sh). K1: 50,000 events (--plans 2500); K2-K5: 100,000 (--plans 5000); K4 and K5
with the consumers on uvloop."""

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(sys.argv[1])


def median(values: list[float]) -> float:
    return statistics.median(values)


def kafka() -> None:
    runs: dict[tuple[str, str], list[tuple[str, float, float, float, float, float]]] = defaultdict(list)
    for path in sorted(ROOT.glob("K*-*-r*.json")):
        group, build, rnd = path.stem.split("-")
        doc = json.loads(path.read_text())
        r = doc["results"][0]
        cpu = r["cpu_s_per_1000"]
        busy = doc["meta"]["cpu_percent"]["busy"]
        runs[(group, build)].append((rnd, r["events_per_s"], r["p99_ms"], cpu["gateway"], cpu["postgres"], busy))
    print(
        "| set | build | events/s (each round) | median events/s | vs base | p99 ms (each) "
        "| gateway CPU s/1k (median) | PostgreSQL CPU s/1k (median) | machine busy % (median) |"
    )
    print("|---|---|---|---:|---:|---|---:|---:|---:|")
    for (group, build), rows in sorted(runs.items()):
        base = runs.get((group, "base"))
        ratio = f"{median([x[1] for x in rows]) / median([x[1] for x in base]):.2f}x" if base else ""
        print(
            f"| {group} | {build} | {', '.join(f'{x[1]:,.0f}' for x in rows)} | {median([x[1] for x in rows]):,.0f} "
            f"| {ratio} | {', '.join(f'{x[2]:,.0f}' for x in rows)} | {median([x[3] for x in rows]):.3f} "
            f"| {median([x[4] for x in rows]):.3f} | {median([x[5] for x in rows]):.1f} |"
        )


def http() -> None:
    runs: dict[str, list[tuple[float, float, float, float, float]]] = defaultdict(list)
    for path in sorted(ROOT.glob("H*-*.json")):
        _, build = path.stem.split("-", 1)
        r = json.loads(path.read_text())["results"][0]
        cpu = r["cpu_s_per_1k_events"]
        runs[build].append((cpu["gateway"], cpu["postgres"], r["events_per_s"], r["p99_ms"], r["ratio_to_floor"]))
    print(
        "| build | gateway CPU s/1k (each round) | median | PostgreSQL CPU s/1k | events/s | p99 ms | x pgbench floor |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for build, rows in runs.items():
        cols = [median([x[i] for x in rows]) for i in range(5)]
        print(
            f"| {build} | {', '.join(f'{x[0]:.3f}' for x in rows)} | {cols[0]:.3f} | {cols[1]:.3f} | {cols[2]:,.0f} "
            f"| {cols[3]:.0f} | {cols[4]:.2f} |"
        )


kafka()
print()
http()
