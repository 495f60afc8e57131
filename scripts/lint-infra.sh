#!/usr/bin/env bash
# Validates infra/template.yaml with both checkers (they catch different mistakes):
# `sam validate` (the SAM translator) and cfn-lint. Installs AWS SAM CLI (which brings
# cfn-lint) into a cached virtualenv the first time. Fully offline after the install.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE_DIR="${TRELLIS_CACHE_DIR:-$PWD/.cache}"
SAM_VENV="$CACHE_DIR/sam"
export SAM_CLI_TELEMETRY=0 PIP_DISABLE_PIP_VERSION_CHECK=1

if [ ! -x "$SAM_VENV/bin/sam" ] || [ ! -x "$SAM_VENV/bin/cfn-lint" ]; then
    echo "lint-infra: installing AWS SAM CLI and cfn-lint"
    rm -rf "$SAM_VENV"
    python3 -m venv "$SAM_VENV"
    "$SAM_VENV/bin/pip" install -q aws-sam-cli cfn-lint
fi
"$SAM_VENV/bin/cfn-lint" infra/template.yaml infra/examples/*.yaml
"$SAM_VENV/bin/sam" validate -t infra/template.yaml --region us-east-1
"$SAM_VENV/bin/sam" validate --lint -t infra/template.yaml
echo "lint-infra: infra/template.yaml passes cfn-lint and sam validate; infra/examples pass cfn-lint"
