#!/bin/bash
# wrapper: gateway, then py-spy on it for $3 s once it answers; $1 = tree, $2 = output
tree=$1; out=$2; secs=${3:-18}
env PYTHONPATH=$tree/src /work/main/.venv/bin/python -m nexus_cli serve --no-dispatcher &
pid=$!
trap 'kill $pid; wait $pid; exit 0' TERM INT
for i in $(seq 1 600); do curl -sf http://127.0.0.1:$NEXUS_HTTP_PORT/healthz >/dev/null && break; sleep 0.2; done
/work/main/.venv/bin/py-spy record --pid $pid --duration $secs -r 100 --nonblocking --format raw -o "$out" >/dev/null 2>&1 &
wait $pid
