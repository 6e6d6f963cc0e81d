"""gateway-cmd for the GC measurement: `nexus serve` with gc.callbacks timing the collector (thread CPU),
written to $STATS_OUT at exit; GC_OLD=1 puts back the threshold of 700."""
import atexit, gc, os, sys, time
import nexus.app as app
if os.environ.get("GC_OLD"):
    app.GC_YOUNG_THRESHOLD = 700
acc = {"t": 0.0, "n": 0, "s": 0.0}
def cb(phase, info):
    if phase == "start": acc["s"] = time.thread_time()
    else: acc["t"] += time.thread_time() - acc["s"]; acc["n"] += 1
gc.callbacks.append(cb)
def dump():
    with open(os.environ["STATS_OUT"], "w") as f:
        f.write(f"gc collections {acc['n']} cpu {acc['t']:.3f} s; process cpu {time.process_time():.2f} s\n")
atexit.register(dump)
from nexus_cli import main
sys.argv = ["nexus", "serve", "--no-dispatcher"]
main()
