#!/usr/bin/env bash
# Unit-level checks of scripts/build-env.sh's libclang detection over fake library directories:
# libclang counts as present only where bindgen's loader (clang-sys) would load it. The script
# under test is the first argument (default: scripts/build-env.sh), so an older one can be
# checked too: the one that took /usr/lib/llvm-14/lib/libclang-cpp.so.14 for libclang fails here.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
script="${1:-$root/scripts/build-env.sh}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0

elf64() { mkdir -p "$(dirname "$1")" && printf '\177ELF\002\001\001\000' >"$1"; }
elf32() { mkdir -p "$(dirname "$1")" && printf '\177ELF\001\001\001\000' >"$1"; }

# check NAME EXPECTED(found|absent) [VAR=VALUE...]: runs the detection in a clean shell with only
# the fake tree (TETHER_LIBCLANG_SEARCH_ROOT) and no llvm-config on PATH unless given.
check() {
  local name="$1" expected="$2"
  shift 2
  local got
  if env -i HOME="$work/home" PATH="$work/bin:/usr/bin:/bin" TETHER_LIBCLANG_SEARCH_ROOT="$work/fs" "$@" \
    bash -c 'source "$1"; tether_has_libclang' _ "$script" >/dev/null 2>&1; then
    got=found
  else
    got=absent
  fi
  if [ "$got" = "$expected" ]; then
    echo "ok: $name ($got)"
  else
    echo "FAILED: $name: libclang $got, expected $expected" >&2
    failures=$((failures + 1))
  fi
}

mkdir -p "$work/bin" "$work/fs/usr/lib" "$work/home"
# The machine kind's image: only the C++ API library.
elf64 "$work/fs/usr/lib/llvm-14/lib/libclang-cpp.so.14"
elf64 "$work/fs/usr/lib/x86_64-linux-gnu/libclang-cpp.so.14"
check "only libclang-cpp.so.14 in the standard directories" absent
check "LIBCLANG_PATH naming a directory with only libclang-cpp" absent LIBCLANG_PATH="$work/fs/usr/lib/llvm-14/lib"

# A 32-bit libclang is not loadable by a 64-bit build script.
elf32 "$work/fs/usr/lib/i386-linux-gnu/libclang-14.so.1"
check "a 32-bit libclang only" absent

# Debian's libclang1-14: the versioned library under the multiarch directory.
elf64 "$work/fs/usr/lib/x86_64-linux-gnu/libclang-14.so.1"
check "libclang-14.so.1 beside libclang-cpp" found

# LIBCLANG_PATH is searched alone, as clang-sys does: a directory, or the library itself.
mkdir -p "$work/elsewhere"
check "LIBCLANG_PATH at an empty directory, though the system has one" absent LIBCLANG_PATH="$work/elsewhere"
elf64 "$work/elsewhere/libclang.so"
check "LIBCLANG_PATH at a directory with libclang.so" found LIBCLANG_PATH="$work/elsewhere"
check "LIBCLANG_PATH naming the library file" found LIBCLANG_PATH="$work/elsewhere/libclang.so"

# llvm-config's prefix is honoured (LLVM_CONFIG_PATH too).
rm -rf "$work/fs/usr/lib/x86_64-linux-gnu/libclang-14.so.1" "$work/fs/usr/lib/i386-linux-gnu"
elf64 "$work/llvm/lib/libclang-17.so"
printf '#!/bin/sh\necho %s\n' "$work/llvm" >"$work/my-llvm-config" && chmod +x "$work/my-llvm-config"
check "LLVM_CONFIG_PATH's prefix holds libclang-17.so" found LLVM_CONFIG_PATH="$work/my-llvm-config"
cp "$work/my-llvm-config" "$work/bin/llvm-config"
check "llvm-config on PATH names a prefix holding libclang-17.so" found
rm "$work/bin/llvm-config"
check "no llvm-config, only libclang-cpp again" absent

# LD_LIBRARY_PATH directories are searched.
check "LD_LIBRARY_PATH holds libclang-17.so" found LD_LIBRARY_PATH="/nonexistent:$work/llvm/lib"

if [ "$failures" -gt 0 ]; then
  echo "build-env: $failures detection check(s) failed for $script" >&2
  exit 1
fi
echo "build-env: every libclang detection check passed"
