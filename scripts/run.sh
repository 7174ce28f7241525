#!/usr/bin/env bash
# The main job: a KernelBench-like transposed convolution on the GPU (or Mesa's software Vulkan driver) and
# on the CPU reference, with times and the error between them.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo run --release --example compare_cpu -- "$@"
