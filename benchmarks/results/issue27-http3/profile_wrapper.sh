#!/bin/bash
# gateway-cmd wrapper for a profile: the gateway, then py-spy on it for 14 s once it answers (plus 4 s);
# $1 = worktree name, $2 = output (raw), $3 = --native for the C side (blocking), else --nonblocking.
# gateway-cmd wrapper: serve + py-spy. usage: prof.sh <tree> <out> [native]
tree=$1; out=$2; native=$3
export PYTHONPATH=/work/wt/$tree/src
/work/main/.venv/bin/python -m nexus_cli serve --no-dispatcher &
pid=$!
trap 'kill $pid; wait $pid; exit 0' TERM INT
until curl -s -o /dev/null http://127.0.0.1:$NEXUS_HTTP_PORT/healthz; do sleep 0.2; done
sleep 4
/work/main/.venv/bin/py-spy record -r 100 ${native:---nonblocking} -d 14 --format raw -o $out --pid $pid >/tmp/h3/pyspy.log 2>&1 &
wait $pid
