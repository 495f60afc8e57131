#!/usr/bin/env bash
# Runs every test of Trellis: lints, unit tests, the store contract, the router suite, the
# embedded end-to-end suite, the fixture table and the crash-recovery suite.
#
# It installs what the tests need first. Today that is only the Rust toolchain's own
# components (clippy, rustfmt); the AWS-emulator suites will add their installs here.
# Set OPENWOP_REFERENCE_DIR to an OpenWOP reference folder (schemas/, fixtures/) to also
# validate against the official schemas; without it those checks say they are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

if command -v rustup >/dev/null 2>&1; then
    rustup component add clippy rustfmt >/dev/null 2>&1 || true
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
