#!/usr/bin/env bash
# Runs every test of Trellis: lints, unit tests, the store contract, the router suite, the
# embedded end-to-end suite, the fixture table and the crash-recovery suite.
#
# It installs what the tests need first: the toolchain's clippy and rustfmt, Amazon
# DynamoDB Local and moto (scripts/emulators.sh), AWS SAM CLI and cfn-lint
# (scripts/lint-infra.sh, which validates infra/template.yaml) — all cached in .cache/. The suites then run inside a
# private network namespace (`unshare -n`, loopback only) with the emulator started, so the
# DynamoDB store meets the same contract suite as the SQLite store.
# Set OPENWOP_REFERENCE_DIR to an OpenWOP reference folder (schemas/, fixtures/) to also
# validate against the official schemas; without it those checks say they are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

if command -v rustup >/dev/null 2>&1; then
    rustup component add clippy rustfmt >/dev/null 2>&1 || true
fi

bash scripts/emulators.sh install
bash scripts/lint-infra.sh

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked --no-run

if ! unshare -n true 2>/dev/null; then
    echo "test.sh: 'unshare -n' is not permitted here; the emulator suites need a private network namespace" >&2
    exit 1
fi
unshare -n bash scripts/emulators.sh run -- cargo test --workspace --locked --offline
