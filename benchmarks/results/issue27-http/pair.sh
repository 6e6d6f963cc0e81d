#!/bin/bash
# one bench run of a tree: $1 = tree name (base|http), $2 = tag, $3 = port
tree=$1; tag=$2; port=$3
cd /work/wt/http
echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) start $tree $tag"
PYTHONPATH=/work/wt/http/src timeout 900 /work/main/.venv/bin/python -m nexus_cli bench --suite wrk --connections 64 --duration 15 --warmup 3 --port $port \
  --json /tmp/httpw/res-$tag-$tree.json --plot '' \
  --gateway-cmd "env PYTHONPATH=/work/wt/$tree/src /work/main/.venv/bin/python -m nexus_cli serve --no-dispatcher" 2>&1 | grep -E "^64 " 
echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) end $tree $tag"
