#!/bin/bash
for i in 1 2 3; do
  case $i in 1) order="base main";; 2) order="main base";; 3) order="base main";; esac
  for t in $order; do root=/work/wt/base; [ $t = main ] && root=/tmp/k5/main; /tmp/h5/run.sh $root r$i-$t; echo "$(date -u +%T) r$i-$t $(cat /tmp/h5/r$i-$t.load)" >> /tmp/h5/progress; done
done
echo done >> /tmp/h5/progress
