#!/usr/bin/env bash
# clippy-driver as the compiler of the workspace's own crates (scripts/build-env.sh,
# tether_lint_env, sets this script as RUSTC_WORKSPACE_WRAPPER). A script inside the clone on
# purpose: cargo keys the workspace crates' artifacts by the wrapper's path, so clones that share
# one build directory each compile their own crates (their compiled-in paths, such as
# CARGO_MANIFEST_DIR, differ) and share only the dependencies.
exec "$TETHER_CLIPPY_DRIVER" "$@"
