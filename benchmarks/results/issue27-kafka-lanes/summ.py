"""Summarise kafka bench JSONs: python summ.py PREFIX tag1 tag2 ... (files PREFIX-tag-rN.json)."""
import glob, json, statistics, sys
prefix, tags = sys.argv[1], sys.argv[2:]
def row(path):
    d = json.load(open(path)); r = d["results"][0]; c = r["cpu_s_per_1000"]
    return dict(load=d["meta"]["load_avg_before"][0], evs=r["events_per_s"], p50=r["p50_ms"], p99=r["p99_ms"],
                sub99=r["submit_p99_ms"], gw=c["gateway"], pg=c["postgres"], split=r.get("split", {}))
for tag in tags:
    rows = [row(p) for p in sorted(glob.glob(f"{prefix}-{tag}-r*.json"))]
    if not rows: continue
    print(f"## {tag} ({len(rows)} runs)")
    for k in ("load", "evs", "p50", "p99", "sub99", "gw", "pg"):
        vals = [r[k] for r in rows]
        print(f"  {k:6} {' / '.join(f'{v:,.3f}' if k in ('gw','pg') else f'{v:,.0f}' if k!='load' else f'{v:.1f}' for v in vals)}  median {statistics.median(vals):,.3f}")
    for part in ("all", "slowest_5pct"):
        keys = [k for k in rows[0]["split"].get(part, {})]
        if keys:
            med = {k: statistics.median(r["split"][part][k] for r in rows) for k in keys}
            print(f"  split {part}: " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()))
