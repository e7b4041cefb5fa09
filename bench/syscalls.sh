#!/usr/bin/env bash
# System calls per request of sturnus and the Pingora pass-through, counted by `strace -c`
# attached to every thread of the proxy (`-f -p`): kernel work that callgrind's counts do not see.
#
#   bench/syscalls.sh [BODY]     # BODY: chat (default), stream or big (bench/bench.py bodies)
#
# Each proxy runs against the mock provider; wrk warms it up, then strace attaches to all its
# threads while wrk runs again; each system call's count ÷ requests wrk completed in that
# window is printed (calls below 0.01 per request are left out). strace slows the proxy, so
# only the counts per request mean anything, not the rate. Uses the same binaries as
# bench/instructions.sh (the `prof` profile, built when missing).
#
# Environment: SYSCALLS_PROFILE (cargo profile of the binaries, default prof), SYSCALLS_TARGETS
# (default "passthrough sturnus"), SYSCALLS_CONNECTIONS (default 64), SYSCALLS_WARMUP (s,
# default 2), SYSCALLS_SECONDS (s, default 5), SYSCALLS_BUILD=0 (use the binaries as they are),
# SYSCALLS_STURNUS (another sturnus binary to count), SYSCALLS_CONFIG (sturnus's config template, default bench/sturnus.toml),
# SYSCALLS_PORT (base port, default 19300).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BODY=${1:-chat}
PROFILE=${SYSCALLS_PROFILE:-prof}
TARGETS=${SYSCALLS_TARGETS:-passthrough sturnus}
CONNS=${SYSCALLS_CONNECTIONS:-64}
WARM=${SYSCALLS_WARMUP:-2}
SECS=${SYSCALLS_SECONDS:-5}
BASE=${SYSCALLS_PORT:-19300}
MOCK_PORT=$((BASE + 1))
PROXY_PORT=$((BASE + 3))
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/$PROFILE
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sturnus-syscalls.XXXXXX")

log() { printf 'syscalls: %s\n' "$*" >&2; }
command -v strace >/dev/null || { log "strace is missing (apt-get install strace)"; exit 1; }
# shellcheck source=bench/proxies.sh
. bench/proxies.sh
[ "$PROFILE" != prof ] || export_prof_profile
[ "${SYSCALLS_BUILD:-1}" = 0 ] ||
  cargo build --quiet --profile "$PROFILE" --bin sturnus --example passthrough --example mock_provider

cleanup() {
  stop_started
  rm -rf "$WORK"
}
trap cleanup EXIT

start_mock "${SYSCALLS_CONFIG:-bench/sturnus.toml}"

for t in $TARGETS; do
  proxy_command "$t" "${SYSCALLS_STURNUS:-$BIN/sturnus}"
  "${cmd[@]}" >"$WORK/$t.log" 2>&1 &
  pid=$!
  PIDS+=($pid)
  wait_port "$PROXY_PORT"
  load "$WARM" "$WORK/wrk.warm"
  strace -q -c -f -o "$WORK/strace.$t" -p "$pid" &
  spid=$!
  sleep 1
  load "$SECS" "$WORK/wrk.out"
  kill -INT "$spid"
  wait "$spid" 2>/dev/null || true
  n=$(requests "$WORK/wrk.out")
  printf '%s body=%s config=%s requests=%s per_request:' "$t" "$BODY" \
    "$(basename "${SYSCALLS_CONFIG:-bench/sturnus.toml}")" "$n"
  # strace -c: "% time seconds usecs/call calls errors syscall"; the errors column may be empty.
  awk -v n="$n" '$1 ~ /^[0-9.]+$/ && NF >= 5 {
      calls = $4; name = $NF; per = calls / n
      if (per >= 0.01) printf " %s=%.2f", name, per
    }' "$WORK/strace.$t"
  printf '\n'
  stop_proxy "$pid"
done
