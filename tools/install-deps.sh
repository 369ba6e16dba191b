#!/usr/bin/env bash
# install-deps.sh - install what building and testing cubemem needs on Debian
# (called by the Makefile when a tool is missing, and by .ci/run).
# Usage: tools/install-deps.sh [--all]   (--all adds clang, valgrind, python3
# and the sanitizer/fuzzer runtimes used by make asan/tsan/valgrind/fuzz, and
# a Vulkan loader, Mesa's CPU driver lavapipe and the validation layer for the
# Vulkan tests, which skip without them)
set -euo pipefail
pkgs=(cmake ninja-build gcc make pkg-config)
if [ "${1:-}" = "--all" ]; then
  pkgs+=(clang libclang-rt-14-dev valgrind python3)
  pkgs+=(libvulkan1 mesa-vulkan-drivers vulkan-validationlayers libvulkan-dev)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "cubemem: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "cubemem: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
