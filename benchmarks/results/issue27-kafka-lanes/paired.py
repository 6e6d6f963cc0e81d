"""Pair each base run with the run of this branch of the same round and number: python paired.py DIR."""

import json
import re
import statistics
import sys
from pathlib import Path

PAIRS = [("F", "k4l1"), ("G", "k4b"), ("H", "k4c"), ("J", "k4c")]


def load(path: Path) -> dict:
    with path.open() as f:
        return json.load(f)


def main(folder: Path) -> None:
    ev, p99, gw, pg, rows = [], [], [], [], []
    for rnd, tag in PAIRS:
        for base_path in sorted(folder.glob(f"{rnd}-base-r*.json")):
            n = re.search(r"-r(\d+)\.json", base_path.name).group(1)
            new_path = folder / f"{rnd}-{tag}-r{n}.json"
            if not new_path.exists():
                continue
            new, base = load(new_path), load(base_path)
            x, y = new["results"][0], base["results"][0]
            load_avg = new["meta"]["load_avg_before"][0]
            ev.append(x["events_per_s"] / y["events_per_s"])
            p99.append(x["p99_ms"])
            gw.append(x["cpu_s_per_1000"]["gateway"] / y["cpu_s_per_1000"]["gateway"])
            pg.append(x["cpu_s_per_1000"]["postgres"] / y["cpu_s_per_1000"]["postgres"])
            rows.append(
                f"{rnd}{n} load {load_avg:4.1f} ev/s {y['events_per_s']:6.0f} -> {x['events_per_s']:6.0f} "
                f"({ev[-1]:.2f}x)  p99 {y['p99_ms']:6.0f} -> {x['p99_ms']:5.0f}  "
                f"gw {y['cpu_s_per_1000']['gateway']:.3f} -> {x['cpu_s_per_1000']['gateway']:.3f}"
            )
    print("\n".join(rows))
    print(
        f"pairs {len(ev)}: events/s ratio median {statistics.median(ev):.2f} "
        f"(geo mean {statistics.geometric_mean(ev):.2f}); p99 median {statistics.median(p99):.0f} ms, "
        f"under 250 in {sum(p < 250 for p in p99)}; gw ratio median {statistics.median(gw):.2f}; "
        f"pg ratio median {statistics.median(pg):.2f}"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
