#!/usr/bin/env bash
# The proxy benchmark: sturnus against a direct connection, a minimal Pingora pass-through
# (examples/passthrough.rs) and nginx, side by side in one run, all on 127.0.0.1; sturnus also
# with client authentication on (bench/sturnus-auth.toml), and sturnus and the pass-through on
# 2 worker threads (Pingora's `threads: 2`, given to sturnus with `-c`) in the non-streaming run.
#
#   bench/run.sh            # results in bench/results/latest.{md,json}
#
# Builds the release binary and the examples once, installs wrk and nginx (Debian packages)
# when missing and running as root, starts the mock provider (examples/mock_provider.rs) and
# the three proxies, pins the load tool and the mock to one core and the proxies to the other,
# runs every scenario against every target (each bounded to a few seconds after warm-up),
# reads CPU time and memory of each proxy from /proc, and writes a markdown table and JSON.
# Then it measures memory per idle client: each proxy is restarted, warmed up, and
# BENCH_IDLE_CLIENTS keep-alive clients (bench/idle.py) each send one request and stay
# connected while the proxy's resident memory is read. Everything it starts is stopped on exit.
#
# The machine may be shared: every scenario runs BENCH_ROUNDS times (default 5), targets
# interleaved with the pass-through and sturnus back to back, and the summary takes the median
# of each figure over the rounds; the targets are judged on the median of the per-round ratios,
# time to first chunk on the p99 of every round's requests together.
# The busy time other processes took on the proxy core is reported next to each run.
#
# Environment: BENCH_SECONDS (measured seconds per run, default 4), BENCH_WARMUP (default 1),
# BENCH_IDLE_CLIENTS (default 10000; 0 skips that part), BENCH_PORT (base port, default 19100:
# uses +1..+8), BENCH_OUT (default bench/results), BENCH_KEEP=1 keeps the scratch directory
# with logs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export PATH="$HOME/.cargo/bin:$HOME/.local/bin:$PATH"

SECS=${BENCH_SECONDS:-4}
ROUNDS=${BENCH_ROUNDS:-5}
WARM=${BENCH_WARMUP:-1}
OUT=${BENCH_OUT:-$ROOT/bench/results}
BASE=${BENCH_PORT:-19100}
IDLE_CLIENTS=${BENCH_IDLE_CLIENTS:-10000}
WRK_VERSION=4.1.0-3+b2 # Debian 12's wrk; pinned so runs stay comparable
MOCK_PORT=$((BASE + 1))
CONTROL_PORT=$((BASE + 2))
declare -A PORT=([direct]=$MOCK_PORT [passthrough]=$((BASE + 3)) [nginx]=$((BASE + 4))
  [sturnus]=$((BASE + 5)) [sturnus-auth]=$((BASE + 6)) [passthrough-2t]=$((BASE + 7))
  [sturnus-2t]=$((BASE + 8)))
TARGETS=(direct passthrough nginx sturnus sturnus-auth passthrough-2t sturnus-2t)
PROXIES=(passthrough nginx sturnus sturnus-auth passthrough-2t sturnus-2t)
# The proxies whose memory per idle client is measured.
IDLE_TARGETS=(passthrough nginx sturnus sturnus-auth)
CLIENT_CORE=0
PROXY_CORE=1
# The TTFC client starts its connections this far apart (ms), about one request period
# (200 ms + 5 × 50 ms) over 16 connections, so first chunks do not all arrive at once.
TTFC_STAGGER_MS=31

log() { printf 'bench: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# Every idle client is a socket in the client and one in the proxy (plus the proxy's provider
# connections and files): raise the open-file limit, which the processes started here inherit.
NOFILE=$((IDLE_CLIENTS + 4096))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$NOFILE" ]; then
  ulimit -n "$NOFILE" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
  [ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge "$NOFILE" ] ||
    die "open-file limit $(ulimit -n) is below $NOFILE for $IDLE_CLIENTS idle clients (raise ulimit -n, or set BENCH_IDLE_CLIENTS)"
fi

# ---------------------------------------------------------------- tools
install_tools() {
  local missing=()
  command -v wrk >/dev/null 2>&1 || missing+=(wrk)
  [ -x /usr/sbin/nginx ] || command -v nginx >/dev/null 2>&1 || missing+=(nginx)
  command -v python3 >/dev/null 2>&1 || missing+=(python3)
  command -v taskset >/dev/null 2>&1 || missing+=(util-linux)
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 ||
    die "missing ${missing[*]}: install them (Debian: apt-get install ${missing[*]})"
  log "installing ${missing[*]} with apt-get"
  apt-get update -qq
  # Keep Debian's nginx package from starting a system nginx on port 80 while installing.
  local policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && policy=1
  fi
  local pkgs=()
  for p in "${missing[@]}"; do
    if [ "$p" = wrk ]; then pkgs+=("wrk=$WRK_VERSION"); else pkgs+=("$p"); fi
  done
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ $policy = 1 ] && rm -f /usr/sbin/policy-rc.d
  return 0
}

install_tools
scripts/bootstrap.sh
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
CORES=$(nproc)
# Commands run through these prefixes (taskset execs the program, so $! is its pid).
if [ "$CORES" -lt 2 ]; then
  log "only $CORES core: running without pinning"
  ON_CLIENT=(env)
  ON_PROXY=(env)
else
  ON_CLIENT=(taskset -c "$CLIENT_CORE")
  ON_PROXY=(taskset -c "$PROXY_CORE")
fi

# ---------------------------------------------------------------- build (once)
log "building the release binary and the benchmark examples"
cargo build --release --quiet --bin sturnus \
  --example mock_provider --example passthrough --example ttfc_client
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
EX=$BIN/examples

# ---------------------------------------------------------------- scratch and cleanup
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sturnus-bench.XXXXXX")
chmod 755 "$WORK" # nginx workers may run as another user
declare -A PID=()
MOCK_PID=
IDLE_PID=
cleanup() {
  local p
  # SIGINT: fast shutdown for Pingora (SIGTERM would wait out its grace period), nginx and the mock.
  [ -n "$IDLE_PID" ] && kill -TERM "$IDLE_PID" 2>/dev/null
  for p in "${PID[@]}" $MOCK_PID; do
    kill -INT "$p" 2>/dev/null || true
  done
  for p in "${PID[@]}" $MOCK_PID; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  if [ "${BENCH_KEEP:-0}" = 1 ]; then log "scratch kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

python3 bench/bench.py bodies "$WORK/bodies"
RAW=$WORK/raw.jsonl
: >"$RAW"
loadavg() { printf '{"kind":"loadavg","when":"%s","value":"%s"}\n' "$1" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW"; }

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() { # port pid: wait until the process we started listens there
  local port=$1 pid=$2
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || die "process $pid for port $port exited; logs in $WORK"
    listening "$port" && return 0
    sleep 0.1
  done
  die "nothing listens on port $port; logs in $WORK"
}
for port in "$MOCK_PORT" "$CONTROL_PORT" $(for t in "${PROXIES[@]}"; do echo "${PORT[$t]}"; done); do
  listening "$port" && die "port $port is already in use (set BENCH_PORT to another base port)"
done

mock_control() { # key=value ... -> the mock's live behaviour
  local answer
  exec 3<>"/dev/tcp/127.0.0.1/$CONTROL_PORT"
  printf '%s\n' "$*" >&3
  read -r answer <&3 || true
  exec 3>&-
  case "$answer" in ok*) ;; *) die "mock control: $answer" ;; esac
}

# ---------------------------------------------------------------- start everything
log "starting the mock provider on core $CLIENT_CORE and the proxies on core $PROXY_CORE"
"${ON_CLIENT[@]}" "$EX/mock_provider" --port "$MOCK_PORT" --control-port "$CONTROL_PORT" \
  --chunks 20 >"$WORK/mock.log" 2>&1 &
MOCK_PID=$!
wait_port "$MOCK_PORT" "$MOCK_PID"

sed -e "s#@DIR@#$WORK#g" -e "s#@LISTEN@#127.0.0.1:${PORT[nginx]}#g" \
  -e "s#@UPSTREAM@#127.0.0.1:$MOCK_PORT#g" -e "s#@CONNECTIONS@#$((IDLE_CLIENTS + 1024))#g" \
  -e "s#@NOFILE@#$NOFILE#g" bench/nginx.conf >"$WORK/nginx.conf"
sed -e "s#@LISTEN@#127.0.0.1:${PORT[sturnus]}#g" -e "s#@UPSTREAM@#127.0.0.1:$MOCK_PORT#g" \
  bench/sturnus.toml >"$WORK/sturnus.toml"
sed -e "s#@LISTEN@#127.0.0.1:${PORT[sturnus-2t]}#g" -e "s#@UPSTREAM@#127.0.0.1:$MOCK_PORT#g" \
  bench/sturnus.toml >"$WORK/sturnus-2t.toml"
sed -e "s#@LISTEN@#127.0.0.1:${PORT[sturnus-auth]}#g" -e "s#@UPSTREAM@#127.0.0.1:$MOCK_PORT#g" \
  bench/sturnus-auth.toml >"$WORK/sturnus-auth.toml"
# Each sturnus gets the shipped Pingora server config (conf/pingora.yaml) with its thread count
# and an upgrade socket of its own.
for t in sturnus sturnus-auth sturnus-2t; do
  threads=1
  [ "$t" = sturnus-2t ] && threads=2
  sed -e "s#^threads: .*#threads: $threads#" -e "s#^upgrade_sock: .*#upgrade_sock: $WORK/$t.upgrade.sock#" \
    -e "s#^pid_file: .*#pid_file: $WORK/$t.pid#" conf/pingora.yaml >"$WORK/$t.pingora.yaml"
done

start_proxy() { # target: start it on the proxy core, PID[target] its pid
  local t=$1
  case $t in
    passthrough | passthrough-2t)
      local threads=1
      [ "$t" = passthrough-2t ] && threads=2
      "${ON_PROXY[@]}" "$EX/passthrough" --listen "127.0.0.1:${PORT[$t]}" \
        --upstream "127.0.0.1:$MOCK_PORT" --threads "$threads" >>"$WORK/$t.log" 2>&1 &
      ;;
    nginx) "${ON_PROXY[@]}" "$NGINX" -c "$WORK/nginx.conf" -p "$WORK" >>"$WORK/nginx.log" 2>&1 & ;;
    sturnus*)
      "${ON_PROXY[@]}" "$BIN/sturnus" --config "$WORK/$t.toml" -c "$WORK/$t.pingora.yaml" \
        >>"$WORK/$t.log" 2>&1 &
      ;;
  esac
  PID[$t]=$!
}
stop_pid() { # pid: SIGINT (a fast shutdown for Pingora, nginx and the mock), SIGKILL after 5 s
  kill -INT "$1" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
}

for t in "${PROXIES[@]}"; do start_proxy "$t"; done
for t in "${PROXIES[@]}"; do wait_port "${PORT[$t]}" "${PID[$t]}"; done

# Process ids whose CPU time and memory count for a target (nginx: master and workers).
pids_of() {
  local t=$1
  case $t in
    direct) echo "$MOCK_PID" ;;
    nginx) echo "${PID[nginx]}" $(cat "/proc/${PID[nginx]}/task/${PID[nginx]}/children" 2>/dev/null) ;;
    *) echo "${PID[$t]}" ;;
  esac
}
ticks() { # utime + stime of the given pids, in clock ticks
  local sum=0 p f
  for p in "$@"; do
    # Fields after "pid (comm) ": state is [0], utime [11], stime [12].
    read -ra f <<<"$(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null)" || continue
    [ ${#f[@]} -gt 12 ] && sum=$((sum + f[11] + f[12]))
  done
  echo $sum
}
core_busy() { # busy ticks of one core (user nice system irq softirq steal) from /proc/stat
  awk -v c="cpu$1" '$1 == c { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat
}
status_kb() { # sum of a /proc status field (VmRSS, VmHWM) over the given pids
  local field=$1 sum=0 p v
  shift
  for p in "$@"; do
    v=$(awk -v f="$field:" '$1 == f { print $2 }' "/proc/$p/status" 2>/dev/null || true)
    sum=$((sum + ${v:-0}))
  done
  echo $sum
}
memory() { # kind=memory record for every proxy
  local when=$1 t
  for t in "${PROXIES[@]}"; do
    local pids
    pids=$(pids_of "$t")
    printf '{"kind":"memory","target":"%s","when":"%s","rss_kb":%s,"hwm_kb":%s}\n' \
      "$t" "$when" "$(status_kb VmRSS $pids)" "$(status_kb VmHWM $pids)" >>"$RAW"
  done
}

sleep 1
memory idle
loadavg start

# ---------------------------------------------------------------- scenarios
# name|description|body|concurrency|tool|targets (all: every one; else direct, nginx, the
# pass-through and sturnus on one thread without auth)
SCENARIOS=(
  "chat|non-streaming chat completion, ~1 KB body, 64 connections|chat.json|64|wrk|all"
  "stream|streaming chat completion, 20 chunks, 64 connections|stream.json|64|wrk|base"
  "big|256 KiB request bodies, non-streaming, 16 connections|big.json|16|wrk|base"
  "latency|non-streaming chat completion, 1 connection (latency without queueing)|chat.json|1|wrk|base"
  "ttfc|streaming, provider waits 200 ms before the first chunk and 50 ms between 5 chunks, 16 connections started ${TTFC_STAGGER_MS} ms apart (client-measured time to first chunk)|stream.json|16|ttfc|base"
)

run_load() { # tool target body concurrency seconds -> one JSON object on stdout
  local tool=$1 t=$2 body=$3 c=$4 secs=$5 url="http://127.0.0.1:${PORT[$2]}/v1/chat/completions"
  if [ "$tool" = wrk ]; then
    BENCH_BODY="$WORK/bodies/$body" "${ON_CLIENT[@]}" wrk -t1 -c"$c" -d"${secs}s" --timeout 10s \
      -s bench/wrk.lua "$url" >"$WORK/wrk.out" 2>&1 || die "wrk failed: $(cat "$WORK/wrk.out")"
    grep '^BENCH_JSON ' "$WORK/wrk.out" | sed 's/^BENCH_JSON //'
  else
    "${ON_CLIENT[@]}" "$EX/ttfc_client" --addr "127.0.0.1:${PORT[$t]}" \
      --body-file "$WORK/bodies/$body" -c "$c" --seconds "$secs" --warmup-secs 0 \
      --stagger-ms "$TTFC_STAGGER_MS"
  fi
}

scrape() { # sturnus's /metrics into a file
  curl -fsS --max-time 5 -o "$1" "http://127.0.0.1:${PORT[sturnus]}/metrics" || die "cannot scrape sturnus's /metrics"
}

scenario_json='['
for spec in "${SCENARIOS[@]}"; do
  IFS='|' read -r name desc body conc tool targets <<<"$spec"
  scenario_json+="{\"name\":\"$name\",\"description\":\"$desc\",\"concurrency\":$conc},"
done
for spec in "${SCENARIOS[@]}"; do
  IFS='|' read -r name desc body conc tool targets <<<"$spec"
  if [ "$name" = ttfc ]; then
    mock_control latency_ms=200 chunk_interval_ms=50 chunks=5
  fi
  for round in $(seq "$ROUNDS"); do
    # The pass-through and sturnus (and sturnus with auth on, and the two on 2 threads) run
    # back to back, in alternating order, so each round's ratio compares them under the same
    # conditions of the shared machine.
    if [ "$targets" = all ]; then
      if ((round % 2)); then
        order=(direct nginx passthrough sturnus sturnus-auth passthrough-2t sturnus-2t)
      else
        order=(direct nginx sturnus-auth sturnus passthrough sturnus-2t passthrough-2t)
      fi
    elif ((round % 2)); then order=(direct nginx passthrough sturnus); else order=(direct nginx sturnus passthrough); fi
    for t in "${order[@]}"; do
      log "$name round $round/$ROUNDS -> $t (c=$conc)"
      run_load "$tool" "$t" "$body" "$conc" "$WARM" >/dev/null
      # sturnus's own account of its overhead (sturnus_overhead_seconds) over the measured run,
      # scraped outside the CPU-time window.
      if [ "$t" = sturnus ]; then scrape "$WORK/metrics.before"; fi
      pids=$(pids_of "$t")
      before=$(ticks $pids)
      mock_before=$(ticks "$MOCK_PID")
      core_before=$(core_busy $PROXY_CORE)
      start_ns=$(date +%s%N)
      result=$(run_load "$tool" "$t" "$body" "$conc" "$SECS")
      end_ns=$(date +%s%N)
      after=$(ticks $pids)
      mock_after=$(ticks "$MOCK_PID")
      core_after=$(core_busy $PROXY_CORE)
      wall=$(awk -v a="$start_ns" -v b="$end_ns" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
      overhead=null
      if [ "$t" = sturnus ]; then
        scrape "$WORK/metrics.after"
        overhead=$(python3 bench/overhead.py --json "$WORK/metrics.before" "$WORK/metrics.after")
      fi
      printf '{"kind":"run","scenario":"%s","round":%s,"target":"%s","wall_s":%s,"proxy_ticks":%s,"mock_ticks":%s,"proxy_core_ticks":%s,"load":%s,"overhead":%s}\n' \
        "$name" "$round" "$t" "$wall" "$((after - before))" "$((mock_after - mock_before))" \
        "$((core_after - core_before))" "$result" "$overhead" >>"$RAW"
    done
  done
done
scenario_json="${scenario_json%,}]"

loadavg end
memory end

# ---------------------------------------------------------------- idle keep-alive clients
# Each proxy is restarted (so what the scenarios left in its allocator does not absorb the
# clients), warmed up with one wrk second at 64 connections, and its resident memory read before
# and while IDLE_CLIENTS clients, each after one request, stay connected.
idle_clients() { # target -> kind=idle record
  local t=$1 ready=$WORK/idle.ready auth=
  stop_pid "${PID[$t]}"
  start_proxy "$t"
  wait_port "${PORT[$t]}" "${PID[$t]}"
  run_load wrk "$t" chat.json 64 1 >/dev/null
  sleep 1
  local pids before
  pids=$(pids_of "$t")
  before=$(status_kb VmRSS $pids)
  rm -f "$ready"
  [ "$t" = sturnus-auth ] && auth=bench
  "${ON_CLIENT[@]}" python3 bench/idle.py --port "${PORT[$t]}" --body "$WORK/bodies/chat.json" \
    --clients "$IDLE_CLIENTS" --ready "$ready" --auth "$auth" >"$WORK/idle.$t.log" 2>&1 &
  IDLE_PID=$!
  for _ in $(seq 1200); do
    [ -s "$ready" ] && break
    kill -0 "$IDLE_PID" 2>/dev/null || die "idle clients for $t exited: $(cat "$WORK/idle.$t.log")"
    sleep 0.1
  done
  [ -s "$ready" ] || die "idle clients for $t not ready after 120 s"
  sleep 2 # let the proxy settle: every answer written, every request's state dropped
  pids=$(pids_of "$t")
  local after hwm
  after=$(status_kb VmRSS $pids)
  hwm=$(status_kb VmHWM $pids)
  kill -TERM "$IDLE_PID" 2>/dev/null || true
  wait "$IDLE_PID" 2>/dev/null || true
  IDLE_PID=
  printf '{"kind":"idle","target":"%s","rss_before_kb":%s,"rss_after_kb":%s,"hwm_kb":%s,"held":%s}\n' \
    "$t" "$before" "$after" "$hwm" "$(cat "$ready")" >>"$RAW"
  log "idle clients on $t: $(cat "$ready"), RSS $before KiB -> $after KiB"
}
if [ "$IDLE_CLIENTS" -gt 0 ]; then
  for t in "${IDLE_TARGETS[@]}"; do
    log "idle keep-alive clients: $IDLE_CLIENTS on $t"
    idle_clients "$t"
  done
fi

# ---------------------------------------------------------------- machine and summary
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- src examples 2>/dev/null || commit="$commit+changes"
printf '{"kind":"machine","date":"%s","nproc":%s,"cpu":"%s","kernel":"%s","clk_tck":%s,"load_tool":"%s","nginx":"%s","commit":"%s","client_core":%s,"proxy_core":%s,"seconds":%s,"warmup":%s,"rounds":%s,"idle_clients":%s,"scenarios":%s}\n' \
  "$(date -u +%Y-%m-%dT%H:%MZ)" "$CORES" \
  "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" "$(uname -r)" "$(getconf CLK_TCK)" \
  "$(wrk -v 2>&1 | head -1 | awk '{ print $1, $2 }')" "$("$NGINX" -v 2>&1 | sed 's#.*nginx/##')" \
  "$commit" $CLIENT_CORE $PROXY_CORE "$SECS" "$WARM" "$ROUNDS" "$IDLE_CLIENTS" "$scenario_json" >>"$RAW"

mkdir -p "$OUT"
cp "$RAW" "$OUT/latest.raw.jsonl"
python3 bench/bench.py summarise "$RAW" "$OUT"
log "results in $OUT/latest.md and $OUT/latest.json"
