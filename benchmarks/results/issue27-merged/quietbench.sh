#!/usr/bin/env bash
# Interleaved base/new, HTTP (wrk 64) and Kafka (16 partitions, 2 consumers), 3 rounds.
set -u
PY=/work/main/.venv/bin/python
OUT=/tmp/quiet; mkdir -p $OUT
cd /work/wt/new
for r in 1 2 3; do
  for b in base new; do
    echo "== round $r http $b $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    PYTHONPATH=/work/wt/new/src $PY -m nexus_cli bench --suite wrk --connections 64 --duration 15 --warmup 3 \
      --port $((18100 + r)) --json $OUT/http-$b-$r.json --plot '' \
      --gateway-cmd "env PYTHONPATH=/work/wt/$b/src $PY -m nexus_cli serve --no-dispatcher" 2>&1 | tail -4
  done
  for b in base new; do
    echo "== round $r kafka $b $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    PYTHONPATH=/work/wt/new/src $PY -m nexus_cli bench --suite kafka --plans 500 --concurrency 16 --kafka-consumers 2 \
      --kafka-poll 500 --kafka-consumer-cmd "env PYTHONPATH=/work/wt/$b/src $PY" --json $OUT/kafka-$b-$r.json --plot '' 2>&1 | tail -4
  done
done
echo done $(date +%T)
