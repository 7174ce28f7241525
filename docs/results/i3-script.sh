#!/usr/bin/env bash
# i3: the side-by-side of the final code, forward (both precisions) and backward, PyTorch in the same command,
# with o5's tuning cache (o5-o6 tuned the forward's and grad_input's kernels for these kernels).
set -u
source .gpu/gpu-env.sh
cp .gpu/tune_o5.json /tmp/tune_i3.json; chmod u+w /tmp/tune_i3.json
bash scripts/gpu_bench.sh bench $OUT/i3 .gpu/convt_i3 /tmp/tune_i3.json
