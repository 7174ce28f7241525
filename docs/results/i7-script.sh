#!/usr/bin/env bash
# i7: the final binary (05423c4, after the review's mends: partial sums poisoned when outputs are) on the H100:
# verify --backward on all nine (outputs and partial sums poisoned) and the backward's times of kb75 and kb81.
set -u
source .gpu/gpu-env.sh
cp .gpu/tune_o5.json /tmp/tune_i7.json; chmod u+w /tmp/tune_i7.json
export CONVT_TUNE_CACHE=/tmp/tune_i7.json
.gpu/convt_i7 verify --backward 2>&1 | cut -c1-200
.gpu/convt_i7 bench --backward --runs 20 --case kb75 kb81 dcgan 2>&1 | tail -n +4 | cut -c1-80
