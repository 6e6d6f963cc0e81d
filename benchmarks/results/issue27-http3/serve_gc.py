"""gateway-cmd for the GC measurement: `nexus serve` with gc.callbacks timing the collector (thread CPU),
written to $STATS_OUT at exit; GC_OLD=1 puts back the threshold of 700."""

import atexit
import gc
import os
import sys
import time
from pathlib import Path
from typing import Any

import nexus.app as app
from nexus_cli import main

if os.environ.get("GC_OLD"):
    app.GC_YOUNG_THRESHOLD = 700
acc = {"t": 0.0, "n": 0, "s": 0.0}


def on_collect(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        acc["s"] = time.thread_time()
    else:
        acc["t"] += time.thread_time() - acc["s"]
        acc["n"] += 1


def dump() -> None:
    line = f"gc collections {acc['n']:.0f} cpu {acc['t']:.3f} s; process cpu {time.process_time():.2f} s\n"
    Path(os.environ["STATS_OUT"]).write_text(line)


gc.callbacks.append(on_collect)
atexit.register(dump)
sys.argv = ["nexus", "serve", "--no-dispatcher"]
main()
