#!/usr/bin/env bash
# Installs what a fresh machine lacks to build sturnus: cmake (Pingora's zlib-ng dependency
# needs it). Debian's package when root, pip's otherwise. Idempotent.
set -euo pipefail

if ! command -v cmake >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: installing cmake with apt-get" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake >/dev/null
  else
    echo "bootstrap: installing cmake with pip --user" >&2
    python3 -m pip install --user --quiet cmake
  fi
fi
command -v cmake >/dev/null 2>&1 || PATH="$HOME/.local/bin:$PATH" command -v cmake >/dev/null 2>&1 || {
  echo "bootstrap: cmake is still missing" >&2
  exit 1
}
