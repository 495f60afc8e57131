#!/usr/bin/env bash
# Instructions the host executes per step, for chain-10 and chain-50 `core.noop` runs driven
# by trellis-bench (closed loop: create -> long-poll to terminal). An instruction count does
# not move with the machine's load, so it compares before/after on a busy 2-core box.
#
# Counts with `perf stat -e instructions -p <host pid>` where the machine has a hardware
# counter (`perf stat -e instructions true` counts), else runs the host under
# `valgrind --tool=callgrind --instr-atstart=no` and switches instrumentation on only for the
# measured window (callgrind_control -i on/off, then --dump). Only the host process this
# script starts is measured and stopped.
#
# Usage: scripts/bench-instructions.sh [--host-bin PATH] [--bench-bin PATH] [--memory]
#            [--runs10 N] [--runs50 N] [--clients N] [--tool perf|callgrind] [--annotate] [--keep]
# Build first (symbols only matter for --annotate):
#   CARGO_PROFILE_RELEASE_STRIP=false cargo build --release -p trellis
#   cargo build --release -p trellis-bench
set -euo pipefail

host_bin=target/release/trellis
bench_bin=target/release/trellis-bench
memory=0
runs10=100
runs50=40
clients=4
tool=""
annotate=0
keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --host-bin) host_bin=$2; shift 2 ;;
    --bench-bin) bench_bin=$2; shift 2 ;;
    --memory) memory=1; shift ;;
    --runs10) runs10=$2; shift 2 ;;
    --runs50) runs50=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --tool) tool=$2; shift 2 ;;
    --annotate) annotate=1; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

for bin in "$host_bin" "$bench_bin"; do
  [ -x "$bin" ] || { echo "missing $bin (build it first, see --help)" >&2; exit 2; }
done

if [ -z "$tool" ]; then
  if perf stat -x, -e instructions true 2>&1 >/dev/null | grep -Eq '^[0-9]+,'; then
    tool=perf
  elif command -v valgrind >/dev/null && command -v callgrind_control >/dev/null; then
    tool=callgrind
  else
    echo "neither a working 'perf stat -e instructions' nor valgrind/callgrind_control" >&2; exit 2
  fi
fi

work=$(mktemp -d /tmp/trellis-instr.XXXXXX)
host_pid=""
cleanup() {
  if [ -n "$host_pid" ] && kill -0 "$host_pid" 2>/dev/null; then
    kill "$host_pid" 2>/dev/null || true
    wait "$host_pid" 2>/dev/null || true
  fi
  [ "$keep" = 1 ] && echo "kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT

"$bench_bin" --write-workflows "$work/workflows"
store_args=(--data-dir "$work/data")
store=durable
if [ "$memory" = 1 ]; then store_args=(--memory); store=memory; fi
serve=("$host_bin" serve --bind 127.0.0.1:0 --workflows "$work/workflows" "${store_args[@]}")
export TRELLIS_API_KEY=bench-key OPENWOP_TEST_SEAM_ENABLED=true RUST_LOG=warn
unset TRELLIS_DATA_DIR TRELLIS_MEMORY TRELLIS_WORKFLOWS

if [ "$tool" = callgrind ]; then
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/callgrind.out" \
    "${serve[@]}" >"$work/host.out" 2>"$work/host.err" &
else
  "${serve[@]}" >"$work/host.out" 2>"$work/host.err" &
fi
host_pid=$!

base=""
for _ in $(seq 1 1200); do
  base=$(grep -Eo 'http://127\.0\.0\.1:[0-9]+' "$work/host.out" | head -1 || true)
  [ -n "$base" ] && break
  kill -0 "$host_pid" 2>/dev/null || { cat "$work/host.err" >&2; echo "host exited" >&2; exit 2; }
  sleep 0.1
done
[ -n "$base" ] || { echo "host printed no address" >&2; exit 2; }

drive() { # scenario runs -> bench JSON on stdout
  "$bench_bin" --attach "$base" --host-pid "$host_pid" --scenarios "$1" --runs "$2" --clients "$clients" \
    --warmup 0 --json
}

dumps=0
echo "host: $host_bin ($store), tool: $tool, $clients clients, load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-10s %6s %8s %16s %14s %10s\n' scenario runs steps instructions instr/step host-µs/step
for pair in "chain-10:$runs10" "chain-50:$runs50"; do
  scenario=${pair%%:*}
  runs=${pair##*:}
  # Warm-up, not counted: the first runs of a workflow pin it and fill caches.
  drive "$scenario" "$clients" >/dev/null
  if [ "$tool" = callgrind ]; then
    callgrind_control -i on "$host_pid" >/dev/null 2>&1
    drive "$scenario" "$runs" >"$work/$scenario.json"
    callgrind_control -i off "$host_pid" >/dev/null 2>&1
    callgrind_control --dump="$scenario" "$host_pid" >/dev/null 2>&1
    dumps=$((dumps + 1))
    dump="$work/callgrind.out.$dumps"
    for _ in $(seq 1 100); do [ -s "$dump" ] && grep -q '^totals:' "$dump" && break; sleep 0.1; done
    instructions=$(awk '/^totals:/ {print $2}' "$dump")
  else
    perf stat -x, -e instructions -o "$work/$scenario.perf" -p "$host_pid" &
    perf_pid=$!
    sleep 0.3
    drive "$scenario" "$runs" >"$work/$scenario.json"
    kill -INT "$perf_pid"
    wait "$perf_pid" || true
    instructions=$(awk -F, '$3 ~ /instructions/ {print $1}' "$work/$scenario.perf")
  fi
  steps=$(jq '.throughput.figures[0].steps' "$work/$scenario.json")
  host_us=$(jq '.throughput.figures[0].hostCpuUsPerStep' "$work/$scenario.json")
  per_step=$(awk -v i="$instructions" -v s="$steps" 'BEGIN { if (s > 0) printf "%.0f", i / s; else print "n/a" }')
  printf '%-10s %6s %8s %16s %14s %10s\n' "$scenario" "$runs" "$steps" "$instructions" "$per_step" "$host_us"
  if [ "$tool" = callgrind ] && [ "$annotate" = 1 ]; then
    callgrind_annotate "$dump" 2>/dev/null | sed -n '1,40p'
  fi
done
if [ "$tool" = callgrind ]; then
  echo "(host µs/step was measured under callgrind: only the instruction counts mean anything here)"
fi
