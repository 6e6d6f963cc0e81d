"""Summarise Kafka bench JSONs: python summ.py PREFIX tag1 tag2 ... (files PREFIX-tag-rN.json)."""

import glob
import json
import statistics
import sys

KEYS = ("load", "evs", "p50", "p99", "sub99", "gw", "pg")


def row(path: str) -> dict:
    with open(path) as f:
        d = json.load(f)
    r = d["results"][0]
    c = r["cpu_s_per_1000"]
    return {
        "load": d["meta"]["load_avg_before"][0],
        "evs": r["events_per_s"],
        "p50": r["p50_ms"],
        "p99": r["p99_ms"],
        "sub99": r["submit_p99_ms"],
        "gw": c["gateway"],
        "pg": c["postgres"],
        "split": r.get("split", {}),
    }


def shown(key: str, value: float) -> str:
    if key in ("gw", "pg"):
        return f"{value:,.3f}"
    return f"{value:.1f}" if key == "load" else f"{value:,.0f}"


def main(prefix: str, tags: list[str]) -> None:
    for tag in tags:
        rows = [row(p) for p in sorted(glob.glob(f"{prefix}-{tag}-r*.json"))]
        if not rows:
            continue
        print(f"## {tag} ({len(rows)} runs)")
        for k in KEYS:
            vals = [r[k] for r in rows]
            print(f"  {k:6} {' / '.join(shown(k, v) for v in vals)}  median {statistics.median(vals):,.3f}")
        for part in ("all", "slowest_5pct"):
            keys = list(rows[0]["split"].get(part, {}))
            if keys:
                med = {k: statistics.median(r["split"][part][k] for r in rows) for k in keys}
                print(f"  split {part}: " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
