#!/usr/bin/env bash
# i1: precision `compensated` (split tiles: f16 hi + lo parts, three products) on the H100: every split tile forced
# on kb69 (time and error), the fast winners' twins on the other cases, f32 and fast baselines and PyTorch in the
# same command.
set -u
source .gpu/gpu-env.sh
d=$OUT/i1; mkdir -p $d
cp .gpu/tune_o5.json $d/tune.json; chmod u+w $d/tune.json
export CONVT_TUNE_CACHE=$d/tune.json PYTHONUNBUFFERED=1
B=.gpu/convt_i
run() { echo "## $*"; "$@" 2>&1 | tail -n +4 | cut -c1-220; }
for t in 128x128_64x64_rows 128x128_64x64 128x64_64x64 256x64_64x64 64x128_64x64 128x32_64x32 256x32_64x32 128x64_64x32 128x64_64x64_rows 128x32_64x32_rows; do
  CONVT_STRATEGY=coopnhwc_${t}_split run $B bench --precision compensated --case kb69 --runs 20
done > $d/kb69_tiles.txt
cat $d/kb69_tiles.txt
for c in "kb65 128x64_64x64_rows" "kb65 128x64_64x32" "kb57 128x64_64x64" "kb57 128x64_64x32" "kb71 128x32_64x32" "kb78 128x32_64x32" "up2x 128x128_64x64_rows" "dcgan 128x128_64x64_rows"; do
  set -- $c
  CONVT_STRATEGY=coopnhwc_${2}_split run $B bench --precision compensated --case $1 --runs 20
done > $d/others.txt 2>&1
cat $d/others.txt
run $B bench --precision f32 --case kb69 kb65 --runs 20 | tee $d/f32.txt
run $B bench --precision fast --case kb69 --runs 20 | tee $d/fast.txt
run $B bench --precision compensated --case kb69 --runs 20 | tee $d/comp_default.txt
run $B verify --precision compensated --case kb69 kb65 kb57 kb71 kb78 up2x dcgan kb75 kb81 | tee $d/verify.txt
python3 scripts/torch_bench.py --case kb69 kb65 --runs 20 > $d/torch.txt 2>&1; tail -8 $d/torch.txt
