#!/usr/bin/env bash
# Function binaries: builds the three Lambda functions (trellis-api, trellis-dispatcher,
# trellis-completion) with the size-tuned `lambda-release` profile, then prints each one's
# size and the median of N cold starts (spawn to its first GET /runtime/invocation/next on a
# stand-in Runtime API on loopback; the API stores its bundled fixtures in an emulated
# DynamoDB table first, as at a real cold start). A bench step, not part of scripts/test.sh.
#
#   scripts/bench-lambda.sh [--starts N] [--profile P]    (defaults: 11, lambda-release)
#
# Host build (x86_64-unknown-linux-gnu here; `cargo lambda build --profile lambda-release
# --arm64` makes the deployable arm64 bootstraps with the same profile). The harness,
# trellis-bench-aws, is a dev build: it only spawns processes and times them. Runs inside
# `unshare -n` through scripts/emulators.sh (DynamoDB Local binds *:8000).
set -euo pipefail
cd "$(dirname "$0")/.."

STARTS=11
PROFILE=lambda-release
while [ $# -gt 0 ]; do
    case "$1" in
        --starts) STARTS=$2; shift 2 ;;
        --profile) PROFILE=$2; shift 2 ;;
        *) echo "usage: $0 [--starts N] [--profile P]" >&2; exit 2 ;;
    esac
done

TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
# `--profile release` builds into target/release, `--profile dev` into target/debug.
case "$PROFILE" in
    dev) OUT_DIR="$TARGET_DIR/debug" ;;
    *) OUT_DIR="$TARGET_DIR/$PROFILE" ;;
esac

cargo build --profile "$PROFILE" -p trellis-api -p trellis-dispatcher -p trellis-completion
cargo build -p trellis-bench --bin trellis-bench-aws
echo "bench-lambda: profile $PROFILE, $(uname -m) host build, rustc $(rustc --version | cut -d' ' -f2), load1 $(cut -d' ' -f1 /proc/loadavg)"
unshare -n bash scripts/emulators.sh run -- \
    "$TARGET_DIR/debug/trellis-bench-aws" --cold-starts "$STARTS" --functions "$OUT_DIR"
