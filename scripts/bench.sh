#!/usr/bin/env bash
# Benchmarks Tether against peers in one run and prints the ratios (see README):
#   mcp   — the floor (a stdio echo over pipes), tools/call round trips sequential and with 16
#           and 64 in flight vs the TypeScript and Python SDK clients against a fast Rust server
#           and server-everything; the agent loop's overhead per call; start-up of 1/10/50
#           servers and the first request with one slow server; peak RSS of run and chat
#   local — embedded-model tool-call accuracy with and without grammar; tokens/s vs llama-bench;
#           the Q4_1 prompt kernel against ggml's dot products; busy/quiet end to end
#   search — tool-search recall and speed over the BFCL v4 fixture (1,853 tools); tokens per mode;
#            the encoder's speed, and `tools --search`'s first search cold and warm with its RSS
#   gateway — `tether serve` (both eras) vs direct, the floor of an HTTP-to-stdio proxy, the Rust
#             mcp-proxy 0.6.0 (install-peers.sh builds it) and the Python mcp-proxy 0.13.0 at
#             1/8/32/64 raw keep-alive clients, 2,000 calls per cell; CPU per call of the
#             gateway, the floor and the Rust proxy; peak RSS, 10 upstreams
# Every figure is the median of interleaved rounds with its spread. `--quick` makes fewer calls
# per round and leaves out the embedded model (the slowest part); other arguments go to cargo.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
quick=""
args=()
for arg in "$@"; do
  if [ "$arg" = --quick ]; then quick=1; else args+=("$arg"); fi
done
if [ -n "$quick" ]; then export TETHER_BENCH_QUICK=1; fi
echo "bench: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
bash scripts/install-system.sh
bash scripts/install-peers.sh
# llama.cpp's own llama-bench and llama-completion (the same call with the same grammar), built once (cached in target/llama-bench) with the same CPU flags
# as llama-cpp-sys-2 (GGML_NATIVE off). The llama.cpp sources in the llama-cpp-sys-2 crate omit
# the tools, so they come from the llama-cpp-python 0.3.36 sdist on PyPI, verified by SHA-256.
bench_dir="$root/target/llama-bench"
if [ -z "$quick" ] && { [ ! -x "$bench_dir/build/bin/llama-bench" ] || [ ! -x "$bench_dir/build/bin/llama-completion" ]; }; then
  sdist_sha=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
  sdist="$root/target/llama_cpp_python-0.3.36.tar.gz"
  if ! echo "$sdist_sha  $sdist" | sha256sum -c --status 2>/dev/null; then
    url="$(curl -fsS -H 'Accept: application/vnd.pypi.simple.v1+json' https://pypi.org/simple/llama-cpp-python/ \
      | python3 -c 'import json,sys; print(next(f["url"] for f in json.load(sys.stdin)["files"] if f["filename"]=="llama_cpp_python-0.3.36.tar.gz"))')"
    curl -fsS -o "$sdist" "$url"
    echo "$sdist_sha  $sdist" | sha256sum -c --status
  fi
  rm -rf "$bench_dir" && mkdir -p "$bench_dir"
  tar xzf "$sdist" -C "$bench_dir" --strip-components=3 llama_cpp_python-0.3.36/vendor/llama.cpp
  cmake -S "$bench_dir" -B "$bench_dir/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON >/dev/null
  cmake --build "$bench_dir/build" --target llama-bench llama-completion -j "$(nproc)" >/dev/null
fi
export LLAMA_BENCH="$bench_dir/build/bin/llama-bench"
# mcp-proxy (PyPI) for the gateway comparison, in its own venv: it needs mcp<2, the peers use 2.x.
if [ ! -x peers/.venv-proxy/bin/mcp-proxy ]; then
  python3 -m venv peers/.venv-proxy
  peers/.venv-proxy/bin/pip install --quiet --disable-pip-version-check mcp-proxy==0.13.0
fi
cargo bench --locked -p tether --bench mcp "${args[@]}"
# The search encoder for the semantic column (cached after the first time); `model pull` prints
# the default model's path, then the encoder's directory.
encoder_dir="$(cargo run --quiet --locked --release -p tether -- model pull | tail -1)"
cargo bench --locked -p tether-catalog --bench search "${args[@]}"
# The encoder itself (tokens, a cold encoding of BFCL's tools with and without VNNI, a query),
# then the first search as a person meets it: `tether tools --search` cold, warm and lexical.
cargo bench --locked -p tether-encoder --bench encode "${args[@]}"
python3 scripts/bench-first-search.py "${CARGO_TARGET_DIR:-target}/release/tether" "$encoder_dir" 5
cargo bench --locked -p tether --bench gateway "${args[@]}"
if [ -z "$quick" ]; then
  cargo bench --locked -p tether-llama-kernels --bench q4_1 "${args[@]}"
  cargo bench --locked -p tether --bench local "${args[@]}"
fi
echo "bench: load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
