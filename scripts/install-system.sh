#!/usr/bin/env bash
# Installs the system packages the build needs: cmake and libclang (llama-cpp-2 builds
# llama.cpp from source). Skipped when they are already there.
set -euo pipefail
have_libclang() { ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1; }
if command -v cmake >/dev/null 2>&1 && have_libclang; then
  echo "system: cmake and libclang present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "system: installing cmake and libclang-dev"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -q cmake libclang-dev || { $sudo apt-get update -q && $sudo apt-get install -y -q cmake libclang-dev; }
