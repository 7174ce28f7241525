#!/usr/bin/env bash
# i2: the split tiles after the hi parts are cut on the bits (i1's lo parts were all 0): errors of every split tile
# on kb69 and of the fast winners' twins elsewhere (verify, 100,000 samples), and times.
set -u
source .gpu/gpu-env.sh
d=$OUT/i2; mkdir -p $d
cp .gpu/tune_o5.json $d/tune.json; chmod u+w $d/tune.json
export CONVT_TUNE_CACHE=$d/tune.json
B=.gpu/convt_i
for c in "kb69 128x128_64x64_rows" "kb69 128x64_64x64_rows" "kb69 128x64_64x32" "kb65 128x64_64x32" "kb57 128x64_64x64" "kb71 128x32_64x32" "kb78 128x32_64x32" "up2x 128x128_64x64_rows" "dcgan 128x64_64x32"; do
  set -- $c
  CONVT_STRATEGY=coopnhwc_${2}_split $B verify --precision compensated --case $1 2>&1 | tail -n +2 | cut -c1-250
  CONVT_STRATEGY=coopnhwc_${2}_split $B bench --precision compensated --case $1 --runs 20 2>&1 | tail -n +4 | cut -c1-200
done | tee $d/split.txt
$B verify --precision compensated 2>&1 | tail -n +2 | cut -c1-250 | tee $d/verify_default.txt
