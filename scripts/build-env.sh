# Sourced by the commands that build Tether (scripts/tether.sh, scripts/test.sh): makes cmake and
# libclang available for llama.cpp, the embedded model, without root. The system's are used
# when present; otherwise pinned PyPI wheels (a static cmake, libclang) are downloaded once into
# the cache and unpacked there. Without python3 it falls back to apt (root or sudo).
# TETHER_BUILD_TOOLS=wheels uses the wheels even when the system has the tools (the first-run
# test does, to prove that path).
tether_cmake_version="3.31.6"
tether_libclang_version="18.1.1"
tether_tools="${XDG_CACHE_HOME:-$HOME/.cache}/tether/build-tools"

tether_has_libclang() {
  [ -n "${LIBCLANG_PATH:-}" ] && return 0
  ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1 \
    || ls /usr/lib64/libclang*.so* >/dev/null 2>&1
}

# tether_wheel NAME VERSION DIR: the wheel unpacked in DIR (once; a stamp marks it complete).
tether_wheel() {
  local name="$1" version="$2" dir="$3"
  [ -f "$dir/.complete" ] && return 0
  echo "build: fetching $name $version from PyPI into $dir (once)" >&2
  rm -rf "$dir" "$dir.part" && mkdir -p "$dir.part/wheel"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    "$name==$version" -d "$dir.part/wheel" >&2
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

tether_build_env() {
  local wheels="${TETHER_BUILD_TOOLS:-}"
  if ! command -v c++ >/dev/null 2>&1 && ! command -v g++ >/dev/null 2>&1; then
    echo "build: no C++ compiler; install one (Debian/Ubuntu: sudo apt-get install g++), or build without the embedded model: cargo build --release -p tether --no-default-features" >&2
    return 1
  fi
  local need_cmake="" need_clang=""
  { [ "$wheels" = wheels ] || ! command -v cmake >/dev/null 2>&1; } && need_cmake=1
  { [ "$wheels" = wheels ] || ! tether_has_libclang; } && need_clang=1
  [ -z "$need_cmake$need_clang" ] && return 0
  if ! command -v python3 >/dev/null 2>&1; then
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "build: no python3 to fetch cmake and libclang with; installing them with apt" >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q cmake libclang-dev >&2 \
      || { $sudo apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q cmake libclang-dev >&2; }
    return
  fi
  if [ -n "$need_cmake" ]; then
    local dir="$tether_tools/cmake-$tether_cmake_version"
    tether_wheel cmake "$tether_cmake_version" "$dir" || return 1
    export PATH="$dir/cmake/data/bin:$PATH"
  fi
  if [ -n "$need_clang" ]; then
    local dir="$tether_tools/libclang-$tether_libclang_version"
    tether_wheel libclang "$tether_libclang_version" "$dir" || return 1
    export LIBCLANG_PATH="$dir/libclang-$tether_libclang_version.data/platlib/clang/native"
    # The wheel carries libclang but not clang's own headers (stddef.h, stdbool.h); the C
    # compiler's serve bindgen as well.
    export BINDGEN_EXTRA_CLANG_ARGS="-I$(cc -print-file-name=include) ${BINDGEN_EXTRA_CLANG_ARGS:-}"
  fi
}
