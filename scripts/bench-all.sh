#!/usr/bin/env bash
# The performance figures of the embedded host, one benchmark at a time (never two at once):
#   1. throughput, durable data dir: chain-10, chain-50, chain-500
#   2. throughput, --memory: the same
#   3. snapshot reads (1,000 GETs each of a finished chain-10 and chain-500 run), durable
#   4. memory with 1,000 runs parked at an approval gate and 200 SSE streams open, durable
#   5. instructions per step for chain-10 and chain-50 (scripts/bench-instructions.sh)
# Each prints its table; the JSON documents and the machine's `uptime` before each go to
# --out DIR. Host CPU per step/read is the host's own (/proc/<pid>/stat), so it stays
# comparable while other work runs on the machine; wall-clock figures do not.
#
# Usage: scripts/bench-all.sh [--host-bin PATH] [--bench-bin PATH] [--out DIR]
#            [--runs N] [--long-runs N] [--reads N] [--skip-instructions]
set -euo pipefail

host_bin=target/release/trellis
bench_bin=target/release/trellis-bench
out=bench-results
runs=400
long_runs=40
reads=1000
instructions=1
while [ $# -gt 0 ]; do
  case "$1" in
    --host-bin) host_bin=$2; shift 2 ;;
    --bench-bin) bench_bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --long-runs) long_runs=$2; shift 2 ;;
    --reads) reads=$2; shift 2 ;;
    --skip-instructions) instructions=0; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)

step() { # name, then the bench arguments
  local name=$1; shift
  echo "== $name ($(uptime))" | tee -a "$out/load.txt"
  "$bench_bin" --host-bin "$host_bin" --json-out "$out/$name.json" "$@"
  echo
}

chains=(--mode throughput --scenarios chain-10,chain-50,chain-500 --runs "$runs" --long-runs "$long_runs")
step throughput-durable "${chains[@]}"
step throughput-memory "${chains[@]}" --memory
step snapshots --mode snapshots --reads "$reads"
step rss --mode rss
if [ "$instructions" = 1 ]; then
  echo "== instructions ($(uptime))" | tee -a "$out/load.txt"
  bash "$here/bench-instructions.sh" --host-bin "$host_bin" --bench-bin "$bench_bin" | tee "$out/instructions.txt"
fi
echo "results in $out/"
