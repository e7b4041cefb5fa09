#!/usr/bin/env bash
# Installs what a fresh machine lacks to build and test sturnus: cmake (Pingora's zlib-ng
# dependency needs it) and, for the Vertex AI tests that mint throwaway RSA keys, the openssl
# command. Debian's packages when root, pip's cmake otherwise. Idempotent.
set -euo pipefail

if ! command -v openssl >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "bootstrap: installing openssl with apt-get" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
fi

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
