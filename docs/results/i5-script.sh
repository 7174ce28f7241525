#!/usr/bin/env bash
# i5: grad_weight's rows kernel (shaders/grad_weight_rows.wgsl) against the per-tap GEMM: the backward of the
# cases it takes (kb75, kb81) and two it does not (dcgan, up2x: controls), i3's binary and this one alternating,
# two rounds; then verify --backward on all nine with this one.
set -u
source .gpu/gpu-env.sh
cp .gpu/tune_o5.json /tmp/tune_i5.json; chmod u+w /tmp/tune_i5.json
export CONVT_TUNE_CACHE=/tmp/tune_i5.json
for round in 1 2; do
  for b in convt_i3 convt_i5; do
    echo "## round $round, $b"
    .gpu/$b bench --backward --runs 20 --case kb75 kb81 dcgan up2x 2>&1 | tail -n +4 | cut -c1-80
  done
done
.gpu/convt_i5 verify --backward --case kb75 kb81 2>&1 | cut -c1-200
