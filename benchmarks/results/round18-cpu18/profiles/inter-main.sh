#!/bin/bash
# under the bench lock: interleaved rounds of snapshot $1 against main 513594d (a snapshot in /tmp/cpu18-main, main's venv), into $2
uptime
cd $1 && PATH=/work/main/.venv/bin:$PATH /work/main/.venv/bin/python benchmarks/wrk_interleaved.py --base /tmp/cpu18-main --rounds 4 --out $2
uptime
