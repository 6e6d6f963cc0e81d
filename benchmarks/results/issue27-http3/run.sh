#!/bin/bash
# One bench run of a tree, as the rounds of RESULTS.md's "Third pass (wip/http3)" ran them:
# $1 = tree (a worktree name under /work/wt, or a path holding src/), $2 = tag, then env assignments for
# the gateway (e.g. NEXUS_BATCH_WORKERS=1). The bench's harness is this branch's in every run.
# Rounds: for i in 1..5: run.sh base fin-base-$i; run.sh http3 fin-new-$i
tree=$1; tag=$2; shift 2
src=$( [ -d "$tree" ] && echo "$tree" || echo "/work/wt/$tree" )/src
cd /work/wt/http3 && PYTHONPATH=$PWD/src /work/main/.venv/bin/python -m nexus_cli bench --suite wrk --connections 64 \
  --duration 15 --warmup 3 --port 18731 --plot '' --json "/tmp/h3/$tag.json" \
  --gateway-cmd "env $* PYTHONPATH=$src /work/main/.venv/bin/python -m nexus_cli serve --no-dispatcher" > "/tmp/h3/$tag.log" 2>&1
