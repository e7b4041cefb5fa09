#!/usr/bin/env bash
# Installs what a fresh machine lacks to build and test sturnus. Idempotent.
#  - cmake: Pingora's zlib-ng dependency needs it (Debian's package when root, else pip's);
#  - the openssl command: the Vertex AI tests mint throwaway RSA keys with it;
#  - musl-tools and the x86_64-unknown-linux-musl Rust target: the test suite is built for it,
#    so the binary under test is the static one the Dockerfile ships;
#  - kubernetes-validate (PyPI): validates examples/kubernetes/ against the 1.33 schemas offline.
set -euo pipefail

MUSL_TARGET=x86_64-unknown-linux-musl
KUBERNETES_VALIDATE=kubernetes-validate==1.37.0

is_root() { [ "$(id -u)" = 0 ]; }
have() { command -v "$1" >/dev/null 2>&1; }

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
  python3 -m pip install --user --quiet "$@" 2>/dev/null ||
    python3 -m pip install --user --quiet --break-system-packages "$@"
}

have openssl || apt_install openssl || true

if ! have cmake; then
  if is_root && have apt-get; then
    apt_install cmake
  else
    echo "bootstrap: installing cmake with pip --user" >&2
    pip_install cmake
  fi
fi
have cmake || PATH="$HOME/.local/bin:$PATH" have cmake || {
  echo "bootstrap: cmake is still missing" >&2
  exit 1
}

have musl-gcc || apt_install musl-tools
have musl-gcc || {
  echo "bootstrap: musl-gcc is missing (Debian: apt-get install musl-tools)" >&2
  exit 1
}
if have rustup && ! rustup target list --installed | grep -qx "$MUSL_TARGET"; then
  echo "bootstrap: adding the Rust target $MUSL_TARGET" >&2
  rustup target add "$MUSL_TARGET"
fi

if ! have python3; then
  apt_install python3 python3-pip || true
fi
if have python3 && ! python3 -c 'import kubernetes_validate' 2>/dev/null; then
  echo "bootstrap: installing $KUBERNETES_VALIDATE with pip --user" >&2
  pip_install "$KUBERNETES_VALIDATE"
fi
