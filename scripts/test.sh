#!/usr/bin/env bash
# The whole test suite: unit, property, PyTorch golden-file, validation, CLI and shader tests. GPU tests run
# on whatever Vulkan device is present (Mesa's software driver when there is none).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo test --release "$@"
