#!/usr/bin/env bash
# Installs what a fresh machine (with Rust) lacks to build and test sturnus. Idempotent.
#
#   scripts/bootstrap.sh [WHAT...]      WHAT: test (the default), static, arm64, macos, arm64-vm
#
#  - always: cmake (Pingora's zlib-ng dependency needs it; Debian's package when root, else pip's);
#  - test: what `make test` and `make demo` need — static, plus the openssl command (the Vertex AI
#    tests mint throwaway RSA keys with it) and kubernetes-validate (PyPI: validates
#    examples/kubernetes/ against the 1.33 schemas offline) and the OpenAI Python SDK (PyPI
#    openai and httpx: the TLS listener's test talks to sturnus through it);
#  - static: musl-tools and the x86_64-unknown-linux-musl Rust target (the test suite is built
#    for it, so the binary under test is the static one the Dockerfile ships);
#  - arm64: cargo-zigbuild and zig (PyPI packages cargo-zigbuild and ziglang: zig is the cross C
#    compiler and linker) and the aarch64-unknown-linux-musl Rust target;
#  - macos: cargo-zigbuild and zig, and the x86_64-apple-darwin and aarch64-apple-darwin targets;
#  - arm64-vm: what scripts/arm64-vm.sh needs to boot an arm64 Linux on an x86_64 machine:
#    qemu-system-arm and cpio (Debian), and in ARM64_VM_DIR (default target/arm64-vm) Debian's
#    arm64 kernel, its virtio network modules and a static busybox (packages downloaded with
#    `apt-get download` after `dpkg --add-architecture arm64`; nothing arm64 is installed).
set -euo pipefail

MUSL_TARGET=x86_64-unknown-linux-musl
ARM64_TARGET=aarch64-unknown-linux-musl
MACOS_TARGETS="x86_64-apple-darwin aarch64-apple-darwin"
KUBERNETES_VALIDATE=kubernetes-validate==1.37.0
# The OpenAI Python SDK the TLS listener's test drives (tests/integration/edge_tls.rs).
OPENAI_SDK="openai==3.60.0 httpx==0.29.0"
# The versions `make static-arm64` and `make check-macos` are known to work with.
CARGO_ZIGBUILD=cargo-zigbuild==0.24.0
ZIGLANG=ziglang==0.17.1

is_root() { [ "$(id -u)" = 0 ]; }
have() { command -v "$1" >/dev/null 2>&1; }
export PATH="$HOME/.local/bin:$PATH"

apt_updated=""
apt_install() {
  if ! is_root || ! have apt-get; then
    echo "bootstrap: please install $* (Debian packages)" >&2
    return 1
  fi
  if [ -z "$apt_updated" ]; then
    apt-get update -qq
    apt_updated=yes
  fi
  echo "bootstrap: installing $* with apt-get" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

pip_install() {
  if ! have python3; then
    apt_install python3 python3-pip
  fi
  python3 -m pip install --user --quiet "$@" 2>/dev/null ||
    python3 -m pip install --user --quiet --break-system-packages "$@"
}

rust_target() {
  if have rustup && ! rustup target list --installed | grep -qx "$1"; then
    echo "bootstrap: adding the Rust target $1" >&2
    rustup target add "$1"
  fi
}

need_cmake() {
  if ! have cmake; then
    if is_root && have apt-get; then
      apt_install cmake
    else
      echo "bootstrap: installing cmake with pip --user" >&2
      pip_install cmake
    fi
  fi
  have cmake || {
    echo "bootstrap: cmake is still missing" >&2
    exit 1
  }
}

need_static() {
  have musl-gcc || apt_install musl-tools
  have musl-gcc || {
    echo "bootstrap: musl-gcc is missing (Debian: apt-get install musl-tools)" >&2
    exit 1
  }
  rust_target "$MUSL_TARGET"
}

need_test_tools() {
  need_static
  have openssl || apt_install openssl || true
  if ! have python3; then
    apt_install python3 python3-pip || true
  fi
  if have python3 && ! python3 -c 'import kubernetes_validate' 2>/dev/null; then
    echo "bootstrap: installing $KUBERNETES_VALIDATE with pip --user" >&2
    pip_install "$KUBERNETES_VALIDATE"
  fi
  if have python3 && ! python3 -c 'import openai, httpx' 2>/dev/null; then
    echo "bootstrap: installing $OPENAI_SDK with pip --user" >&2
    # shellcheck disable=SC2086 # two requirement specifiers
    pip_install $OPENAI_SDK
  fi
}

need_zig_tools() {
  if ! have cargo-zigbuild || ! { have zig || python3 -c 'import ziglang' 2>/dev/null; }; then
    echo "bootstrap: installing $CARGO_ZIGBUILD and $ZIGLANG with pip --user" >&2
    pip_install "$CARGO_ZIGBUILD" "$ZIGLANG"
  fi
  have cargo-zigbuild || {
    echo "bootstrap: cargo-zigbuild is still missing" >&2
    exit 1
  }
  # zig itself on PATH: cargo-zigbuild otherwise starts Python (`python3 -m ziglang`) for every
  # compiler call, and a cmake or jemalloc configure makes hundreds of them.
  if ! have zig; then
    mkdir -p "$HOME/.local/bin"
    ln -sf "$(python3 -c 'import ziglang, os; print(os.path.dirname(ziglang.__file__))')/zig" \
      "$HOME/.local/bin/zig"
  fi
}

need_arm64_vm() {
  have qemu-system-aarch64 || apt_install qemu-system-arm
  have cpio || apt_install cpio
  have qemu-system-aarch64 && have cpio || {
    echo "bootstrap: qemu-system-aarch64 or cpio is missing (Debian: qemu-system-arm, cpio)" >&2
    exit 1
  }
  local dir=${ARM64_VM_DIR:-target/arm64-vm}
  [ -f "$dir/vmlinuz" ] && [ -f "$dir/busybox" ] && [ -f "$dir/modules/virtio_net.ko" ] && return
  if ! is_root || ! have apt-get; then
    echo "bootstrap: the arm64 guest needs Debian's arm64 kernel and busybox-static (apt, as root)" >&2
    exit 1
  fi
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
    apt_updated=""
  fi
  [ -n "$apt_updated" ] || { apt-get update -qq; apt_updated=yes; }
  local kernel debs
  kernel=$(apt-cache depends linux-image-arm64:arm64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  debs=$(mktemp -d)
  chmod 755 "$debs"
  echo "bootstrap: downloading $kernel and busybox-static:arm64 into $dir" >&2
  (cd "$debs" && chown _apt "$debs" 2>/dev/null; apt-get download -qq "$kernel" busybox-static:arm64)
  for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$debs/x"; done
  local modules
  modules=$(echo "$debs"/x/lib/modules/*/kernel)
  mkdir -p "$dir/modules"
  cp "$debs"/x/boot/vmlinuz-* "$dir/vmlinuz"
  cp "$debs/x/bin/busybox" "$dir/busybox"
  cp "$modules/net/core/failover.ko" "$modules/drivers/net/net_failover.ko" \
    "$modules/drivers/virtio/virtio_mmio.ko" "$modules/drivers/net/virtio_net.ko" "$dir/modules/"
  rm -rf "$debs"
}

[ $# -gt 0 ] || set -- test
need_cmake
for what in "$@"; do
  case "$what" in
    test) need_test_tools ;;
    static) need_static ;;
    arm64) need_zig_tools && rust_target "$ARM64_TARGET" ;;
    macos) need_zig_tools && for t in $MACOS_TARGETS; do rust_target "$t"; done ;;
    arm64-vm) need_arm64_vm ;;
    *) echo "bootstrap: unknown part '$what' (test, static, arm64, macos, arm64-vm)" >&2; exit 2 ;;
  esac
done
