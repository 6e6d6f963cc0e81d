#!/bin/bash
# run.sh <tree holding src/> <tag>: one wrk bench run of the tree's `nexus serve --no-dispatcher` (harness: /tmp/k5/harness)
src=$1/src; tag=$2
cd /tmp/k5/harness && flock /tmp/nexus-quiet.lock bash -c '
  cut -d" " -f1 /proc/loadavg > "/tmp/h5/$1.load"
  PYTHONPATH=$PWD/src /work/main/.venv/bin/python -m nexus_cli bench --suite wrk --connections 64 \
    --duration 15 --warmup 3 --port 18751 --plot "" --json "/tmp/h5/$1.json" \
    --gateway-cmd "env PYTHONPATH=$2 /work/main/.venv/bin/python -m nexus_cli serve --no-dispatcher" \
    > "/tmp/h5/$1.log" 2>&1' _ "$tag" "$src"
