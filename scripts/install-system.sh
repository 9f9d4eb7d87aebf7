#!/usr/bin/env bash
# Installs the Debian packages only the tests need, each skipped when its program is there:
# HAProxy (the load balancer in front of `tether serve` replicas in the scale-out test), tmux
# (the terminal tests), debootstrap and zstd (the bare-machine test builds and caches its roots
# with them), tzdata (the embedded model's time-zone test reads its tables). cmake and libclang
# for the build come from scripts/build-env.sh, without root.
set -euo pipefail
packages=()
{ command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ]; } || packages+=(haproxy)
command -v tmux >/dev/null 2>&1 || packages+=(tmux)
{ command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ]; } || packages+=(debootstrap)
command -v zstd >/dev/null 2>&1 || packages+=(zstd)
[ -f /usr/share/zoneinfo/zone1970.tab ] || packages+=(tzdata)
if [ "${#packages[@]}" -eq 0 ]; then
  echo "system: haproxy, tmux, debootstrap, zstd and tzdata present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "system: installing ${packages[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -q "${packages[@]}" || { $sudo apt-get update -q && $sudo apt-get install -y -q "${packages[@]}"; }
