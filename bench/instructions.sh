#!/usr/bin/env bash
# User-space instructions per request of sturnus and the Pingora pass-through, counted by
# callgrind: a figure that does not move with the load of a shared machine, unlike CPU time.
#
#   bench/instructions.sh [BODY]     # BODY: chat (default), stream or big (bench/bench.py bodies)
#
# Each proxy runs under `valgrind --tool=callgrind` against the mock provider; wrk warms it up,
# its counters are zeroed, wrk runs again and the counters are dumped: instructions in that
# window ÷ requests wrk completed in it. Repeatable to about 1 %. Uses the binaries of the
# `prof` profile (release without LTO, with debug info, so `callgrind_annotate` can name
# functions), built here when missing:
#
#   CARGO_PROFILE_PROF_INHERITS=release CARGO_PROFILE_PROF_LTO=off \
#   CARGO_PROFILE_PROF_CODEGEN_UNITS=16 CARGO_PROFILE_PROF_DEBUG=1 CARGO_PROFILE_PROF_STRIP=false \
#   cargo build --profile prof --bin sturnus --example passthrough --example mock_provider
#
# Environment: INSTR_PROFILE (cargo profile of the binaries, default prof), INSTR_TARGETS
# (default "passthrough sturnus"), INSTR_CONNECTIONS (default 8), INSTR_WARMUP (s, default 4),
# INSTR_SECONDS (s, default 8), INSTR_BUILD=0 (use the binaries as they are),
# INSTR_STURNUS (another sturnus binary to count, e.g. one built at an earlier commit),
# INSTR_CONFIG (sturnus's config template, default bench/sturnus.toml; bench/sturnus-auth.toml
# counts a request with client authentication on), INSTR_PORT (base port, default 19200),
# INSTR_OUT (where the callgrind files are kept, default a scratch directory).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BODY=${1:-chat}
PROFILE=${INSTR_PROFILE:-prof}
TARGETS=${INSTR_TARGETS:-passthrough sturnus}
CONNS=${INSTR_CONNECTIONS:-8}
WARM=${INSTR_WARMUP:-4}
SECS=${INSTR_SECONDS:-8}
BASE=${INSTR_PORT:-19200}
MOCK_PORT=$((BASE + 1))
PROXY_PORT=$((BASE + 3))
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/$PROFILE
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sturnus-instr.XXXXXX")
OUT=${INSTR_OUT:-$WORK}
mkdir -p "$OUT"

log() { printf 'instructions: %s\n' "$*" >&2; }
command -v valgrind >/dev/null || { log "valgrind is missing (apt-get install valgrind)"; exit 1; }
# shellcheck source=bench/proxies.sh
. bench/proxies.sh
[ "$PROFILE" != prof ] || export_prof_profile
[ "${INSTR_BUILD:-1}" = 0 ] ||
  cargo build --quiet --profile "$PROFILE" --bin sturnus --example passthrough --example mock_provider

cleanup() {
  stop_started
  [ "$OUT" = "$WORK" ] || rm -rf "$WORK"
}
trap cleanup EXIT

start_mock "${INSTR_CONFIG:-bench/sturnus.toml}"

for t in $TARGETS; do
  proxy_command "$t" "${INSTR_STURNUS:-$BIN/sturnus}"
  valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.$t.%p" "${cmd[@]}" \
    >"$WORK/$t.log" 2>&1 &
  pid=$!
  PIDS+=($pid)
  wait_port "$PROXY_PORT"
  load "$WARM" "$WORK/wrk.warm"
  callgrind_control -z "$pid" >/dev/null
  load "$SECS" "$WORK/wrk.out"
  callgrind_control -d "$pid" >/dev/null
  sleep 1
  n=$(requests "$WORK/wrk.out")
  # The dump is the newest file of this pid with a part suffix (callgrind.<t>.<pid>.<n>).
  dump=$(ls -t "$OUT/callgrind.$t.$pid".* | head -1)
  ir=$(callgrind_annotate --threshold=100 "$dump" 2>/dev/null |
    awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
  printf '%s body=%s config=%s requests=%s instructions=%s per_request=%s dump=%s\n' "$t" "$BODY" \
    "$(basename "${INSTR_CONFIG:-bench/sturnus.toml}")" "$n" "$ir" \
    "$(awk -v i="$ir" -v n="$n" 'BEGIN { printf "%.0f", i / n }')" "$dump"
  stop_proxy "$pid"
done
