#!/bin/bash
# Item 1's go/no-go: benchmarks/decision_fold.py (plan_batch, 16 envelopes a batch, 500 orders x 5 steps) on
# the sources as they are and on a copy whose pure hot modules mypyc compiled, interleaved, under the quiet
# lock. Compiled: core/decide/*.py, order_state, process_checks, list_limits, audit_chain, checks
# (process_model and envelope are pydantic models: mypyc refuses them). Output: fold_mypyc.txt.
set -e
tree=${1:-/work/wt/http4}
rm -rf /tmp/h4build && mkdir /tmp/h4build && cp -r "$tree/src" /tmp/h4build/
(cd /tmp/h4build/src && PYTHONPATH=$PWD /work/main/.venv/bin/mypyc nexus/core/decide/*.py nexus/core/order_state.py \
  nexus/core/process_checks.py nexus/core/list_limits.py nexus/core/audit_chain.py nexus/core/checks.py >/tmp/h4build/log 2>&1)
flock /tmp/nexus-quiet.lock bash -c "cd $tree; for i in 1 2 3 4; do
  echo \"load \$(cut -d' ' -f1 /proc/loadavg)\"
  echo -n 'compiled '; PYTHONPATH=/tmp/h4build/src /work/main/.venv/bin/python benchmarks/decision_fold.py --orders 500 --rounds 5
  echo -n 'source   '; PYTHONPATH=$tree/src /work/main/.venv/bin/python benchmarks/decision_fold.py --orders 500 --rounds 5
done"
