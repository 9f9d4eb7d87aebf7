#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what the tests need (cmake and libclang for
# the embedded llama.cpp, the pinned peer servers, the default model; all cached), builds and
# lints every target once (scripts/lint-build.sh), then runs every test in the workspace, the
# official MCP conformance suite, and the README's first command on a bare machine of this kind
# (scripts/test-bare-machine.sh). Each step's time goes to stderr. Extra arguments go to the test
# runner (cargo-nextest where installed, else cargo test).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
step() {
  local started=$SECONDS
  "$@"
  echo "test: $* took $((SECONDS - started)) s" >&2
}

# What the tests need beyond the build's own needs, named in one line before anything is done.
missing=()
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "test: missing ${missing[*]}; install them (Debian/Ubuntu: apt-get install ${missing[*]}; Node 20 or later) and run again" >&2
  exit 1
fi
# shellcheck source=build-env.sh
source scripts/build-env.sh
tether_build_env
tether_lint_env
isolated="$(mktemp -d)"
trap 'rm -rf "$isolated"' EXIT
step bash scripts/install-system.sh
# The bare-machine test's Debian roots (debootstrap, network-bound) are built while this machine
# compiles; the test waits for them at the end. Nothing happens when the test will be skipped.
bash scripts/test-bare-machine.sh --prepare >"$isolated/bare-prepare.log" 2>&1 &
bare_prepare=$!

step bash scripts/test-build-env.sh
step bash scripts/install-peers.sh
step bash scripts/lint-build.sh
# Downloads and verifies the default model and the search encoder once; later runs find them in
# the cache.
step target/debug/tether model pull
# The tests never read or write the user's own config, sign-ins or sessions (the model cache,
# under XDG_CACHE_HOME, is shared on purpose).
isolate() {
  export XDG_CONFIG_HOME="$isolated/config" XDG_DATA_HOME="$isolated/data"
  export TETHER_CREDENTIALS="$isolated/credentials.json"
  unset TETHER_MODEL TETHER_DATA_DIR
}
# The search encoder's vectors for the BFCL fixture's 1,853 tools, computed once into the model
# cache (seconds the first time, nothing later), so the tool-search tests that run side by side
# do not each compute them on a cold machine.
warm_tool_vectors() {
  (
    isolate
    target/debug/tether --stdio "bfcl=python3 crates/test-support/fixtures/bfcl_server.py serve peers/bfcl/tools.json" \
      tools --search "binomial probability" >/dev/null
  )
}
step warm_tool_vectors
run_tests() {
  (
    isolate
    if cargo nextest --version >/dev/null 2>&1; then
      local status=0
      cargo nextest run --workspace --locked --no-tests=warn "$@" || status=$?
      [ -f target/nextest/default/junit.xml ] && python3 scripts/test-times.py target/nextest/default/junit.xml
      exit "$status"
    else
      echo "test: cargo-nextest is not installed; running the tests with cargo test, one binary at a time (cargo install cargo-nextest --locked for parallel runs)" >&2
      cargo test --workspace --locked "$@"
    fi
  )
}
step run_tests "$@"
step bash scripts/conformance.sh
wait_for_roots() {
  wait "$bare_prepare" || {
    echo "test: building the bare-machine roots failed:" >&2
    tail -20 "$isolated/bare-prepare.log" >&2
    return 1
  }
}
step wait_for_roots
step bash scripts/test-bare-machine.sh
