#!/bin/bash
# FILE:EVENTS for a profiled run name: events/s times the sampled seconds ((samples + errors) / 200)
n=$1
python3 - "$n" <<'PY'
import json,re,sys
n=sys.argv[1]
r=json.load(open(f'/tmp/cpu18prof/{n}.json'))['results'][0]
log=open(f'/tmp/cpu18prof/{n}.raw.log').read()
s,e=map(int,re.search(r'Samples: (\d+) Errors: (\d+)',log).groups())
print(f'/tmp/cpu18prof/{n}.raw:{r["events_per_s"]*(s+e)/200:.0f}')
PY
