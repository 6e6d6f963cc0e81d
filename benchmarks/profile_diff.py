"""Two builds' py-spy profiles (`--format raw`: collapsed stacks, one `frame;frame;... count` a line) compared per
function: each function's inclusive and self CPU in ms per 1,000 events, and the difference of the second build
from the first, largest first.

Each side is one or more raw files with the events served while it was sampled (`FILE:EVENTS`, e.g. the run's
events/s times the sampled seconds); a side's figures are the sum of its files' samples over the sum of their
events. The sampling rate converts samples to CPU time (py-spy `--rate`, 200 unless told; with `--nonblocking` the
idle loop's samples are in the file too, under its `select`/`epoll` frames).

    python benchmarks/profile_diff.py --base base1.raw:36000 base2.raw:35000 --tree main1.raw:34000 \
        main2.raw:33000 --rate 200 --top 30 --json diff.json
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

# py-spy names a frame `function (path/to/file.py:LINE)`; the line differs between builds, so it is dropped.
_LINE = re.compile(r":\d+\)$")
_SITE = re.compile(r"(?:site|dist)-packages/")


def frame_name(frame: str) -> str:
    """A frame without its line number, and a library's path from its package on (both builds' venvs differ)."""
    name = _LINE.sub(")", frame.strip())
    match = _SITE.search(name)
    if match is not None:
        head = name[: name.index("(") + 1]
        name = head + name[match.end() :]
    return name.replace("/work/wt/base/src/", "").replace("/work/main/src/", "")


def read_stacks(path: Path) -> collections.Counter[tuple[str, ...]]:
    """The collapsed stacks of one raw file and their sample counts (the thread's own frame dropped)."""
    stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = tuple(frame_name(f) for f in stack.split(";") if not f.startswith(("process ", "thread ")))
        stacks[frames] += int(count)
    return stacks


def per_function(stacks: collections.Counter[tuple[str, ...]]) -> tuple[dict[str, int], dict[str, int]]:
    """Samples per function: inclusive (once per stack it is on, however deep it recurses) and self (leaf)."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    for frames, count in stacks.items():
        for name in set(frames):
            inclusive[name] += count
        if frames:
            own[frames[-1]] += count
    return dict(inclusive), dict(own)


def side(specs: list[str], rate: float) -> dict[str, dict[str, float]]:
    """One build's functions: inclusive and self ms of CPU per 1,000 events, over all its files."""
    stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
    events = 0.0
    for spec in specs:
        path, _, served = spec.rpartition(":")
        stacks.update(read_stacks(Path(path)))
        events += float(served)
    inclusive, own = per_function(stacks)
    scale = 1000.0 / rate * 1000.0 / events  # samples -> ms, per 1,000 events
    return {
        "inclusive": {k: v * scale for k, v in inclusive.items()},
        "self": {k: v * scale for k, v in own.items()},
        "total": {"all": sum(stacks.values()) * scale},
    }


def differences(base: dict[str, float], tree: dict[str, float], top: int) -> list[dict[str, float | str]]:
    """The functions whose ms per 1,000 events differ most (tree minus base), largest first."""
    names = set(base) | set(tree)
    rows = [
        {"function": n, "base": round(base.get(n, 0.0), 2), "tree": round(tree.get(n, 0.0), 2),
         "difference": round(tree.get(n, 0.0) - base.get(n, 0.0), 2)}
        for n in names
    ]  # fmt: skip
    rows.sort(key=lambda r: -abs(float(r["difference"])))
    return rows[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", nargs="+", required=True, help="FILE:EVENTS of the first build")
    parser.add_argument("--tree", nargs="+", required=True, help="FILE:EVENTS of the second build")
    parser.add_argument("--rate", type=float, default=200.0, help="py-spy's samples per second")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--json", type=Path, default=None, help="write the comparison here too")
    args = parser.parse_args()
    base, tree = side(args.base, args.rate), side(args.tree, args.rate)
    report = {
        "total_ms_per_1k": {"base": round(base["total"]["all"], 1), "tree": round(tree["total"]["all"], 1)},
        "self": differences(base["self"], tree["self"], args.top),
        "inclusive": differences(base["inclusive"], tree["inclusive"], args.top),
    }
    for kind in ("self", "inclusive"):
        print(f"\n{kind}: ms of CPU per 1,000 events (base, tree, tree - base)")
        for row in report[kind]:
            print(f"{row['base']:8.2f} {row['tree']:8.2f} {row['difference']:+8.2f}  {row['function']}")
    print(f"\nall samples: base {report['total_ms_per_1k']['base']}, tree {report['total_ms_per_1k']['tree']} ms/1k")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
