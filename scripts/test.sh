#!/usr/bin/env bash
# The test suite, in two tiers (GPU tests run on whatever Vulkan device is present: Mesa's software driver when
# there is none, installed by scripts/setup.sh).
#
#   bash scripts/test.sh          the full tier, what CI runs:
#                                 1. cargo fmt --check, cargo clippy --all-targets -D warnings (tools/kernel-stats
#                                    too, a crate of its own) and cargo doc with warnings denied;
#                                 2. every test at full size (CONVT_TEST_TIER=full): all property cases, every
#                                    kernel on every fixture, the fuzz targets for 30 s each;
#                                 3. the examples that check themselves: training in f32 and mixed-precision training
#                                    (f16 and bf16 activations, f32 master weights, loss scaling; each fails unless
#                                    the GPU-trained layer recovers the hidden one) and an application's own device
#                                    (it fails unless convt's result, read by the application's pass, matches the
#                                    reference), and the README's Rust code (examples/readme.rs, which checks the
#                                    shapes and values the README's comments give);
#                                 3b. the Python package's tests (scripts/test_python.sh: a venv under target/,
#                                    `pip install ./python`, pytest against the float64 reference and PyTorch's files);
#                                 4. the tests that use the GPU again, through wgpu's GL backend on Mesa's software
#                                    OpenGL with wgpu's shader runtime checks on, in the second backend's tier (the
#                                    fast tier's samples with an eighth of the property cases; skip it with
#                                    CONVT_SECOND_BACKEND=none).
#   bash scripts/test.sh --fast   the fast tier, for day-to-day work: every test on the first backend with fewer
#                                 cases each (a quarter of the property cases, a fresh sample of the kernels and
#                                 files a test loops over). The same as `cargo test --release` once a driver is
#                                 installed.
#
# The test executables of the full tier and of the GL pass run in two lanes: two processes at a time, each on one
# test thread, the longest first (lanes() below). The suite's time is mostly the software driver compiling
# shaders, one core per compile, and a test binary that spends minutes in one test would leave the other core idle
# (the GL pass, one test thread for its own reason below, left it idle throughout).
#
# Extra arguments go to cargo test in the fast tier and to each test executable in the full tier (a test name
# filter, say).
set -euo pipefail
cd "$(dirname "$0")/.."
TIER=full
if [ "${1:-}" = "--fast" ]; then
  TIER=fast
  shift
fi
SECOND_BACKEND="${CONVT_SECOND_BACKEND:-gl}"
[ "$TIER" = full ] && [ "$SECOND_BACKEND" = "gl" ] && export CONVT_NEED_GL=1
source scripts/setup.sh
step() { echo "test.sh [$(date -u +%T)]: $*" >&2; }

if [ "$TIER" = fast ]; then
  step "fast tier (first backend)"
  CONVT_TEST_TIER=fast cargo test --release "$@"
  exit 0
fi

if cargo clippy --version >/dev/null 2>&1 && cargo fmt --version >/dev/null 2>&1; then
  step "cargo fmt --check, cargo clippy --all-targets -D warnings (and tools/kernel-stats)"
  cargo fmt --all -- --check
  cargo clippy --release --all-targets -- -D warnings
  # Every public item documented (#![warn(missing_docs)], denied above) and every doc link resolving, also
  # without the `cli` feature, as a library user builds it.
  RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --lib --no-default-features
  # tools/kernel-stats is not part of this crate: linted on its own, into the same target directory (its Cargo.lock
  # pins the same versions, so the dependencies they share are mostly reused).
  cargo fmt --manifest-path tools/kernel-stats/Cargo.toml -- --check
  cargo fmt --manifest-path python/Cargo.toml -- --check
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}" \
    cargo clippy --release --manifest-path tools/kernel-stats/Cargo.toml -- -D warnings
elif [ "${CI:-}" = "true" ]; then
  echo "test.sh: CI needs rustfmt and clippy (rustup component add rustfmt clippy)" >&2
  exit 1
else
  step "rustfmt or clippy not installed: lints skipped (rustup component add rustfmt clippy)"
fi

# lanes NAME [cargo test target selection...] -- [test executable arguments...]: builds the selected test
# executables, then runs them two at a time (xargs -P 2), each with RUST_TEST_THREADS=1 unless the caller set it,
# each one's output kept in target/test-logs/NAME/ and printed whole when it ends. The executables start longest
# first (the order of `longest` below, the rest after), so that no lane is left with a long one at the end. Fails,
# after every executable has run, when any failed. The doc tests run through cargo as before.
longest=(winograd fixtures backward_fast dtype backward precision layer cli properties robustness tune convt)
lanes() {
  local name="$1"
  shift
  local select=() args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    select+=("$1")
    shift
  done
  [ $# -gt 0 ] && shift
  args=("$@")
  local logs="target/test-logs/$name"
  rm -rf "$logs"
  mkdir -p "$logs"
  # One build: its progress and any diagnostics rendered on stderr, its artifacts as JSON on stdout; the test
  # executables are those whose profile has "test": true (examples and the CLI binary built beside them have not).
  local exes=() built
  built="$(cargo test --release --no-run --message-format=json-render-diagnostics "${select[@]}")"
  mapfile -t exes < <(grep '"profile":{[^}]*"test":true' <<<"$built" | grep -o '"executable":"[^"]*"' | cut -d'"' -f4)
  [ ${#exes[@]} -gt 0 ] || { echo "test.sh: no test executables built" >&2; return 1; }
  local ordered=() e l
  for l in "${longest[@]}"; do
    for e in "${exes[@]}"; do
      [[ "$(basename "$e")" == "$l"-* ]] && ordered+=("$e")
    done
  done
  for e in "${exes[@]}"; do
    [[ " ${ordered[*]} " == *" $e "* ]] || ordered+=("$e")
  done
  local -x CONVT_LANE_LOGS="$logs" RUST_TEST_THREADS="${RUST_TEST_THREADS:-1}"
  # One executable: its output to its log, then the log printed at once (so lanes do not interleave lines).
  run_one() {
    local exe="$1" start=$SECONDS rc=0
    shift
    local log
    log="$CONVT_LANE_LOGS/$(basename "$exe").log"
    "$exe" "$@" >"$log" 2>&1 || rc=$?
    {
      echo "test.sh: $(basename "$exe"): exit $rc after $((SECONDS - start)) s"
      cat "$log"
    } >&2
    [ "$rc" -eq 0 ] || touch "$log.failed"
    return 0
  }
  export -f run_one
  printf '%s\0' "${ordered[@]}" | xargs -0 -P 2 -I{} bash -c 'run_one "$@"' _ {} "${args[@]}"
  local failed
  failed=$(find "$logs" -name '*.failed' | sed 's|.*/||; s|\.log\.failed$||' | sort)
  if [ -n "$failed" ]; then
    echo "test.sh: failed: $(echo "$failed" | tr '\n' ' ')(logs in $logs)" >&2
    return 1
  fi
}

step "full tier (first backend), two lanes"
CONVT_TEST_TIER=full lanes full --lib --bins --tests -- "$@"
CONVT_TEST_TIER=full cargo test --release --doc "$@"
step "the examples that check themselves"
cargo run --release --example train_hidden -- --steps 300 --out target/train_hidden.safetensors
cargo run --release --example train_mixed -- --steps 300 --dtype f16
cargo run --release --example train_mixed -- --steps 300 --dtype bf16
cargo run --release --example own_device
cargo run --release --example readme

step "the Python package (scripts/test_python.sh): pip install ./python, pytest"
bash scripts/test_python.sh

if [ "$SECOND_BACKEND" = "gl" ]; then
  # The second pass also runs the kernels with wgpu's runtime checks on (the first runs them trusted, the
  # default), so both ways of creating shader modules are tested. One test thread per process: wgpu's GL backend
  # does all GPU work under one context lock and panics in a thread that waits more than 6 s for it, which a long
  # shader compile on the software driver can cause (docs/RELIABILITY.md, "Second backend (GL)"); the two lanes'
  # processes have a context each.
  step "the GPU tests again on wgpu's GL backend with shader runtime checks (CONVT_TEST_TIER=second CONVT_BACKEND=gl CONVT_SHADER_CHECKS=checked, one test thread a process, two lanes)"
  # The test binaries that use the GPU (the others, CLI parsing, file checks and fuzzing, never reach a backend).
  gpu_tests=(--lib --test backward --test backward_fast --test dtype --test fixtures --test precision --test properties --test robustness --test soak
    --test state_dict --test tune --test winograd)
  CONVT_TEST_TIER=second CONVT_BACKEND=gl CONVT_SHADER_CHECKS=checked RUST_TEST_THREADS=1 \
    lanes second "${gpu_tests[@]}" -- "$@"
fi
step "done"
