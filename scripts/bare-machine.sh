# Sourced by scripts/test-bare-machine.sh: fresh Debian bookworm roots of this project's machine
# kind, built with debootstrap and cached as tarballs, and a way to run a command inside one with
# the machine's Rust toolchain mounted read-only. Needs root (debootstrap, chroot, mounts).
#
# Two variants, both --variant=minbase plus what a machine of this kind ships that matters to a
# build:
#   minimal   g++, python3, git, ca-certificates, llvm-14-dev (so libclang-cpp is there and
#             libclang is not); no pip, no venv, no make
#   standard  minimal plus python3-pip, python3-venv and make
bare_suite="bookworm"
bare_minimal_packages="g++,python3,git,ca-certificates,llvm-14-dev"
bare_standard_packages="$bare_minimal_packages,python3-pip,python3-venv,make"
bare_cache="${XDG_CACHE_HOME:-$HOME/.cache}/tether/bare-machine"

# The Debian mirror apt already uses (deb822 .sources or a one-line sources.list).
bare_mirror() {
  local uri
  uri="$(grep -h -m1 -E '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -1)"
  [ -z "$uri" ] && uri="$(grep -h -m1 -E '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | head -1)"
  echo "${uri:-http://deb.debian.org/debian}"
}

# bare_tarball VARIANT: prints the path of the variant's cached root, building it once.
bare_tarball() {
  local variant="$1" packages
  case "$variant" in
    minimal) packages="$bare_minimal_packages" ;;
    standard) packages="$bare_standard_packages" ;;
    *) echo "bare machine: unknown variant $variant (minimal or standard)" >&2; return 1 ;;
  esac
  local key
  key="$(echo "$bare_suite $packages" | sha256sum | cut -c1-12)"
  local tarball="$bare_cache/$variant-$bare_suite-$key.tar.zst"
  mkdir -p "$bare_cache"
  # One builder at a time per variant (CI starts the build early, in the background, and the
  # test waits for it here).
  local lock
  exec {lock}>"$bare_cache/$variant.lock"
  flock "$lock"
  if [ ! -f "$tarball" ]; then
    command -v debootstrap >/dev/null 2>&1 || {
      echo "bare machine: debootstrap is missing; install it (Debian/Ubuntu: apt-get install debootstrap)" >&2
      return 1
    }
    local started=$SECONDS build="$bare_cache/$variant.building"
    echo "bare machine: building the $variant root with debootstrap (once; cached as $tarball)" >&2
    rm -rf --one-file-system "$build" && mkdir -p "$build"
    timeout 1200 debootstrap --variant=minbase --include="$packages" "$bare_suite" "$build" "$(bare_mirror)" \
      >"$bare_cache/$variant.debootstrap.log" 2>&1 || {
      echo "bare machine: debootstrap failed; its log: $bare_cache/$variant.debootstrap.log" >&2
      tail -5 "$bare_cache/$variant.debootstrap.log" >&2
      return 1
    }
    rm -rf "$build"/var/cache/apt/archives/*.deb
    tar -C "$build" --numeric-owner -cf - . | zstd -q -T0 -3 -o "$tarball.part" && mv "$tarball.part" "$tarball"
    rm -rf --one-file-system "$build"
    echo "bare machine: the $variant root took $((SECONDS - started)) s to build" >&2
  fi
  exec {lock}>&-
  echo "$tarball"
}

# bare_unpack VARIANT DIR: a fresh copy of the variant's root in DIR, given what a machine of this
# kind is given by its provider: the CA bundle and pip configuration (this machine reaches the
# registries through its own CA), name resolution.
bare_unpack() {
  local variant="$1" dir="$2" tarball
  tarball="$(bare_tarball "$variant")" || return 1
  mkdir -p "$dir"
  zstd -q -d -c "$tarball" | tar -C "$dir" --numeric-owner -xf -
  cp /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/ca-certificates.crt"
  [ -f /etc/pip.conf ] && cp /etc/pip.conf "$dir/etc/pip.conf"
  cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
  cp /etc/hosts "$dir/etc/hosts" 2>/dev/null || true
  mkdir -p "$dir/opt/rustup" "$dir/opt/cargo-bin" "$dir/src"
}

# bare_run SECONDS DIR SRC COMMAND: runs COMMAND (a bash command line) as root inside the root in DIR,
# in a mount namespace of its own: /proc and /dev, the machine's Rust toolchain read-only at
# /opt/rustup and /opt/cargo-bin, SRC (a git checkout) read-only at /src. The environment is
# empty but for what a login on such a machine has, so nothing of this machine's leaks in. A PID
# namespace of its own ends every process the command left behind; SECONDS bounds the whole.
bare_run() {
  local seconds="$1" dir="$2" src="$3" command="$4"
  local rustup_home="${RUSTUP_HOME:-$HOME/.rustup}" cargo_bin
  cargo_bin="$(dirname "$(command -v cargo)")"
  timeout --kill-after=10 "$seconds" unshare --mount --propagation private --pid --fork -- bash -euc '
    dir="$1"; rustup_home="$2"; cargo_bin="$3"; src="$4"; command="$5"
    mount -t proc proc "$dir/proc"
    mount --rbind /dev "$dir/dev"
    mount --bind -o ro "$rustup_home" "$dir/opt/rustup"
    mount --bind -o ro "$cargo_bin" "$dir/opt/cargo-bin"
    mount --bind -o ro "$src" "$dir/src"
    exec chroot "$dir" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
      PATH=/opt/cargo-bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      RUSTUP_HOME=/opt/rustup CARGO_HOME=/root/.cargo RUSTUP_AUTO_INSTALL=0 \
      /bin/bash -c "cd /root && $command"
  ' bare "$dir" "$rustup_home" "$cargo_bin" "$src" "$command"
}
