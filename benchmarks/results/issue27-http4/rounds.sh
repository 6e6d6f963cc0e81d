#!/bin/bash
# Four interleaved rounds of base (b7f4483), prev8 (main at 9fbcda5) and http4, the order rotated each round.
# http4 is a copy of the branch's committed src (git archive HEAD src | tar -x -C /tmp/h4snap), the harness too.
d=$(dirname "$0")
export HARNESS=/tmp/h4snap
for i in 1 2 3 4; do
  case $i in
    1) order="base http4 prev8";; 2) order="http4 prev8 base";; 3) order="prev8 base http4";; 4) order="base prev8 http4";;
  esac
  for tree in $order; do t=$tree; [ "$tree" = http4 ] && t=/tmp/h4snap; "$d/run.sh" "$t" "r$i-$tree"; echo "$(date -u +%T) r$i-$tree done"; done
done
