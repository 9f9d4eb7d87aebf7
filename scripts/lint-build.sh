#!/usr/bin/env bash
# The lint step and the build of the test suite in one compilation: every target of the workspace
# (libraries, the binary, tests, benches) compiled once, with clippy as the compiler of the
# workspace's own crates and warnings denied (scripts/build-env.sh, tether_lint_env). The build
# environment (cmake and libclang for llama.cpp) is the one the README's first command uses.
# Then the binary without the embedded model (no C++), linted the same way (ARCHITECTURE.md
# promises it builds without a C++ compiler). Extra arguments go
# to the first cargo command.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# shellcheck source=build-env.sh
source scripts/build-env.sh
tether_build_env
tether_lint_env
tether_prune_build_dir
started=$SECONDS
cargo test --workspace --all-targets --locked --no-run "$@"
echo "lint-build: the workspace, linted and built, took $((SECONDS - started)) s" >&2
started=$SECONDS
# The binary's unit-test build: it compiles and links all of the binary's code without leaving a
# second target/debug/tether over the one the tests run.
cargo test -p tether --no-default-features --bins --no-run --locked --quiet
echo "lint-build: the binary without the embedded model, linted and built, took $((SECONDS - started)) s" >&2
