#!/bin/bash
# ab.sh <prefix> <rounds> spec...   (specs as rounds.sh; the order rotates each round)
prefix=$1; n=$2; shift 2
specs=("$@"); k=${#specs[@]}
for r in $(seq 1 $n); do
  for j in $(seq 0 $((k-1))); do
    spec=${specs[$(( (j + r - 1) % k ))]}
    root=${spec%%:*}; tag=${spec#*:}
    envs=""; if [[ $root == *"|"* ]]; then envs=${root#*|}; root=${root%%|*}; fi
    EXTRA_ENV="$envs" flock /tmp/nexus-quiet.lock /tmp/k5/run.sh $root $prefix-$tag-r$r > /dev/null
    echo "$prefix-$tag-r$r $(grep SUMMARY /tmp/k5/$prefix-$tag-r$r.log) | $(head -1 /tmp/k5/$prefix-$tag-r$r.log | cut -c1-40)" >> /tmp/k5/$prefix.summary
  done
done
echo done >> /tmp/k5/$prefix.summary
