#!/usr/bin/env bash
# Repeated calls of a layer (weight prepared once) against the functional call (weight prepared every call), at
# batch 1 and the suite's batch, in one command on one card: bash scripts/layer_bench.sh [CONVT_BINARY]
set -u
cd "$(dirname "$0")/.."
export CONVT_TUNE_CACHE=${CONVT_TUNE_CACHE:-$PWD/docs/results/h100-tune.json}
convt=${1:-target/release/convt}
for round in 1 2; do
  for p in f32 fast; do
    for b in 1 ""; do
      batch=${b:+--batch $b}
      for l in "" --layer; do
        echo "== round $round precision $p batch ${b:-suite} ${l:-functional}"
        "$convt" bench --case dcgan up2x kb57 $batch --precision $p --runs 50 --check-samples 0 $l 2>/dev/null | tail -3
      done
    done
  done
done
