#!/bin/bash
# One bench run of a tree, as the rounds of RESULTS.md's "Fourth pass (wip/http4)" ran them, under the quiet
# lock: $1 = tree (a worktree name under /work/wt, or a directory holding src/), $2 = tag. The harness is
# $HARNESS/src (default: this worktree; rounds.sh uses a copy of the committed src, so edits change nothing).
# Prints the 1-minute load average at the start of the run into /tmp/h4/<tag>.load.
tree=$1; tag=$2
src=$( [ -d "$tree" ] && echo "$tree" || echo "/work/wt/$tree" )/src
HARNESS=${HARNESS:-/work/wt/http4}
mkdir -p /tmp/h4
cd "$HARNESS" && flock /tmp/nexus-quiet.lock bash -c '
  cut -d" " -f1 /proc/loadavg > "/tmp/h4/$1.load"
  PYTHONPATH=$PWD/src /work/main/.venv/bin/python -m nexus_cli bench --suite wrk --connections 64 \
    --duration 15 --warmup 3 --port 18741 --plot "" --json "/tmp/h4/$1.json" \
    --gateway-cmd "env PYTHONPATH=$2 /work/main/.venv/bin/python -m nexus_cli serve --no-dispatcher" \
    > "/tmp/h4/$1.log" 2>&1' _ "$tag" "$src"
