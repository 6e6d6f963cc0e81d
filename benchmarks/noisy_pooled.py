"""Tenant C's latencies pooled over several noisy-neighbour runs (`noisy_neighbour.py --json`), per build.

One run's phase holds about 450 of C's requests: its p99 is its fifth slowest request, and two runs of one build
differ by 1.5x. Pooled over runs, a phase's p99 rests on tens of requests. Per build (a label and its JSON files)
and phase: C's requests, p50 and p99 over every run's requests together, the p99 against the pooled baseline of the
same runs, and a 90 % interval of that ratio (bootstrap: the runs' requests drawn again with replacement, 2,000
times).

Usage: ``.venv/bin/python benchmarks/noisy_pooled.py main='results/x/main-*.json' tree='results/x/tree-*.json'``
(runs written before the rows carried `latencies_ms` are skipped, and said so).
"""

from __future__ import annotations

import argparse
import glob
import json
import random
import statistics
import sys
from collections import defaultdict

RESAMPLES = 2000


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def pooled(files: list[str]) -> dict[str, list[float]]:
    phases: dict[str, list[float]] = defaultdict(list)
    for name in files:
        rows = json.load(open(name))["rows"]  # noqa: SIM115 - read whole at once
        if any("latencies_ms" not in row for row in rows):
            print(f"{name}: no latencies_ms, skipped", file=sys.stderr)
            continue
        for row in rows:
            phases[row["phase"]].extend(row["latencies_ms"])
    return phases


def interval(phase: list[float], baseline: list[float], rng: random.Random) -> tuple[float, float]:
    ratios = sorted(
        p99(rng.choices(phase, k=len(phase))) / p99(rng.choices(baseline, k=len(baseline))) for _ in range(RESAMPLES)
    )
    return ratios[int(0.05 * RESAMPLES)], ratios[int(0.95 * RESAMPLES) - 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("builds", nargs="+", help="LABEL=GLOB: a build's JSON files")
    args = parser.parse_args()
    rng = random.Random(7)
    print("| build | runs | phase | C requests | p50 ms | p99 ms | p99 vs baseline (90 % interval) |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for spec in args.builds:
        label, pattern = spec.split("=", 1)
        files = sorted(glob.glob(pattern))
        phases = pooled(files)
        baseline = phases.get("baseline")
        if not baseline:
            print(f"{label}: no runs with latencies", file=sys.stderr)
            continue
        for phase, values in phases.items():
            ratio = p99(values) / p99(baseline)
            low, high = interval(values, baseline, rng) if phase != "baseline" else (1.0, 1.0)
            print(f"| {label} | {len(files)} | {phase} | {len(values):,} | {statistics.median(values):.1f} | "
                  f"{p99(values):.1f} | {ratio:.2f}x ({low:.2f}-{high:.2f}) |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
