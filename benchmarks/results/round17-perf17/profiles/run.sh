#!/bin/bash
# alternating profiled wrk runs: base, tree, base, tree
cd /work/wt/perf17
uptime
for i in 1 2; do
  for b in base /work/wt/perf17; do
    n=$([ $b = base ] && echo base || echo tree)$i
    /work/main/.venv/bin/nexus bench --suite wrk --connections 64 --duration 10 --warmup 2 --gateway-cmd "/tmp/perf17prof/wrap.sh $b /tmp/perf17prof/$n.raw" --json /tmp/perf17prof/$n.json --plot '' >/dev/null 2>/tmp/perf17prof/$n.err
    python3 -c "import json;r=json.load(open('/tmp/perf17prof/$n.json'))['results'][0];print('$n',r['events_per_s'],r['cpu_s_per_1k_events'])"
  done
done
uptime
