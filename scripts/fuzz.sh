#!/usr/bin/env bash
# The long fuzzing run (tests/fuzz.rs): both targets, parameter validation and the safetensors reader, each for
# SECONDS (default 600) on fresh random inputs; prints each target's seed, executions and outcomes.
#   scripts/fuzz.sh [SECONDS] [release|debug]
# `debug` runs the dev profile, whose overflow checks turn silent wrap-arounds into failures (slower).
# Replay a failing run with CONVT_FUZZ_SEED=<seed printed by it>. The CI run is the normal test suite's
# (30 seconds per target, CONVT_FUZZ_SECONDS overrides it).
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE="${2:-release}"
case "$PROFILE" in
  release) FLAGS=(--release) ;;
  debug) FLAGS=() ;;
  *) echo "fuzz.sh: profile must be release or debug, got '$PROFILE'" >&2; exit 2 ;;
esac
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
CONVT_FUZZ_SECONDS=${1:-600} cargo test "${FLAGS[@]}" --test fuzz -- --nocapture
