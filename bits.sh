#!/bin/bash
# same bits across block orders and aligned / unaligned (fused, shifted) layouts: the GPU test's {2,333,6,2,64,100}
cd /tmp/tce
for layout in 0 1 2; do for order in 0 1 2; do
  echo "layout=$layout order=$order $(nice -n 19 ./bin/fast 64 333 2 6 2 100 $layout $order 1 900 2>&1 | grep -E 'bits-hash|RESULT' | tr '\n' ' ')"
done; done
