#!/usr/bin/env bash
# Makes sure a Vulkan driver is present, installing Mesa's software one (lavapipe) when the machine has none,
# and, with CONVT_NEED_GL=1, Mesa's software OpenGL for wgpu's GL backend.
# Sourced by scripts/run.sh and scripts/test.sh; safe to run again (it installs nothing when a driver exists).
set -euo pipefail

have_vulkan_driver() {
  # The loader (libvulkan.so.1) and at least one installable client driver (ICD) manifest. (grep reads all of
  # ldconfig's list: with -q it would stop early, ldconfig would die of SIGPIPE, and pipefail would call the
  # driver missing.)
  ldconfig -p 2>/dev/null | grep 'libvulkan\.so\.1' >/dev/null || return 1
  local d
  for d in /usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/share/vulkan/icd.d ${VK_DRIVER_FILES:+$(dirname "${VK_DRIVER_FILES%%:*}")} ${VK_ICD_FILENAMES:+$(dirname "${VK_ICD_FILENAMES%%:*}")}; do
    compgen -G "$d/*.json" >/dev/null 2>&1 && return 0
  done
  return 1
}

if ! have_vulkan_driver; then
  echo "setup: no Vulkan driver found; installing Mesa's software Vulkan driver (mesa-vulkan-drivers)" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends mesa-vulkan-drivers libvulkan1 >/dev/null
fi

have_gl_driver() {
  # wgpu's GL backend: the EGL loader, Mesa's EGL vendor library and its software rasterizer (llvmpipe).
  ldconfig -p 2>/dev/null | grep 'libEGL\.so\.1' >/dev/null || return 1
  ldconfig -p 2>/dev/null | grep 'libEGL_mesa\.so\.0' >/dev/null || return 1
  compgen -G "/usr/lib/*/dri/swrast_dri.so" >/dev/null 2>&1 || compgen -G "/usr/lib/dri/swrast_dri.so" >/dev/null 2>&1
}

# The second backend the tests run on (scripts/test.sh): Mesa's software OpenGL through EGL, no display needed.
if [ "${CONVT_NEED_GL:-0}" = "1" ] && ! have_gl_driver; then
  echo "setup: installing Mesa's software OpenGL (EGL) for wgpu's GL backend" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends libegl1 libegl-mesa0 libgl1-mesa-dri >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found: install Rust 1.87 or newer (https://rustup.rs), then run this again" >&2
  exit 1
fi

# Mesa's drivers print a warning when XDG_RUNTIME_DIR is unset; there is no display here anyway.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
