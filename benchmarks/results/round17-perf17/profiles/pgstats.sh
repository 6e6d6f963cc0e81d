#!/bin/bash
# one wrk bench of build $1 (base | a tree path), PostgreSQL's statistics over 8 s of its measured run -> $2
build=$1; out=$2
if [ "$build" = base ]; then cmd="env -u PYTHONPATH /work/wt/base/.venv/bin/nexus"; else cmd="env PYTHONPATH=$build/src /work/main/.venv/bin/nexus"; fi
cd /tmp
$cmd bench --suite wrk --connections 64 --duration 10 --warmup 2 --json $out.bench.json --plot '' >/dev/null 2>$out.err &
bpid=$!
# wait for the measured run: the bench database's backends appear, then the warm-up (2 s) passes
for i in $(seq 1 300); do
  line=$(ps -eo pid,ppid,args | grep -E "postgres: postgres bench_[0-9a-z_]+ \[local\]" | grep -v grep | head -1)
  [ -n "$line" ] && break; sleep 0.2
done
db=$(echo "$line" | awk '{print $5}')
ppid=$(echo "$line" | awk '{print $2}')
sock=$(ps -o args= -p $ppid | grep -oE -- "-D [^ ]+" | awk '{print $2}')
sleep 3.5
/work/main/.venv/bin/python /work/wt/perf17/benchmarks/pg_table_stats.py "$sock" "$db" 8 > $out 2>$out.stats-err
wait $bpid
echo "$build db=$db sock=$sock"
