"""Two builds under `nexus bench --suite wrk`, interleaved: base, this tree, base, this tree... (the same command,
each run on a fresh embedded PostgreSQL), then the medians and this tree's ratios to the base of events/s, the
gateway's CPU and PostgreSQL's CPU per 1,000 events.

The base is another checkout with its own venv (e.g. a detached worktree of the base commit); this tree runs with
main's venv and its own `src` first on the path. Each run's JSON goes to `--out` (base1.json, tree1.json, ...).

    python benchmarks/wrk_interleaved.py --base /work/wt/base --rounds 3 --out benchmarks/results/round14-perf
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

TREE = Path(__file__).resolve().parents[1]
FIGURES = ("events_per_s", "gateway", "postgres")


def run(name: str, cwd: Path, nexus: Path, env: dict[str, str], args: argparse.Namespace) -> dict[str, float]:
    """One wrk run of one build; its figures."""
    out = args.out / f"{name}.json"
    command = [str(nexus), "bench", "--suite", "wrk", "--connections", str(args.connections), "--duration",
               str(args.duration), "--warmup", str(args.warmup), "--json", str(out), "--plot", ""]  # fmt: skip
    for attempt in (1, 2):  # a run that measured nothing (its gateway did not come up on a loaded machine) once more
        subprocess.run(command, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
        results = json.loads(out.read_text())["results"]
        if results or attempt == 2:
            break
        print(f"{name}: no result; running it again", flush=True)
    row = results[0]
    cpu = row["cpu_s_per_1k_events"]
    return {"events_per_s": row["events_per_s"], "gateway": cpu["gateway"], "postgres": cpu["postgres"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the base checkout (with its own .venv)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--out", type=Path, default=TREE / "benchmarks" / "results" / "wrk-interleaved")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    base_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    tree_env = {**os.environ, "PYTHONPATH": str(TREE / "src")}
    runs: dict[str, list[dict[str, float]]] = {"base": [], "tree": []}
    for i in range(1, args.rounds + 1):
        runs["base"].append(run(f"base{i}", args.base, args.base / ".venv" / "bin" / "nexus", base_env, args))
        runs["tree"].append(run(f"tree{i}", TREE, Path(sys.executable).parent / "nexus", tree_env, args))
        print(f"round {i}: base {runs['base'][-1]}, tree {runs['tree'][-1]}", flush=True)
    medians = {b: {f: statistics.median(r[f] for r in rs) for f in FIGURES} for b, rs in runs.items()}
    ratios = {f: round(medians["tree"][f] / medians["base"][f], 3) for f in FIGURES}
    summary = {"medians": medians, "tree_over_base": ratios, "runs": runs, "load_avg": os.getloadavg()}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({"medians": medians, "tree_over_base": ratios}, indent=2))


if __name__ == "__main__":
    main()
