"""Per profiled run: events/s, and ms of sampled CPU per 1,000 events of a few frames (self or inclusive)."""

import json
import re
import sys
from pathlib import Path

FRAMES = {
    "_do_execute self": ("self", "Connection._do_execute "),
    "write_rows incl": ("incl", "write_rows "),
    "valid_data incl": ("incl", "_Planner.valid_data "),
    "judge incl": ("incl", "judge "),
    "plan_batch incl": ("incl", "plan_batch "),
    "total": ("all", ""),
}
for n in sys.argv[1:]:
    r = json.loads(Path(f"{n}.json").read_text())["results"][0]
    found = re.search(r"Samples: (\d+) Errors: (\d+)", Path(f"{n}.raw.log").read_text())
    assert found is not None
    events = r["events_per_s"] * (int(found[1]) + int(found[2])) / 200
    out = dict.fromkeys(FRAMES, 0)
    for line in Path(f"{n}.raw").read_text().splitlines():
        stack, _, k = line.rstrip().rpartition(" ")
        frames = [re.sub(r" \(.*", " ", f) for f in stack.split(";")]
        for key, (kind, name) in FRAMES.items():
            if kind == "all" or (kind == "self" and frames[-1] == name) or (kind == "incl" and name in frames):
                out[key] += int(k)
    figures = {k: round(v * 5 / events * 1000, 1) for k, v in out.items()}
    print(n, f"events/s {r['events_per_s']:.0f}", figures)
