#!/usr/bin/env bash
# Benchmarks Tether against peer clients in one run and prints the ratios (see README).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/install-peers.sh
cargo bench --locked -p tether --bench mcp "$@"
