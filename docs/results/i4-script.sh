#!/usr/bin/env bash
# i4: what the backward's time is made of on the cases behind or near PyTorch (measurement only: a local switch
# leaves grad_input or grad_weight out, results wrong on purpose), o5's tuning cache.
set -u
source .gpu/gpu-env.sh
cp .gpu/tune_o5.json /tmp/tune_i4.json; chmod u+w /tmp/tune_i4.json
export CONVT_TUNE_CACHE=/tmp/tune_i4.json
for round in 1 2; do
  for skip in none grad_input grad_weight; do
    echo "## round $round, without $skip"
    CONVT_I4_SKIP=$skip .gpu/convt_i4 bench --backward --runs 20 --case kb81 kb75 dcgan up2x 2>&1 | tail -n +4 | cut -c1-80
  done
done
