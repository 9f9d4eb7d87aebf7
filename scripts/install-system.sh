#!/usr/bin/env bash
# Installs the system packages the build and tests need: cmake and libclang (llama-cpp-2 builds
# llama.cpp from source), and HAProxy (the load balancer in front of `tether serve` replicas in
# the scale-out test). Skipped when they are already there.
set -euo pipefail
have_libclang() { ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1; }
missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
have_libclang || missing+=(libclang-dev)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
if [ "${#missing[@]}" -eq 0 ]; then
  echo "system: cmake, libclang and haproxy present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "system: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -q "${missing[@]}" || { $sudo apt-get update -q && $sudo apt-get install -y -q "${missing[@]}"; }
