#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what the tests need (cmake and libclang for
# the embedded llama.cpp, the pinned peer servers, the default model; all cached), then runs
# every test in the workspace, then the official MCP conformance suite (client side).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/install-system.sh
bash scripts/install-peers.sh
cargo build --locked -p tether
# Downloads and verifies the default model once; later runs find it in the cache.
target/debug/tether model pull
cargo test --workspace --locked "$@"
bash scripts/conformance.sh
