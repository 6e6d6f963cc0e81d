#!/bin/bash
# usage: run.sh <src-root> <tag> [extra bench args]   (harness: /tmp/k5/harness)
root=$1; tag=$2; shift 2
cd /tmp/k5/harness
echo "load before: $(cat /proc/loadavg) root=$root env=$EXTRA_ENV" > /tmp/k5/$tag.log
PYTHONPATH=/tmp/k5/harness/src timeout 400 /work/main/.venv/bin/python -m nexus_cli bench --suite kafka --plans ${PLANS:-2500} --concurrency 16 --kafka-consumers 2 --kafka-poll ${POLL:-500} --plot '' --json /tmp/k5/$tag.json --kafka-consumer-cmd "env PYTHONPATH=$root/src $EXTRA_ENV /work/main/.venv/bin/python" "$@" >> /tmp/k5/$tag.log 2>&1
echo "rc=$? load after: $(cat /proc/loadavg)" >> /tmp/k5/$tag.log
/work/main/.venv/bin/python - /tmp/k5/$tag.json <<'PY' >> /tmp/k5/$tag.log
import json,sys
d=json.load(open(sys.argv[1]))
def walk(o):
    if isinstance(o,dict):
        if "cpu_s_per_1000" in o: yield o
        for v in o.values(): yield from walk(v)
    elif isinstance(o,list):
        for v in o: yield from walk(v)
for r in walk(d):
    c=r["cpu_s_per_1000"]
    print(f"SUMMARY ev/s {r['events_per_s']:7.0f} p50 {r['p50_ms']:8.0f} p99 {r['p99_ms']:8.0f} sub50 {r['submit_p50_ms']:6.0f} sub99 {r['submit_p99_ms']:6.0f} gw {c['gateway']:.3f} pg {c['postgres']:.3f}")
    for k,v in (r.get("split") or {}).items(): print("SPLIT", k, json.dumps(v))
PY
grep SUMMARY /tmp/k5/$tag.log
