#!/usr/bin/env bash
# Runs every test of Trellis: lints, unit tests, the store contract, the router suite, the
# embedded end-to-end suite, the fixture table and the crash-recovery suite.
#
# It installs what the tests need first: the toolchain's clippy and rustfmt, Amazon
# DynamoDB Local and moto (scripts/emulators.sh), AWS SAM CLI and cfn-lint
# (scripts/lint-infra.sh, which validates infra/template.yaml), and the public Python SDK
# openwop-client 2.7.0 in a virtual environment — all cached in .cache/. The suites then run inside a
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
# Headless Chromium and its WebDriver server for the run viewer's browser tests (tests/e2e_ui.rs),
# Debian's packages, installed before the tests' network namespace; no test tool downloads a browser.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    echo "test.sh: installing chromium and chromium-driver for the browser tests"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
fi
bash scripts/lint-infra.sh

# The public Python SDK (protocol v2) for tests/e2e_sdk.rs, installed before the tests'
# network namespace cuts PyPI off.
SDK_VENV="${TRELLIS_CACHE_DIR:-$PWD/.cache}/openwop-client-2.7.0"
if [ ! -x "$SDK_VENV/bin/python" ] || ! "$SDK_VENV/bin/python" -c "import openwop_client" 2>/dev/null; then
    rm -rf "$SDK_VENV"
    python3 -m venv "$SDK_VENV"
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$SDK_VENV/bin/pip" install -q "openwop-client==2.7.0"
fi
export TRELLIS_SDK_PYTHON="$SDK_VENV/bin/python"

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked --no-run

if ! unshare -n true 2>/dev/null; then
    echo "test.sh: 'unshare -n' is not permitted here; the emulator suites need a private network namespace" >&2
    exit 1
fi
# Suites that need the emulators or the SDK are #[ignore]d under plain `cargo test` (they
# report as ignored, never as passed); here they run, and fail if what they need is missing.
export TRELLIS_REQUIRE_EMULATORS=1
unshare -n bash scripts/emulators.sh run -- cargo test --workspace --locked --offline -- --include-ignored
