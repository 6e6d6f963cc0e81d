#!/bin/bash
cd /tmp/enc18/prof
for i in 1 2; do for b in base /tmp/enc18/snap1; do
  n=$([ $b = base ] && echo base || echo tree)$i
  echo "$n $(date -u +%H:%M:%S) $(uptime | sed 's/.*load/load/')"
  /work/main/.venv/bin/nexus bench --suite wrk --connections 64 --duration 15 --warmup 2 --gateway-cmd "/tmp/enc18/prof/wrap.sh $b /tmp/enc18/prof/$n.raw" --json /tmp/enc18/prof/$n.json --plot '' >/dev/null 2>/tmp/enc18/prof/$n.err
done; done
echo "end $(date -u +%H:%M:%S) $(uptime | sed 's/.*load/load/')"
