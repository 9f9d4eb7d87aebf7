#!/usr/bin/env bash
# Installs the pinned MCP peers the tests and benchmarks run against:
#   npm:  peers/package-lock.json   -> peers/node_modules
#   PyPI: peers/requirements.txt    -> peers/.venv
#         peers/requirements-sqlite.txt -> peers/.venv-sqlite (needs mcp 1.x)
# Each install is skipped when a stamp shows the same pins were installed before, so a second
# run downloads nothing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root/peers"

stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }

npm_hash="$(sha256sum package-lock.json | cut -c1-16)"
if stamp_ok .stamp-npm "$npm_hash" && [ -x node_modules/.bin/mcp-server-everything ]; then
  echo "peers: npm packages up to date"
else
  echo "peers: installing npm packages (package-lock.json)"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$npm_hash" > .stamp-npm
fi

pip_hash="$(sha256sum requirements.txt | cut -c1-16)"
if stamp_ok .stamp-pip "$pip_hash" && [ -x .venv/bin/mcp-server-time ]; then
  echo "peers: python packages up to date"
else
  echo "peers: installing python packages (requirements.txt)"
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
  echo "$pip_hash" > .stamp-pip
fi

sqlite_hash="$(sha256sum requirements-sqlite.txt | cut -c1-16)"
if stamp_ok .stamp-sqlite "$sqlite_hash" && [ -x .venv-sqlite/bin/mcp-server-sqlite ]; then
  echo "peers: sqlite server up to date"
else
  echo "peers: installing mcp-server-sqlite (requirements-sqlite.txt)"
  python3 -m venv .venv-sqlite
  .venv-sqlite/bin/pip install --quiet --disable-pip-version-check -r requirements-sqlite.txt
  echo "$sqlite_hash" > .stamp-sqlite
fi

# The BFCL v4 data set (tool search tests and benchmark): the wheel's data files only, turned
# into one fixture server's tools and the tuned categories' questions.
# The stamp holds the fixture script's hash too, so a change to the fixture rebuilds it from the
# wheel already downloaded.
bfcl_version="2026.3.23"
bfcl_stamp="$bfcl_version $(sha256sum ../crates/test-support/fixtures/bfcl_server.py | cut -c1-16)"
if stamp_ok bfcl/.stamp "$bfcl_stamp" && [ -f bfcl/tools.json ]; then
  echo "peers: bfcl fixture up to date"
else
  echo "peers: building the bfcl fixture (bfcl-eval==$bfcl_version)"
  if ! ls bfcl/wheel/bfcl_eval-"$bfcl_version"-*.whl >/dev/null 2>&1; then
    rm -rf bfcl && mkdir -p bfcl/wheel
    python3 -m pip download --quiet --disable-pip-version-check --no-deps "bfcl-eval==$bfcl_version" -d bfcl/wheel
    python3 -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [z.extract(n, 'bfcl/wheel') for n in z.namelist() if n.startswith('bfcl_eval/data/')]" bfcl/wheel/bfcl_eval-*.whl
  fi
  python3 ../crates/test-support/fixtures/bfcl_server.py build bfcl/wheel/bfcl_eval/data bfcl
  echo "$bfcl_stamp" > bfcl/.stamp
fi

# The Rust mcp-proxy (crates.io 0.6.0, on tower-mcp): a real peer for the era-fallback test and
# the gateway benchmark. Built once per machine into the cache (a few minutes on two cores), so
# fresh clones find it; its own build directory is thrown away.
proxy_root="${XDG_CACHE_HOME:-$HOME/.cache}/tether/peers/mcp-proxy-0.6.0"
if [ -x "$proxy_root/bin/mcp-proxy" ]; then
  echo "peers: mcp-proxy 0.6.0 up to date"
else
  echo "peers: building mcp-proxy 0.6.0 (cargo install --locked, once per machine)"
  proxy_build="$(mktemp -d "${TMPDIR:-/tmp}/tether-mcp-proxy.XXXXXX")"
  # Built as a plain release, outside this workspace's lint wrapper and shared build directory.
  env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS -u CARGO_BUILD_BUILD_DIR CARGO_TARGET_DIR="$proxy_build" \
    cargo install --locked --quiet mcp-proxy@0.6.0 --root "$proxy_root.partial"
  rm -rf "$proxy_build" "$proxy_root"
  mv "$proxy_root.partial" "$proxy_root"
fi
