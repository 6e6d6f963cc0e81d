#!/bin/bash
for i in 1 2 3 4; do
  case $i in 1|3) order="base main";; *) order="main base";; esac
  for t in $order; do root=/work/wt/base; [ $t = main ] && root=/tmp/k5/main; /tmp/h5/run.sh $root H$i-$t; echo "$(date -u +%T) H$i-$t $(cat /tmp/h5/H$i-$t.load) $(tail -3 /tmp/h5/H$i-$t.log | head -1)" >> /tmp/h5/progress; done
done
echo done >> /tmp/h5/progress
