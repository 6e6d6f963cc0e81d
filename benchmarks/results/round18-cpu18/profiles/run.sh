#!/bin/bash
# alternating profiled wrk runs: base, main, base, main ($1 = tree path for "tree", default /work/main)
tree=${1:-/work/main}; tag=${2:-main}
cd /work/wt/cpu18
uptime
for i in 1 2; do
  for b in base $tree; do
    n=$([ $b = base ] && echo base || echo $tag)$i
    /work/main/.venv/bin/nexus bench --suite wrk --connections 64 --duration 15 --warmup 2 --gateway-cmd "/tmp/cpu18prof/wrap.sh $b /tmp/cpu18prof/$n.raw" --json /tmp/cpu18prof/$n.json --plot '' >/dev/null 2>/tmp/cpu18prof/$n.err
    python3 -c "import json;r=json.load(open('/tmp/cpu18prof/$n.json'))['results'][0];print('$n',r['events_per_s'],r['total_events'] if 'total_events' in r else '',r['cpu_s_per_1k_events'])"
  done
done
uptime
