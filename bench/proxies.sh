# Shared by bench/instructions.sh and bench/syscalls.sh (sourced, not run): the `prof` build
# profile, starting the mock provider with sturnus's config, waiting for ports, counting wrk's
# requests and stopping what was started. The sourcing script sets ROOT, WORK, BIN, MOCK_PORT,
# PROXY_PORT, BODY, CONNS and defines `log`.

# Exports the `prof` profile: release without LTO, with debug info, so profilers name functions.
export_prof_profile() {
  export CARGO_PROFILE_PROF_INHERITS=release CARGO_PROFILE_PROF_LTO=off \
    CARGO_PROFILE_PROF_CODEGEN_UNITS=16 CARGO_PROFILE_PROF_DEBUG=1 CARGO_PROFILE_PROF_STRIP=false
}

PIDS=()

# Interrupts every process in PIDS, then kills what is still running 5 s later.
stop_started() {
  local p
  for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
}

# Interrupts one proxy and waits up to 10 s for it to exit.
stop_proxy() {
  kill -INT "$1" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
}

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
  for _ in $(seq 300); do listening "$1" && return 0; sleep 0.1; done
  log "nothing listens on port $1"
  exit 1
}

# Sets the array `cmd` to the command line of proxy target $1 (`sturnus`, run as binary $2, or
# `passthrough`), listening on PROXY_PORT in front of the mock provider.
proxy_command() {
  case $1 in
    sturnus) cmd=("$2" --config "$WORK/sturnus.toml") ;;
    passthrough) cmd=("$BIN/examples/passthrough" --listen "127.0.0.1:$PROXY_PORT" --upstream "127.0.0.1:$MOCK_PORT") ;;
    *) log "unknown target $1"; exit 1 ;;
  esac
}

# Runs wrk for $1 seconds over CONNS connections with the request body BODY against the proxy,
# its output in $2.
load() {
  BENCH_BODY="$WORK/bodies/$BODY.json" wrk -t1 -c"$CONNS" -d"$1s" --timeout 30s \
    -s bench/wrk.lua "http://127.0.0.1:$PROXY_PORT/v1/chat/completions" >"$2" 2>&1
}

# wrk output file -> completed requests.
requests() {
  sed -n 's/^BENCH_JSON {"requests":\([0-9]*\),.*/\1/p' "$1"
}

# Writes the request bodies, starts the mock provider and writes $WORK/sturnus.toml from the
# config template $1 (bench/sturnus.toml or bench/sturnus-auth.toml).
start_mock() {
  python3 bench/bench.py bodies "$WORK/bodies"
  "$BIN/examples/mock_provider" --port "$MOCK_PORT" --chunks 20 >"$WORK/mock.log" 2>&1 &
  PIDS+=($!)
  wait_port "$MOCK_PORT"
  sed -e "s#@LISTEN@#127.0.0.1:$PROXY_PORT#g" -e "s#@UPSTREAM@#127.0.0.1:$MOCK_PORT#g" \
    "$1" >"$WORK/sturnus.toml"
}
