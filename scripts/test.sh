#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs the pinned peers (cached), then runs every
# test in the workspace against them.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/install-peers.sh
cargo test --workspace --locked "$@"
