#!/usr/bin/env bash
# The whole test suite: unit, property, PyTorch golden-file, validation, robustness, fuzz, CLI and shader
# tests, then the training example (it fails unless the GPU-trained layer recovers the hidden one), then the
# suite a second time through wgpu's GL backend on Mesa's software OpenGL with wgpu's shader runtime checks on
# (skip it with CONVT_SECOND_BACKEND=none).
# GPU tests run on whatever Vulkan device is present (Mesa's software driver when there is none).
set -euo pipefail
cd "$(dirname "$0")/.."
SECOND_BACKEND="${CONVT_SECOND_BACKEND:-gl}"
[ "$SECOND_BACKEND" = "gl" ] && export CONVT_NEED_GL=1
source scripts/setup.sh
cargo test --release "$@"
cargo run --release --example train_hidden -- --steps 300 --out target/train_hidden.safetensors
if [ "$SECOND_BACKEND" = "gl" ]; then
  # The second pass also runs the kernels with wgpu's runtime checks on (the first runs them trusted, the
  # default), so both ways of creating shader modules are tested. One test thread: wgpu's GL backend does all GPU
  # work under one context lock and panics in a thread that waits more than 6 s for it, which a long shader
  # compile on the software driver can cause (docs/RELIABILITY.md, "Second backend (GL)").
  echo "test.sh: the suite again on wgpu's GL backend with shader runtime checks (CONVT_BACKEND=gl CONVT_SHADER_CHECKS=checked, one test thread)" >&2
  CONVT_BACKEND=gl CONVT_SHADER_CHECKS=checked RUST_TEST_THREADS=1 cargo test --release "$@"
fi
