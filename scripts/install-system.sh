#!/usr/bin/env bash
# Installs the system packages only the tests need: HAProxy (the load balancer in front of
# `tether serve` replicas in the scale-out test). Skipped when it is already there. cmake and
# libclang for the build come from scripts/build-env.sh, without root.
set -euo pipefail
if command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ]; then
  echo "system: haproxy present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "system: installing haproxy"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -q haproxy || { $sudo apt-get update -q && $sudo apt-get install -y -q haproxy; }
