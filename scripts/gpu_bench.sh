#!/usr/bin/env bash
# The side-by-side benchmark of docs/PERFORMANCE.md on a GPU machine: tunes every suite case (exact f32; precision
# `fast` on the cases where it may take tensor cores; the backward's grad_input kernel), checks the chosen kernels
# at full size against the float64 reference (forward at both precisions, backward), times convt (GPU timestamps)
# and PyTorch (CUDA events) in the same command, forward and backward, and writes the tables and charts.
#
#   bash scripts/gpu_bench.sh all   OUTDIR [CONVT_BINARY]           # everything, one command
#   bash scripts/gpu_bench.sh tune  OUTDIR [CONVT_BINARY]           # the tuning only (OUTDIR/tune.json)
#   bash scripts/gpu_bench.sh bench OUTDIR [CONVT_BINARY] [CACHE]   # the rest, with a cache from `tune`
#   bash scripts/gpu_bench.sh dtypes OUTDIR [CONVT_BINARY] [CACHE]  # precision `fast` on f32, f16 and bf16 tensors
#   bash scripts/gpu_bench.sh backward OUTDIR [CONVT_BINARY] [CACHE] # the backward at every precision and dtype
#   bash scripts/gpu_bench.sh train OUTDIR [CONVT_BINARY] [CACHE]    # a training step at every precision and dtype
#
# OUTDIR gets: tune.json (the tuning cache), log.txt (every tuning time, verification line and benchmark table),
# and for `bench`/`all` convt_f32.json, convt_fast.json, convt_backward.json, convt_layer_f32.json,
# convt_layer_fast.json (the forward as a layer's repeated calls), torch.json, torch_backward.json,
# tables.md (forward f32, forward fast, backward), chart_f32.png, chart_fast.png, chart_backward.png. `dtypes`
# writes convt_fast.json, convt_f16.json, convt_bf16.json (with the ceilings and the GEMM yardstick), torch.json
# (PyTorch's four modes) and dtype_tables.md: each convt mode beside its PyTorch twin. `backward` times the backward
# pass at exact f32 (convt_backward_f32.json), at `fast` on f32 tensors (convt_backward_fast.json), on f16 tensors
# (convt_backward_f16.json) and on bf16 tensors (convt_backward_bf16.json), PyTorch's backward in its four modes
# (torch_backward.json), and writes backward_tables.md: four tables, each convt mode beside its PyTorch twin (exact
# f32 vs fp32, fast f32 vs TF32, f16 vs fp16, bf16 vs bf16) with both times, the ratio and each gradient's error
# (grad_input, grad_weight, grad_bias) beside PyTorch's, and the kernels convt ran; chart_backward_*.png with
# matplotlib. `train` times a training step (`convt bench --train`: the f32 master weight cast to the activations'
# dtype, forward, backward, SGD step) at exact f32 (convt_train_f32.json), at `fast` on f32, f16 and bf16
# activations (convt_train_fast.json, _f16, _bf16), the step through a layer at both precisions on f32 activations
# (convt_train_layer_f32.json, _layer_fast), PyTorch's step in its four modes, autocast for fp16 and bf16
# (torch_train.json), and writes train_tables.md as `backward` does. Give it a cache from `tune` (and
# `tune --backward --precision fast`) to time the tuned kernels.
# The PyTorch side needs python3 with torch (and matplotlib for the charts). RUNS (default 20) sets the timed runs
# of `backward` and `train`, convt's and PyTorch's alike.
set -euo pipefail
usage="usage: gpu_bench.sh all|tune|bench|dtypes|backward|train OUTDIR [CONVT_BINARY] [CACHE]"
what=${1:?$usage}
out=${2:?$usage}
case "$what" in all|tune|bench|dtypes|backward|train) ;; *) echo "$usage" >&2; exit 2 ;; esac
convt=${3:-target/release/convt}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
if [ -n "${4:-}" ]; then cp "$4" "$out/tune.json"; fi
export CONVT_TUNE_CACHE="$out/tune.json" PYTHONUNBUFFERED=1
log="$out/log.txt"
run() { echo "\$ $*" >> "$log"; "$@" >> "$log" 2>&1; }

"$convt" info > "$out/info.txt"
head -4 "$out/info.txt" | tee -a "$log"
rm "$out/info.txt"
if [ "$what" = all ] || [ "$what" = tune ]; then
  # Exact kernels on every case; `fast` only where tensor cores may win (64+ channels per group; for the backward's
  # grad_weight also 32+ at stride 1): elsewhere it takes the exact winner (gpu::select).
  run "$convt" tune --runs 10
  run "$convt" tune --precision fast --runs 10 --case kb57 kb65 kb69 up2x dcgan
  run "$convt" tune --backward --runs 10
  run "$convt" tune --backward --precision fast --runs 10 --case kb57 kb65 kb69 kb71 kb78 up2x dcgan
  grep -E -- '->' "$log"
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  run "$convt" verify
  run "$convt" verify --precision fast
  run "$convt" verify --backward
  run "$convt" verify --backward --precision fast
  run "$convt" bench --ceilings --runs 20 --json "$out/convt_f32.json"
  run "$convt" bench --precision fast --runs 20 --json "$out/convt_fast.json"
  run "$convt" bench --backward --runs 20 --json "$out/convt_backward.json"
  # The same forward as a layer's repeated calls, its weight prepared once (against the functional calls above).
  run "$convt" bench --layer --runs 20 --check-samples 0 --json "$out/convt_layer_f32.json"
  run "$convt" bench --layer --precision fast --runs 20 --check-samples 0 --json "$out/convt_layer_fast.json"
  run python3 "$here/torch_bench.py" --runs 20 --json "$out/torch.json"
  run python3 "$here/torch_bench.py" --backward --runs 20 --json "$out/torch_backward.json"
  for t in f32 fast backward; do
    torch_json="$out/torch.json"
    if [ "$t" = backward ]; then torch_json="$out/torch_backward.json"; fi
    python3 "$here/side_by_side.py" "$out/convt_$t.json" "$torch_json" --md "$out/table_$t.md" --png "$out/chart_$t.png"
  done
  cat "$out/table_f32.md" "$out/table_fast.md" "$out/table_backward.md" > "$out/tables.md"
  rm "$out/table_f32.md" "$out/table_fast.md" "$out/table_backward.md"
  grep -E 'ok$|MISMATCH' "$log" | cut -c1-160
  cat "$out/tables.md"
fi
if [ "$what" = dtypes ]; then
  # Precision `fast` (f16 products on tensor cores, f32 sums) on f32 tensors (against PyTorch's TF32), f16 tensors
  # (against its fp16) and bf16 tensors (against its bf16); the ceilings and the GEMM yardstick first.
  run "$convt" bench --ceilings --precision fast --runs 20 --json "$out/convt_fast.json"
  run "$convt" bench --precision fast --dtype f16 --runs 20 --json "$out/convt_f16.json"
  run "$convt" bench --precision fast --dtype bf16 --runs 20 --json "$out/convt_bf16.json"
  run python3 "$here/torch_bench.py" --runs 20 --json "$out/torch.json"
  : > "$out/dtype_tables.md"
  for t in fast f16 bf16; do
    python3 "$here/side_by_side.py" "$out/convt_$t.json" "$out/torch.json" --md "$out/table_$t.md" --png "$out/chart_$t.png"
    cat "$out/table_$t.md" >> "$out/dtype_tables.md"
    echo >> "$out/dtype_tables.md"
    rm "$out/table_$t.md"
  done
  grep -E 'ceilings|yardstick' "$log"
  cat "$out/dtype_tables.md"
fi
if [ "$what" = backward ] || [ "$what" = train ]; then
  # The backward (all three gradients), or a training step (cast, forward, backward, SGD step), at exact f32 and at
  # `fast` on f32, f16 and bf16 tensors, the errors against the float64 reference in each JSON; PyTorch's four
  # modes once.
  p=$what
  runs=${RUNS:-20}
  run "$convt" bench --$p --runs "$runs" --json "$out/convt_${p}_f32.json"
  for d in f32 f16 bf16; do
    name=$d
    if [ "$d" = f32 ]; then name=fast; fi
    run "$convt" bench --$p --precision fast --dtype "$d" --runs "$runs" --json "$out/convt_${p}_$name.json"
  done
  pairs="f32:fp32 fast:tf32 f16:fp16 bf16:bf16"
  if [ "$p" = train ]; then
    # The same step through a layer (f32 activations): its weight prepared again after each update.
    run "$convt" bench --train --layer --runs "$runs" --json "$out/convt_train_layer_f32.json"
    run "$convt" bench --train --layer --precision fast --runs "$runs" --json "$out/convt_train_layer_fast.json"
    pairs="$pairs layer_f32:fp32 layer_fast:tf32"
  fi
  run python3 "$here/torch_bench.py" --$p --runs "$runs" --json "$out/torch_$p.json"
  : > "$out/${p}_tables.md"
  for pair in $pairs; do
    t=${pair%%:*}
    python3 "$here/side_by_side.py" "$out/convt_${p}_$t.json" "$out/torch_$p.json" --torch-mode "${pair##*:}" \
      --md "$out/table_${p}_$t.md" --png "$out/chart_${p}_$t.png"
    cat "$out/table_${p}_$t.md" >> "$out/${p}_tables.md"
    echo >> "$out/${p}_tables.md"
    rm "$out/table_${p}_$t.md"
  done
  grep -E 'OVER TOLERANCE|warning' "$log" || true
  cat "$out/${p}_tables.md"
fi
