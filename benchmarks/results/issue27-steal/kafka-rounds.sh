#!/bin/bash
# rounds.sh <prefix> <n> <root|ENV=..|root>:<tag>...
prefix=$1; n=$2; shift 2
for r in $(seq 1 $n); do
  for spec in "$@"; do
    root=${spec%%:*}; tag=${spec#*:}
    envs=""; if [[ $root == *"|"* ]]; then envs=${root#*|}; root=${root%%|*}; fi
    EXTRA_ENV="$envs" flock /tmp/nexus-quiet.lock /tmp/k5/run.sh $root $prefix-$tag-r$r > /dev/null
    echo "$prefix-$tag-r$r $(grep SUMMARY /tmp/k5/$prefix-$tag-r$r.log) | $(head -1 /tmp/k5/$prefix-$tag-r$r.log | cut -c1-40)" >> /tmp/k5/$prefix.summary
  done
done
echo done >> /tmp/k5/$prefix.summary
