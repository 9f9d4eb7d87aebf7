#!/usr/bin/env bash
# The README's first command: builds Tether with the embedded model and runs it with the given
# arguments, in the current directory. What the build needs beyond Rust and a C++ compiler
# (cmake, libclang) is fetched once by scripts/build-env.sh, without root; the model is fetched
# once on first use. Later runs reuse both and the build.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=build-env.sh
source "$root/scripts/build-env.sh"
tether_build_env
exec cargo run --release --locked --quiet --manifest-path "$root/Cargo.toml" -p tether -- "$@"
