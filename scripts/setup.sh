#!/usr/bin/env bash
# One command for a fresh Debian 12 / Ubuntu 24.04 machine: installs the build dependencies,
# builds vramtrace, and runs the main job. With a GPU that is up to you (see README); without
# one it runs the built-in demo on the GPU-free CUDA test double: a train() that leaks like a
# DeepSpeed engine, traced with `vramtrace run --phase train`, then `vramtrace leaks`.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
# Build dependencies, then what the test suite uses (clang for libFuzzer, Chromium for the HTML
# report, venv/meson-python/patchelf for the wheel).
PACKAGES="meson ninja-build pkg-config gcc g++ libunwind-dev libzstd-dev libelf-dev python3 python3-pip
  python3-pytest python3-venv python3-mesonpy patchelf clang libclang-rt-14-dev chromium fonts-liberation"
missing=""
for p in $PACKAGES; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "vramtrace setup: installing$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

scripts/build.sh

export LD_LIBRARY_PATH="$PWD/build/tests/doubles${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
trace="$(mktemp -d)/demo.vrt"
echo
echo "== demo: vramtrace run --phase train -- python3 scripts/demo/train_leak.py"
build/analyzer/vramtrace run --phase train -o "$trace" -- python3 scripts/demo/train_leak.py
echo
echo "== vramtrace leaks --phase train $trace"
build/analyzer/vramtrace leaks --phase train --top 4 "$trace"
