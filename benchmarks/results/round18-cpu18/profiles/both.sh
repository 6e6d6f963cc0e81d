#!/bin/bash
# under the bench lock: two profiled pairs (base, snapshot), then the interleaved rounds of the snapshot against the base
cd /tmp/cpu18prof
/tmp/cpu18prof/run.sh /tmp/cpu18-snap1 tree
uptime
cd /tmp/cpu18-snap1 && PATH=/work/main/.venv/bin:$PATH /work/main/.venv/bin/python benchmarks/wrk_interleaved.py --base /work/wt/base --rounds 4 --out /tmp/cpu18prof/interleaved-1
uptime
