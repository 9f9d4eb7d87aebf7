#!/usr/bin/env bash
# Tests the README's first command the way a new user meets it: in a clean clone, with cmake
# absent from PATH and libclang taken from its wheel (TETHER_BUILD_TOOLS=wheels), the command
# must build Tether and answer with the built-in add tool. The release build goes to
# target/first-run, so it is cold on a fresh checkout (as in CI) and warm on later runs.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone -q "$root" "$work/repo"
# A PATH holding every program of this one except cmake and its siblings.
mkdir "$work/bin" "$work/question"
IFS=: read -ra dirs <<<"$PATH"
for dir in "${dirs[@]}"; do
  [ -d "$dir" ] || continue
  for program in "$dir"/*; do
    name="$(basename "$program")"
    case "$name" in cmake | ccmake | cpack | ctest) continue ;; esac
    [ -e "$work/bin/$name" ] || ln -s "$program" "$work/bin/$name"
  done
done
if PATH="$work/bin" command -v cmake >/dev/null 2>&1; then
  echo "first run: cmake is still on the test's PATH" >&2
  exit 1
fi
started=$(date +%s)
cd "$work/question"
answer="$(env -u LIBCLANG_PATH PATH="$work/bin" TETHER_BUILD_TOOLS=wheels \
  CARGO_TARGET_DIR="$root/target/first-run" \
  bash "$work/repo/scripts/tether.sh" run "What is 10 + 20? Use the add tool." 2>"$work/stderr")" || {
  echo "first run: the README's first command failed:" >&2
  tail -30 "$work/stderr" >&2
  exit 1
}
if ! grep -q "builtin__add" "$work/stderr" || ! grep -q "30" <<<"$answer"; then
  echo "first run: no answer through builtin__add; stdout: $answer" >&2
  tail -30 "$work/stderr" >&2
  exit 1
fi
echo "first run: the README's first command answered without cmake on PATH in $(($(date +%s) - started)) s: $answer"
