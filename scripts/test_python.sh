#!/usr/bin/env bash
# The Python package's tests: builds and installs python/ (the `convt` module: pyo3 extension plus a pure-Python
# layer) into a virtual environment under target/, then runs pytest on python/tests on whatever Vulkan device is
# present (Mesa's software driver when there is none, installed by scripts/setup.sh).
#
#   bash scripts/test_python.sh [pytest arguments]
#
# Works from a fresh clone on Debian/Ubuntu: installs python3's venv and pip when missing. The extension builds
# into the library's target directory (CARGO_TARGET_DIR, else target/), where a dependency both builds compile
# alike is compiled once. The environment is kept between runs (PYENV_DIR, default target/pyenv); the package
# is rebuilt (incrementally) and reinstalled every run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
step() { echo "test_python.sh: $*" >&2; }

if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  step "installing python3 with venv and pip"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends python3 python3-venv python3-pip >/dev/null
fi

PYENV_DIR="${PYENV_DIR:-target/pyenv}"
if [ ! -x "$PYENV_DIR/bin/python" ]; then
  step "creating the virtual environment $PYENV_DIR"
  python3 -m venv "$PYENV_DIR"
fi
PY="$PYENV_DIR/bin/python"

# An absolute path: maturin runs cargo from python/.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
case "$CARGO_TARGET_DIR" in /*) ;; *) CARGO_TARGET_DIR="$PWD/$CARGO_TARGET_DIR" ;; esac

step "pip install ./python pytest numpy safetensors ml_dtypes torch (builds the extension in release mode)"
# torch as PyPI serves it (convt.torch's tests and example; the CUDA libraries it brings are not used here).
"$PY" -m pip install --quiet --disable-pip-version-check ./python pytest numpy safetensors ml_dtypes torch

step "pytest python/tests"
# From the repository root, so that `import convt` finds the installed package, not the python/convt sources
# (which lack the compiled extension).
"$PY" -m pytest python/tests -q -p no:cacheprovider "$@"

step "python/examples/train_decoder.py: a torch training loop with convt's layers against nn.ConvTranspose2d's"
"$PY" python/examples/train_decoder.py
