#!/usr/bin/env bash
# The whole test suite: unit, property, PyTorch golden-file, validation, CLI and shader tests, then the
# training example (it fails unless the GPU-trained layer recovers the hidden one). GPU tests run on whatever
# Vulkan device is present (Mesa's software driver when there is none).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo test --release "$@"
cargo run --release --example train_hidden -- --steps 300 --out target/train_hidden.safetensors
