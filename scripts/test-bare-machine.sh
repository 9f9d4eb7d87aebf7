#!/usr/bin/env bash
# The README's first command on a bare machine of this project's kind, in a machine this test
# owns: a fresh Debian bookworm root (debootstrap --variant=minbase plus what the kind ships that
# matters to a build; scripts/bare-machine.sh), the machine's Rust toolchain mounted read-only,
# a clone of this repository's HEAD, an empty directory to ask from. Nothing installed on the
# machine that runs it reaches the build.
#   minimal   (no pip, no venv, no make): the command must stop before compiling, with one line
#             naming exactly the packages to install.
#   standard  (with them): the command must build Tether and answer through builtin__add.
#
# The cold release build takes minutes, so the test runs when its inputs changed since it last
# passed on this machine (the files below at HEAD, the toolchain, the root recipe), keyed by a
# hash in the cache, and always where it never passed; it says when it skipped and why.
# TETHER_BARE_MACHINE=force runs it anyway; TETHER_BARE_MACHINE=skip skips it (say why you do).
#
#   scripts/test-bare-machine.sh          the test
#   scripts/test-bare-machine.sh --lint   .ci/run's lint step (scripts/lint-build.sh) inside the
#                                         standard root, timed (a manual check, not part of CI)
#   scripts/test-bare-machine.sh --prepare  builds the roots the test will need (both at once;
#                                         network-bound, so the test command starts it early)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# shellcheck source=bare-machine.sh
source scripts/bare-machine.sh

mode="${1:-test}"
question="What is 10 + 20? Use the add tool."
if [ "${TETHER_BARE_MACHINE:-}" = skip ]; then
  echo "bare machine: skipped (TETHER_BARE_MACHINE=skip)"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "bare machine: needs root (debootstrap, chroot, mount namespaces); run as root, or set TETHER_BARE_MACHINE=skip" >&2
  exit 1
fi

inputs=(Cargo.lock scripts/tether.sh scripts/build-env.sh crates/local/Cargo.toml crates/local/build.rs crates/tether/build.rs crates/llama-kernels/build.rs crates/llama-kernels/link.rs scripts/bare-machine.sh scripts/test-bare-machine.sh)
if ! git diff --quiet HEAD -- "${inputs[@]}" 2>/dev/null; then
  echo "bare machine: note: the test clones HEAD; uncommitted changes to ${inputs[*]} are not part of it" >&2
fi
key="$({
  git rev-parse "${inputs[@]/#/HEAD:}"
  rustc -vV
  cargo -V
  echo "$bare_suite $bare_minimal_packages $bare_standard_packages"
} | sha256sum | cut -c1-16)"
stamp="$bare_cache/passed-$key"

work="$(mktemp -d "${TMPDIR:-/tmp}/tether-bare.XXXXXX")"
cleanup() { rm -rf --one-file-system "$work"; }
trap cleanup EXIT
clone="git clone -q /src /root/tether && mkdir /root/question && cd /root/question"

if [ "$mode" = --lint ]; then
  bare_unpack standard "$work/standard"
  started=$SECONDS
  bare_run 3600 "$work/standard" "$root" "git clone -q /src /root/tether && cd /root/tether && bash scripts/lint-build.sh"
  echo "bare machine: .ci/run's lint step (scripts/lint-build.sh) passed in the standard root in $((SECONDS - started)) s"
  exit 0
fi
if [ "$mode" != test ] && [ "$mode" != --prepare ]; then
  echo "bare machine: unknown argument $mode (none, --prepare or --lint)" >&2
  exit 2
fi

if [ "$mode" = --prepare ]; then
  if [ -f "$stamp" ] && [ "${TETHER_BARE_MACHINE:-}" != force ]; then
    exit 0
  fi
  bare_tarball minimal >/dev/null &
  minimal_job=$!
  bare_tarball standard >/dev/null
  wait "$minimal_job"
  exit 0
fi

if [ -f "$stamp" ] && [ "${TETHER_BARE_MACHINE:-}" != force ]; then
  echo "bare machine: skipped: its inputs (${inputs[*]}, the toolchain, the roots' packages; key $key) are unchanged since it passed on this machine ($(cat "$stamp")); TETHER_BARE_MACHINE=force runs it anyway"
  exit 0
fi
echo "bare machine: running (key $key: $([ -f "$stamp" ] && echo forced || echo "never passed on this machine with these inputs"))"

# first_command VARIANT SECONDS: the README's first command in a fresh copy of the variant's
# root, from an empty directory; its output in $work/VARIANT.out and .err, its exit in $status.
first_command() {
  local variant="$1" seconds="$2"
  bare_unpack "$variant" "$work/$variant"
  set +e
  bare_run "$seconds" "$work/$variant" "$root" "$clone && bash /root/tether/scripts/tether.sh run '$question'" \
    >"$work/$variant.out" 2>"$work/$variant.err"
  status=$?
  set -e
  rm -rf --one-file-system "${work:?}/$variant"
}

# The minimal root: no pip, venv or make. The command must say what to install, before compiling.
started=$SECONDS
first_command minimal 600
expected="build: missing make python3-pip; install and run again (Debian/Ubuntu: apt-get install make python3-pip)"
if [ "$status" -eq 0 ] || ! grep -qF "$expected" "$work/minimal.err" || grep -q "Compiling" "$work/minimal.err"; then
  echo "bare machine: in the minimal root (no pip, venv, make) the first command should stop before compiling with: $expected" >&2
  echo "bare machine: it exited $status; its stderr:" >&2
  tail -20 "$work/minimal.err" >&2
  exit 1
fi
minimal_time=$((SECONDS - started))
echo "bare machine: minimal root: the first command named what to install and stopped (exit $status) in $minimal_time s"

# The standard root: the README's first command, from an empty directory, cold.
started=$SECONDS
first_command standard 3000
answer="$(cat "$work/standard.out")"
if [ "$status" -ne 0 ] || ! grep -q "builtin__add" "$work/standard.err" || ! grep -q "30" <<<"$answer"; then
  echo "bare machine: the README's first command failed in the standard root (exit $status); stdout: $answer" >&2
  tail -30 "$work/standard.err" >&2
  exit 1
fi
standard_time=$((SECONDS - started))
echo "bare machine: standard root: the README's first command built Tether and answered through builtin__add in $standard_time s: $answer"
mkdir -p "$bare_cache"
echo "$(date -u +%FT%TZ), minimal $minimal_time s, standard $standard_time s" >"$stamp"
