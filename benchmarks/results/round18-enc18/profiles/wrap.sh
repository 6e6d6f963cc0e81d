#!/bin/bash
# gateway-cmd wrapper: the gateway of build $1 (base | a tree path), py-spy on it for 12 s after 2.5 s; $2 = output (raw)
build=$1; out=$2
if [ "$build" = base ]; then
  unset PYTHONPATH; py=/work/wt/base/.venv/bin/python
else
  export PYTHONPATH=$build/src; py=/work/main/.venv/bin/python
fi
$py -m nexus_cli serve --no-dispatcher &
pid=$!
trap 'kill $pid; wait $pid; exit 0' TERM INT
until curl -s -o /dev/null http://127.0.0.1:$NEXUS_HTTP_PORT/healthz; do sleep 0.2; done
(sleep 2.5; /work/main/.venv/bin/py-spy record -r 200 --nonblocking -d 12 --format raw -o $out --pid $pid >$out.log 2>&1) &
wait $pid
