#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what the tests need (cmake and libclang for
# the embedded llama.cpp, the pinned peer servers, the default model; all cached), then runs
# every test in the workspace, the official MCP conformance suite (client side), and the
# README's first command in a clean clone without cmake.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
source scripts/build-env.sh
tether_build_env
bash scripts/install-system.sh
bash scripts/install-peers.sh
started=$SECONDS
cargo build --locked -p tether
echo "test: cargo build took $((SECONDS - started)) s" >&2
# Downloads and verifies the default model once; later runs find it in the cache.
target/debug/tether model pull
# The tests never read or write the user's own config, sign-ins or sessions (the model cache,
# under XDG_CACHE_HOME, is shared on purpose).
isolated="$(mktemp -d)"
trap 'rm -rf "$isolated"' EXIT
export XDG_CONFIG_HOME="$isolated/config" XDG_DATA_HOME="$isolated/data"
export TETHER_CREDENTIALS="$isolated/credentials.json"
unset TETHER_MODEL TETHER_DATA_DIR
started=$SECONDS
cargo test --workspace --locked "$@"
echo "test: cargo test took $((SECONDS - started)) s" >&2
started=$SECONDS
bash scripts/conformance.sh
echo "test: the conformance suite took $((SECONDS - started)) s" >&2
started=$SECONDS
bash scripts/test-first-run.sh
echo "test: the first-run check took $((SECONDS - started)) s" >&2
