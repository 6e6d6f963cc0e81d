#!/bin/bash
# under the bench lock: interleaved rounds of snapshot $1 against the base, into $2
uptime
cd $1 && PATH=/work/main/.venv/bin:$PATH /work/main/.venv/bin/python benchmarks/wrk_interleaved.py --base /work/wt/base --rounds 4 --out $2
uptime
